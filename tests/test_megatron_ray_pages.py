"""The pages for megatron rlhf and the Ray backend (Streamlit's AppTest; the browser: tests/test_browser_megatron.py):
Configure's engine choice, the Megatron layout beside the GPUs with the data-parallel size and what divides what,
its findings beside the sizes and fixed in one click, Ray mode's backend finding fixed in one click, the Ray
cluster's two ways; the Cluster page's Ray cluster and Ray's preflight columns; Launch's Ray submission; Monitor
and History over a stored Ray job (the driver's log as a stream of its own, the wait for resources, the dashboard
link, the iterations)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from grpo_ui.backends.preflight import HostFacts
from grpo_ui.backends.preflight.status import PreflightRun
from grpo_ui.backends.ray import RayHandle, RayNode
from grpo_ui.importer import import_uploads
from grpo_ui.jobs.service import HANDLE, STATUS
from grpo_ui.jobs.store import Store
from grpo_ui.launch.plan import DRIVER
from grpo_ui.launch.render import RAY_CONFIG
from grpo_ui.spec.fields import GROUPS
from grpo_ui.spec.paths import with_changes
from grpo_ui.spec.yaml_io import spec_from_yaml, spec_to_yaml
from tests.pages import ROOT, open_app, texts

DATA = Path(__file__).parent / "data" / "megatron"
H100 = "NVIDIA H100 80GB HBM3"


def imported(*names: str):
    """A draft imported from the Megatron material written like ms-swift's examples (tests/data/megatron)."""
    files = [p for name in names for p in ((DATA / name).iterdir() if (DATA / name).is_dir() else [DATA / name])]
    spec, _ = import_uploads({p.name: p.read_bytes() for p in files}, "4.6")
    return spec


MOE = with_changes(imported("moe_full.sh"), {"cluster.nodes[0].gpu_model": H100})
RAY_MODE = with_changes(imported("ray_separate"), {
    "cluster.backend": "ray", "cluster.ray_address": "http://10.0.0.1:8265",
    "cluster.nodes": [{"host": "gpu-a", "address": "10.0.0.1", "gpus": [0, 1, 2, 3], "gpu_model": H100},
                      {"host": "gpu-b", "address": "10.0.0.2", "gpus": [0, 1, 2, 3], "gpu_model": H100,
                       "role": "rollout"}]})


def with_draft(home, spec) -> AppTest:
    (home / "draft.yaml").write_text(spec_to_yaml(spec))
    import streamlit
    streamlit.cache_resource.clear()
    return open_app()


def layout_said(at) -> str:
    return next(c.value for c in at.caption if "DP = " in c.value)


def test_a_megatron_moe_job_shows_its_layout_beside_the_gpus_and_a_wrong_tp_is_fixed_in_one_click(home):
    at = with_draft(home, MOE)
    assert at.radio(key="f:engine_choice").value == "megatron"
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Training GPUs"] == "8" and metrics["Data parallel (DP)"] == "1"
    said = layout_said(at)
    assert "DP = 8 ÷ (TP 4 · PP 2 · CP 1) = 1" in said and ":red[✗]" not in said
    assert ":green[✓] EP 4 divides its 128 experts" in said and ":green[✓] PP 2 divides its 48 layers" in said
    assert "f:train.deepspeed" not in {w.key for w in at.text_area}  # swift rlhf's, not on this engine's form
    at.text_input(key="f:train.tensor_model_parallel_size").set_value("8").run()  # 8 GPUs, so TP 8?
    said = layout_said(at)
    assert ":red[✗] TP·PP·CP = 8·2·1 = 16 divides the 8 training GPUs" in said
    assert ":red[✗] TP 8 divides the 32 attention heads and 4 KV heads of Qwen3-30B-A3B" in said
    assert {m.label: m.value for m in at.metric}["Data parallel (DP)"] == "0"
    beside = [m.value for m in at.markdown if "MEGATRON-WORLD" in m.value or "MEGATRON-TP-HEADS" in m.value]
    assert beside and "does not divide the 8 training GPUs" in beside[0]  # in full beside the layout
    next(b for b in at.button if b.key == "fix:MEGATRON-WORLD").click().run()
    assert at.text_input(key="f:train.tensor_model_parallel_size").value == "4" and ":red[✗]" not in layout_said(at)


def test_switched_to_swift_rlhf_a_megatron_job_keeps_its_set_sizes_in_their_section_to_be_cleared(home):
    at = with_draft(home, MOE)
    at.radio(key="f:engine_choice").set_value("swift").run()
    assert "Training GPUs" not in [m.label for m in at.metric]
    assert any(e.label.startswith(":material/error: ENGINE-FLAG") for e in at.expander)
    at.button_group(key="section").set_value("parallel").run()  # MoE's sizes are set: shown, to be cleared there
    at.text_input(key="f:train.tensor_model_parallel_size").set_value("1").run()
    assert "train.tensor_model_parallel_size" not in next(e.label for e in at.expander if "ENGINE-FLAG" in e.label)


