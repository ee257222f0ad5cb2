"""The one door (grpo_ui.api) as a library, without a page: where the form shows each finding, the hosts of an ssh
config, a preflight's facts as a row, and a stored job as Monitor, History and `status` read it — read only: the
pages no longer write the memory peaks (the watcher does, on each pass)."""

from __future__ import annotations

import json
import time

from streamlit.testing.v1 import AppTest

from grpo_ui.api.cluster import HostFacts, facts_row, ssh_hosts
from grpo_ui.api.jobs import BackendWords, MemoryAtLaunch, Unavailable
from grpo_ui.api.specs import beside_fields
from grpo_ui.api.workspace import Workspace
from grpo_ui.backends.remote.gpu import parse_smi_line
from grpo_ui.core.findings import finding
from grpo_ui.jobs.follow import STACKS, STACKS_AT
from grpo_ui.jobs.memory_loop import record_peaks
from grpo_ui.jobs.service import HANDLE, STATUS
from grpo_ui.jobs.store import Store
from grpo_ui.memory.estimate import estimate_spec
from grpo_ui.spec.presets import presets
from grpo_ui.spec.yaml_io import spec_to_yaml
from tests.pages import ROOT
from tests.test_telemetry import BUSY

SPEC = next(iter(presets().values()))


def test_a_finding_is_shown_in_full_beside_its_first_field_and_pointed_to_beside_the_others():
    batch = finding("GRPO-BATCH-DIV", "error", ("train.num_generations", "train.per_device_train_batch_size"),
                    "not divisible", "change it")
    hint = finding("SEED-DATALOADER-WORKERS", "warning", "train.dataloader_num_workers", "too few", "raise it")
    slurm = finding("SLURM-GPUS-MISMATCH", "error", ("slurm.gpus_per_node", "cluster.nodes"), "mismatch", "match them")
    places = ["cluster", "train.per_device_train_batch_size", "train.num_generations", "train.dataloader_num_workers"]
    beside = beside_fields([hint, batch, slurm], places, {"cluster.nodes[1].gpus": "not a list of GPU ids"})
    assert [(f.id, full) for f, full in beside["cluster"].findings] == [("SLURM-GPUS-MISMATCH", True)]
    assert beside["cluster"].parse_error == "cluster.nodes[1].gpus: not a list of GPU ids"
    assert [(f.id, full) for f, full in beside["train.per_device_train_batch_size"].findings] == [("GRPO-BATCH-DIV", True)]
    assert [(f.id, full) for f, full in beside["train.num_generations"].findings] == [("GRPO-BATCH-DIV", False)]
    assert beside["train.num_generations"].parse_error is None
    assert [f.id for f, _ in beside["train.dataloader_num_workers"].findings] == ["SEED-DATALOADER-WORKERS"]


def test_the_hosts_of_an_ssh_config_without_its_patterns(tmp_path, monkeypatch):
    (tmp_path / "config").write_text("Host gpu-a\n  HostName 10.0.0.1\n  User me\n\nHost gpu-b jump\n\n"
                                     "Host *.internal !bastion\n  User ops\n")
    monkeypatch.setenv("GRPO_UI_SSH_CONFIG", str(tmp_path / "config"))
    assert ssh_hosts() == {"gpu-a": "10.0.0.1", "gpu-b": "gpu-b", "jump": "jump"}
    monkeypatch.setenv("GRPO_UI_SSH_CONFIG", str(tmp_path / "none"))
    assert ssh_hosts() == {}


def test_a_host_preflight_did_not_reach_shows_not_reached_and_dashes():
    row = facts_row(HostFacts("gpu-x", error="cannot connect to gpu-x:22"))
    assert (row["GPUs"], row["python"], row["disk free GiB"], row["error"]) == (
        "not reached", "—", "—", "cannot connect to gpu-x:22")
    reached = facts_row(HostFacts("gpu-y", reachable=True, python="3.11", disk_free_gib=812.4, gpus=[
        {"gpu_index": 0, "name": "NVIDIA H100 80GB HBM3", "mem_used": 1.0, "mem_total": 81559.0}]))
    assert reached["GPUs"] == "0: NVIDIA H100 80GB HBM3 (1/81559 MiB)" and reached["disk free GiB"] == "812"


def stored_job(tmp_path, state: str = "succeeded") -> Workspace:
    store = Store(tmp_path / "db.sqlite")
    store.create_job("j", SPEC.name, spec_to_yaml(SPEC), state)
    store.set_job("j", started=time.time() - 600, ended=time.time() - 60 if state != "running" else None)
    host = SPEC.trainer_nodes()[0].host
    store.add_node("j", 0, host, "trainer", 0, "node_0.sh", "/runs/j")
    store.set_memory_estimate("j", MemoryAtLaunch(estimate_spec(SPEC).to_dict()))
    store.set_time_estimate("j", Unavailable("no GPU speed facts"))
    store.add_gpu_samples("j", [parse_smi_line(BUSY[0], host, time.time() - 100)])
    for step, reward in ((1, 0.123456), (2, 0.5)):
        store.add_metrics("j", step, {"reward": reward, "kl": 0.001, "max_steps": 2})
    store.upsert_alert("j", "NO-LEARNING-SIGNAL", "error", "No learning signal: x", "reward_std [0]", "fix it")
    return Workspace(tmp_path / "db.sqlite")


def test_history_row_reads_the_estimate_kept_at_launch_and_the_peaks_the_watcher_recorded(tmp_path):
    workspace = stored_job(tmp_path)
    view = workspace.view("j")
    row = view.history_row()
    assert row["estimate GiB"] == round(estimate_spec(SPEC).trainer.peak_gib, 2) > 0  # as stored at launch
    assert row["measured GiB"] is None  # nothing recorded the peaks yet: a read never does
    record_peaks(Store(tmp_path / "db.sqlite"), "j", SPEC)
    assert view.history_row()["measured GiB"] == round(61234 / 1024, 1)
    assert (row["reward"], row["steps"], row["alerts"], row["predicted s/step"]) == (0.5, 2, "NO-LEARNING-SIGNAL", None)
    assert view.no_memory_estimate() is None and "No prediction: no GPU speed facts." in view.step_time().lines


def test_what_a_job_view_says_of_its_state(tmp_path):
    workspace = stored_job(tmp_path, "failed")
    store = Store(tmp_path / "db.sqlite")
    view = workspace.view("j")
    assert view.never_started and view.backend_words() is None and view.stacks() is None
    store.set_meta("j", HANDLE, json.dumps({"backend": "slurm", "job": "12"}))
    store.set_meta("j", STATUS, json.dumps({"detail": "Slurm job 12: PENDING (Priority)", "reason": "Priority",
                                            "queue_position": 2}))
    store.set_meta("j", STACKS, (ROOT / "tests/data/captured/reward_slowing.pyspy").read_text())
    store.set_meta("j", STACKS_AT, "100")
    assert not view.never_started and view.backend_words() == BackendWords("Slurm job 12: PENDING (Priority)",
                                                                           "Priority", 2)
    assert view.stacks().taken_at == 100 and {s.summary for s in view.stacks().ranks} == {"reward"}
    assert workspace.view("nope") is None


def test_the_monitor_page_writes_no_memory_peaks(tmp_path, monkeypatch):
    """It recorded them on every refresh although the watcher already does on each pass; an ended job's page reads
    what the watcher left."""
    stored_job(tmp_path)
    store = Store(tmp_path / "db.sqlite")
    store.set_meta("j", "drained", "1")  # its last lines were fetched when it ended: no pass is due
    monkeypatch.setenv("GRPO_UI_HOME", str(tmp_path))
    monkeypatch.setenv("GRPO_UI_DB", str(tmp_path / "db.sqlite"))
    import streamlit as st
    st.cache_resource.clear()
    at = AppTest.from_file(str(ROOT / "views/monitor.py"), default_timeout=60).run()
    assert not at.exception and "Alerts (1)" in [h.value for h in at.subheader]
    assert store.memory_peaks("j") == []


# --- megatron rlhf and the Ray backend: what the pages draw (tests/test_megatron_ray_pages.py draws it) ----------

def test_the_megatron_layout_says_what_divides_what_from_the_resolved_job():
    from grpo_ui.api.specs import parallel_layout, resolve, with_changes
    from tests.test_megatron_ray_pages import MOE, RAY_MODE

    moe = parallel_layout(resolve(MOE))
    assert (moe.world, moe.dp, moe.dp_text, moe.gpus) == (8, 1, "8 ÷ (TP 4 · PP 2 · CP 1)", "8 training GPUs (1 node × 8)")
    assert all(r.holds for r in moe.relations) and len(moe.relations) == 8
    wrong = parallel_layout(resolve(with_changes(MOE, {"train.expert_model_parallel_size": 3,
                                                       "train.global_batch_size": 9})))
    failing = [r.text for r in wrong.relations if not r.holds]
    assert failing == ["EP·ETP·PP = 3·1·2 = 6 divides the 8 training GPUs", "EP 3 divides its 128 experts",
                       "num_generations 8 divides the generation batch 9"]
    ray = parallel_layout(resolve(RAY_MODE))
    assert ray.gpus == "train 4 GPUs, rollout 4 GPUs (2 vLLM replicas), over 1 node (Ray mode)" and ray.dp == 2
    assert parallel_layout(resolve(SPEC)) is None  # swift rlhf: no Megatron layout