def test_a_swift_rlhf_draft_has_no_megatron_or_ray_section(home):
    at = open_app()  # the first preset: nothing of Megatron set
    assert at.radio(key="f:engine_choice").value == "swift"
    assert not {GROUPS["parallel"], GROUPS["ray"]} & set(at.button_group(key="section").options)
    at.radio(key="f:engine_choice").set_value("megatron").run()
    assert GROUPS["parallel"] in at.button_group(key="section").options and "Training GPUs" in [
        m.label for m in at.metric]


def test_ray_mode_on_ssh_says_so_beside_the_engine_and_one_click_moves_it_to_ray(home):
    at = with_draft(home, with_changes(RAY_MODE, {"cluster.backend": "ssh"}))
    assert at.radio(key="f:engine_choice").value == "megatron-ray"
    assert any(m.value.startswith(":material/error: **RAY-BACKEND**: Ray mode") for m in at.markdown)
    next(b for b in at.button if b.key == "fix:RAY-BACKEND").click().run()
    assert at.selectbox(key="f:cluster.backend").value == "ray" and "RAY-BACKEND" not in texts(at)
    assert at.radio(key="f:ray_cluster").value == "existing"  # the draft names a running cluster
    assert at.text_input(key="f:cluster.ray_address").value == "http://10.0.0.1:8265"
    layout = {m.label: m.value for m in at.metric}
    assert layout["Training GPUs"] == "4" and layout["Data parallel (DP)"] == "2"
    assert "train 4 GPUs, rollout 4 GPUs (2 vLLM replicas), over 1 node (Ray mode)" in layout_said(at)
    at.radio(key="f:ray_cluster").set_value("start").run()  # grpo-ui starts it: the address goes
    saved = spec_from_yaml(Store().drafts()[-1].spec_yaml)
    assert saved.cluster.ray_address is None and at.text_input(key="f:cluster.ray_port").value == "6379"


def cluster_page(home, spec, run: PreflightRun | None = None) -> AppTest:
    (home / "draft.yaml").write_text(spec_to_yaml(spec))
    import streamlit
    streamlit.cache_resource.clear()
    at = AppTest.from_file(str(ROOT / "views/cluster.py"), default_timeout=60)
    if run:
        at.session_state["preflight_runs"] = {1: run}  # the draft made from draft.yaml, the only one
    return at.run()


def test_the_cluster_page_says_which_ray_cluster_and_what_ray_counts_on_each_node(home):
    facts = [HostFacts("gpu-a", reachable=True, python="3.11.9", versions={"ray": "2.60.0", "ms-swift": "4.6.0"},
                       ray_resources={"GPU": 4, "CPU": 32}),
             HostFacts("gpu-b", reachable=True, python="3.11.9", versions={"ray": "2.60.0", "ms-swift": "4.6.0"},
                       ray_resources={"GPU": 2, "CPU": 32})]
    at = cluster_page(home, RAY_MODE, PreflightRun.of(RAY_MODE, facts, []))
    shown = texts(at)
    assert "The job runs on the Ray cluster at http://10.0.0.1:8265, its driver on gpu-a." in shown
    assert "Ray dashboard: [http://10.0.0.1:8265](http://10.0.0.1:8265)" in shown
    rows = next(d for d in at.dataframe if "Ray GPU / CPU" in d.value.columns).value.to_dict("records")
    assert [(r["ray"], r["Ray GPU / CPU"]) for r in rows] == [("2.60.0", "4 / 32"), ("2.60.0", "2 / 32")]
    started = cluster_page(home, with_changes(RAY_MODE, {"cluster.ray_address": None, "cluster.ray_keep": True}))
    shown = texts(started)
    assert "a Ray cluster grpo-ui starts on gpu-a, gpu-b (head gpu-a; kept when the job ends)" in shown
    assert "GCS on port 6379, the dashboard and Jobs API on port 8265, bound to 10.0.0.1 only" in shown
    assert "Ray dashboard: [http://10.0.0.1:8265](http://10.0.0.1:8265) (while a job runs, and after: kept)" in shown


def test_ssh_preflight_rows_have_no_ray_columns(home):
    plain = with_changes(RAY_MODE, {"cluster.backend": "ssh"})
    at = cluster_page(home, plain, PreflightRun.of(plain, [HostFacts("gpu-a", reachable=True)], []))
    assert "Ray cluster" not in texts(at) and all("ray" not in d.value.columns for d in at.dataframe)