def test_history_words_of_each_engine():
    from grpo_ui.api.specs import resolve
    from grpo_ui.spec.layout import engine_words, layout_words
    from tests.test_megatron_ray_pages import MOE, RAY_MODE

    said = [(engine_words(e), layout_words(e)) for e in map(resolve, (SPEC, MOE, RAY_MODE))]
    assert said == [("swift rlhf", "DP 4 on 1 × 4 GPUs, zero3"), ("megatron rlhf", "TP 4 · PP 2 · EP 4 · DP 1 on 8 GPUs"),
                    ("megatron rlhf (Ray mode)", "TP 2 · DP 2 on 4 GPUs")]


def test_the_form_draws_each_engines_arguments_and_the_layout_apart():
    from grpo_ui.api.specs import ARGS, form
    from tests.test_megatron_ray_pages import MOE

    tp = form.FIELDS_BY_PATH["train.tensor_model_parallel_size"]
    deepspeed = form.FIELDS_BY_PATH["train.deepspeed"]
    assert [form.on_form(tp, SPEC, "4.6", e) for e in ("swift", "megatron")] == [False, True]
    assert [form.on_form(deepspeed, MOE, "4.6", e) for e in ("swift", "megatron")] == [True, False]
    assert form.on_form(tp, MOE, "4.6", "swift")  # set: shown so it can be cleared
    assert "parallel" not in form.sections(SPEC, "4.6", "swift") and "parallel" in form.sections(SPEC, "4.6", "megatron")
    assert "ray" not in form.sections(SPEC, "4.6", "megatron") + form.sections(SPEC, "4.6", "swift")  # use_ray: apart
    assert set(form.apart("megatron")) - set(form.apart("swift")) == set(form.LAYOUT_FIELDS) <= {d.path for d in ARGS}
    assert [form.engine_choice(e, r) for e, r in (("swift", False), ("megatron", False), ("megatron", True),
                                                  ("swift", True))] == ["swift", "megatron", "megatron-ray", "swift"]
    assert all(form.engine_choice(**{k.split(".")[-1]: v for k, v in changes.items()}) == key
               for key, (_, changes) in form.ENGINE_CHOICES.items())
    assert (form.ray_cluster(" "), form.ray_cluster("http://10.0.0.1:8265")) == ("start", "existing")


def test_the_layouts_findings_go_beside_the_layout_in_full_first():
    from grpo_ui.api.specs import LAYOUT

    world = finding("MEGATRON-WORLD", "error", ("train.tensor_model_parallel_size", "train.pipeline_model_parallel_size"),
                    "does not divide", "use TP 4")
    tight = finding("MEMORY-TIGHT", "warning", ("train.micro_batch_size", "train.tensor_model_parallel_size"), "tight",
                    "recompute")
    beside = beside_fields([world, tight], ["cluster", LAYOUT, "train.micro_batch_size"],
                           {"train.context_parallel_size": "not a whole number"})
    assert [(f.id, full) for f, full in beside[LAYOUT].findings] == [("MEGATRON-WORLD", True), ("MEMORY-TIGHT", True)]
    assert beside[LAYOUT].parse_error == "train.context_parallel_size: not a whole number"
    assert [(f.id, full) for f, full in beside["train.micro_batch_size"].findings] == [("MEMORY-TIGHT", False)]


def test_a_ray_preflight_row_has_rays_version_and_what_it_counts():
    facts = HostFacts("gpu-a", reachable=True, python="3.11", versions={"ray": "2.60.0"}, ray_resources={"GPU": 4.0,
                                                                                                          "CPU": 16.0})
    assert (facts_row(facts, "ray")["ray"], facts_row(facts, "ray")["Ray GPU / CPU"]) == ("2.60.0", "4 / 16")
    assert facts_row(HostFacts("gpu-b", reachable=True), "ray")["Ray GPU / CPU"] == "—"  # a cluster grpo-ui starts
    assert "ray" not in facts_row(facts) and "Ray GPU / CPU" not in facts_row(facts, "slurm")