def test_launch_shows_what_ray_is_given_and_opens_on_the_ray_config(home):
    (home / "draft.yaml").write_text(spec_to_yaml(RAY_MODE))
    import streamlit
    streamlit.cache_resource.clear()
    at = AppTest.from_file(str(ROOT / "views/launch.py"), default_timeout=60).run()
    submitted = next(c.value for c in at.code if c.value.startswith("Ray job on "))
    assert "Ray job on the Ray cluster at http://10.0.0.1:8265, its driver on gpu-a" in submitted
    assert f"(runs megatron rlhf --use_ray true --config {RAY_CONFIG})" in submitted
    assert "placement: train 4 GPU(s), rollout 4 GPU(s) (2 vLLM replica(s)), over 1 node(s)" in submitted
    assert at.selectbox[0].value == RAY_CONFIG and "ms-swift's Ray mode on 2 node(s)" in texts(at)


def test_launch_of_the_per_node_scripts_on_ray_names_the_script_each_node_runs(home):
    from tests.test_ray import ray_spec
    from tests.tiny_job import ASSETS

    class Host:
        def __init__(self, k):
            self.name, self.addr, self.iface = f"h{k}", f"10.0.0.{k + 1}", "eth0"
    spec = ray_spec([Host(0), Host(1)], home, 3)
    (home / "draft.yaml").write_text(spec_to_yaml(spec))
    import streamlit
    streamlit.cache_resource.clear()
    assert ASSETS  # the tiny job's paths: nothing is read from them here
    at = AppTest.from_file(str(ROOT / "views/launch.py"), default_timeout=60).run()
    submitted = next(c.value for c in at.code if c.value.startswith("Ray job on "))
    assert "a Ray cluster grpo-ui starts on h0, h1 (head h0; ended when the job ends)" in submitted
    assert "ray_driver.py ray_plan.json" in submitted and "h0 node_0.sh, h1 node_1.sh" in submitted
    assert "Ray: a Ray cluster grpo-ui starts on h0, h1" in texts(at)


@pytest.fixture
def stored_ray_job(tmp_path, monkeypatch):
    """A Ray-mode job in the store as the watcher leaves it while Ray has not placed its groups: its handle, the
    backend's words, the driver's lines (stream DRIVER) and the last rank's iterations."""
    monkeypatch.setenv("GRPO_UI_HOME", str(tmp_path))
    monkeypatch.setenv("GRPO_UI_DB", str(tmp_path / "db.sqlite"))
    store = Store()
    store.create_job("ray-1", RAY_MODE.name, spec_to_yaml(RAY_MODE), "starting")
    handle = RayHandle("ray-1", "/runs/ray-1", "abc", "ray-1-abc", "http://10.0.0.1:8265", driver=True,
                       nodes=[RayNode(0, "trainer", 0, "ray_job.sh", "10.0.0.1"),
                              RayNode(1, "rollout", None, "ray_job.sh", "10.0.0.2")])
    store.set_meta("ray-1", HANDLE, handle.to_json())
    for n in handle.nodes:
        store.add_node("ray-1", n.index, ["gpu-a", "gpu-b"][n.index], n.role, n.rank, n.script, handle.run_dir)
    waiting = "waiting for resources: 1 placement group(s) of ms-swift's (4 GPU, each on one node) not placed yet"
    store.set_meta("ray-1", STATUS, json.dumps({"detail": f"Ray job ray-1-abc: RUNNING ({handle.link}): {waiting}",
                                                "reason": waiting, "queue_position": None}))
    store.add_log_lines("ray-1", DRIVER, ["[INFO:swift] Ray mode: creating resource pools",
                                          "(MegatronWorker pid=8123, ip=10.0.0.1) [INFO:swift] iteration 3/50"])
    for step in (1, 2, 3):
        store.add_metrics("ray-1", step, {"max_steps": 50.0, "loss": 0.1 * step})
    import streamlit
    streamlit.cache_resource.clear()
    return store


def test_monitor_says_a_ray_job_waits_for_resources_links_its_dashboard_and_shows_the_driver_first(stored_ray_job):
    at = AppTest.from_file(str(ROOT / "views/monitor.py"), default_timeout=60).run()
    assert any(i.value.startswith("Ray job ray-1-abc: RUNNING") and "waiting for resources: 1 placement group(s)"
               in i.value for i in at.info)
    assert "[The job on the Ray dashboard](http://10.0.0.1:8265/#/jobs/ray-1-abc)" in texts(at)
    assert {m.label: m.value for m in at.metric}["Iteration"] == "3 / 50"
    log = at.selectbox(key="log_node")
    assert log.options == ["driver · the Ray job (with what ms-swift's Ray workers print)"]  # no node log of its own
    assert any("(MegatronWorker pid=8123, ip=10.0.0.1) [INFO:swift] iteration 3/50" in c.value for c in at.code)


def test_history_lists_the_backend_engine_and_layout(stored_ray_job):
    at = AppTest.from_file(str(ROOT / "views/history.py"), default_timeout=60).run()
    row = at.dataframe[0].value.to_dict("records")[0]
    assert (row["backend"], row["engine"], row["layout"]) == ("ray", "megatron rlhf (Ray mode)", "TP 2 · DP 2 on 4 GPUs")
    assert "megatron rlhf (Ray mode) on ray: TP 2 · DP 2 on 4 GPUs" in texts(at)