def test_where_each_backend_runs_a_job():
    from grpo_ui.api.cluster import dashboard_address, where
    from grpo_ui.api.specs import with_changes
    from tests.test_megatron_ray_pages import RAY_MODE

    started = with_changes(RAY_MODE, {"cluster.ray_address": None, "cluster.ray_dashboard_port": 8300})
    assert where(with_changes(RAY_MODE, {"cluster.backend": "ssh"})) == "gpu-a, gpu-b"
    assert where(with_changes(RAY_MODE, {"cluster.backend": "slurm", "cluster.login": "login-1"})) == \
        "Slurm (sbatch on login-1)"
    assert where(RAY_MODE) == "Ray: the Ray cluster at http://10.0.0.1:8265, its driver on gpu-a"
    assert where(started) == "Ray: a Ray cluster grpo-ui starts on gpu-a, gpu-b (head gpu-a; ended when the job ends)"
    assert (dashboard_address(RAY_MODE.cluster), dashboard_address(started.cluster)) == (
        "http://10.0.0.1:8265", "http://10.0.0.1:8300")


def test_a_ray_jobs_logs_and_dashboard_link(tmp_path):
    from grpo_ui.api.jobs import DRIVER
    from grpo_ui.backends.ray import RayHandle, RayNode
    from tests.test_megatron_ray_pages import RAY_MODE

    store = Store(tmp_path / "db.sqlite")
    for job, spec in (("mode", RAY_MODE), ("scripts", RAY_MODE.model_copy(update={"engine": "swift"}))):
        store.create_job(job, spec.name, spec_to_yaml(spec), "running")
        for k, role in enumerate(("trainer", "rollout")):
            store.add_node(job, k, f"gpu-{'ab'[k]}", role, 0 if k == 0 else None, f"node_{k}.sh", f"/runs/{job}")
    view = Workspace(tmp_path / "db.sqlite").view
    assert view("mode").link is None  # not started yet
    store.set_meta("mode", HANDLE, RayHandle("mode", "/runs/mode", "t", "mode-t", "http://10.0.0.1:8265",
                                             nodes=[RayNode(0, "trainer", 0, "ray_job.sh", "10.0.0.1")]).to_json())
    assert view("mode").link == ("the Ray dashboard", "http://10.0.0.1:8265/#/jobs/mode-t")
    assert [(s.stream, s.label) for s in view("mode").log_streams()] == [
        (DRIVER, "driver · the Ray job (with what ms-swift's Ray workers print)")]
    assert [s.label for s in view("scripts").log_streams()] == [
        "driver · the Ray job", "node 0 · gpu-a · trainer rank 0", "node 1 · gpu-b · rollout"]
    assert (view("mode").step_word, view("scripts").step_word) == ("Iteration", "Step")
    assert [s.stream for s in stored_job((tmp_path / "ssh").mkdir() or tmp_path / "ssh").view("j").log_streams()] == [0]  # SSH: no driver
def test_an_import_outcome_is_the_draft_with_its_notes_or_why_there_is_none():
    """import_files: one outcome per import, exactly one of a spec, a refusal or an error (the page keeps only the
    latest, so an earlier import's words never stand beside a later one's)."""
    from grpo_ui.api.specs import PASTED, import_files
    from tests.test_example_findings import EXAMPLES
    from tests.test_import_scripts import UNCLOSED

    made = import_files({"grpo_7b.sh": (EXAMPLES / "external_server_7b.sh").read_bytes()}, "4.6")
    assert made.spec is not None and not made.refused and made.error is None
    assert any("--tuner_type" in n.message for n in made.notes)
    refused = import_files({PASTED: UNCLOSED.encode()}, "4.6")
    assert refused.spec is None and refused.refused and not refused.notes and refused.error is None
    kept = import_files({PASTED: UNCLOSED.encode()}, "4.6", keep_partial=True)
    assert kept.spec is not None and "train.system" in kept.spec.import_errors
    broken = import_files({"job.yaml": b"name: x\ntrain:\n  num_generations: banana\n"}, "4.6")
    assert broken.spec is None and not broken.refused and "num_generations" in broken.error
    moved = import_files({"job.yaml": b"name: x\nenv: {HF_TOKEN: hf_x}\n"}, "4.6")  # a job YAML with its token
    assert moved.spec.secret_env == ["HF_TOKEN"] and "ENV-SECRET-MOVED" in {n.id for n in moved.notes}
