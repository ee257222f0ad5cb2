"""The Launch, Monitor, History and Cluster pages over what happened to a job (Streamlit's AppTest): a launch that
failed preflight, one launched despite its errors with a reason, a rollout server outside the job, a preflight made
before the hosts changed. Each test keeps a defect a new user met fixed (issues 18 and 26)."""

import json
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from grpo_ui.core.findings import finding, format_findings
from grpo_ui.jobs.service import Jobs, LaunchError
from grpo_ui.jobs.store import Store
from grpo_ui.spec.paths import with_changes
from grpo_ui.spec.presets import presets
from grpo_ui.spec.yaml_io import spec_to_yaml
from tests.pages import APP, ROOT, open_app, texts
from tests.test_example_findings import example

FIRST = next(iter(presets().values()))


def failed_at_preflight(tmp_path, monkeypatch) -> str:
    monkeypatch.setenv("GRPO_UI_DB", str(tmp_path / "db.sqlite"))
    store = Store()
    error = "preflight found errors, nothing was started:\n" + format_findings([
        finding("SSH-UNREACHABLE", "error", "cluster.nodes[0].host", "cannot connect to gpu-a:22", "Check it."),
        finding("SSH-UNREACHABLE", "error", "cluster.nodes[1].host", "cannot connect to gpu-b:22", "Check it.")])
    store.create_job("j1", "j", spec_to_yaml(FIRST), "failed")
    store.set_job("j1", error=error)
    import streamlit as st
    st.cache_resource.clear()  # the pages' stores are cached per process: open this test's
    return error


def test_monitor_after_a_failed_preflight_says_the_nodes_were_never_reached(home, tmp_path, monkeypatch):
    failed_at_preflight(tmp_path, monkeypatch)
    at = AppTest.from_file(str(ROOT / "views/monitor.py"), default_timeout=60).run()
    shown = texts(at)
    assert "never started" in shown and "No GPU samples" not in shown and at.error[0].value.count("\n- ") == 2


def test_history_has_no_empty_final_metrics_and_says_why_it_cannot_compare(home, tmp_path, monkeypatch):
    failed_at_preflight(tmp_path, monkeypatch)
    at = AppTest.from_file(str(ROOT / "views/history.py"), default_timeout=60).run()
    assert not [j for j in at.json if json.loads(j.proto.body) == {}] and "Only one run so far" in texts(at)


def test_an_override_is_kept_with_the_job_and_shown_on_monitor_and_history(home, tmp_path, monkeypatch):
    """A spec with an error launches only with a reason; the reason and the errors stay with the job (here one whose
    host does not exist, so preflight stops it before anything starts)."""
    monkeypatch.setenv("GRPO_UI_DB", str(tmp_path / "db.sqlite"))
    jobs = Jobs(Store())
    spec = with_changes(FIRST, {"cluster.nodes[0].host": "nohost.invalid", "train.num_generations": 7})
    with pytest.raises(LaunchError, match="the spec has errors"):
        jobs.launch(jobs.plan(spec, "no-reason"))
    with pytest.raises(LaunchError, match="preflight"):
        jobs.launch(jobs.plan(spec, "with-reason"), preflight=True, override="a test of the override")
    import streamlit as st
    st.cache_resource.clear()
    pages = [AppTest.from_file(str(ROOT / f"views/{p}.py"), default_timeout=60).run() for p in ("monitor", "history")]
    note = "Launched despite GRPO-BATCH-DIV, with the reason: a test of the override"
    assert [j.id for j in jobs.store.jobs()] == ["with-reason"] and all(note in texts(p) for p in pages)


def test_a_failed_launch_lists_each_problem(home, tmp_path, monkeypatch):
    """Two nodes whose hosts do not exist: preflight stops the launch with one finding per node."""
    monkeypatch.setenv("GRPO_UI_DB", str(tmp_path / "db.sqlite"))
    node = FIRST.cluster.nodes[0].model_dump(exclude_unset=True)
    two = with_changes(FIRST, {"cluster.nodes": [node | {"host": "nohost-a.invalid"}, node | {"host": "nohost-b.invalid"}]})
    (home / "draft.yaml").write_text(spec_to_yaml(two))
    import streamlit as st
    st.cache_resource.clear()
    at = AppTest.from_file(str(ROOT / "views/launch.py"), default_timeout=60).run()
    next(b for b in at.button if b.label == "Launch").click().run()
    shown = at.error[-1].value
    assert shown.startswith("preflight found errors") and shown.count("\n- ") >= 2


def test_history_shows_a_dash_for_metrics_a_job_never_logged(home, tmp_path, monkeypatch):
    from streamlit.dataframe_util import convert_arrow_bytes_to_pandas_df
    failed_at_preflight(tmp_path, monkeypatch)
    at = AppTest.from_file(str(ROOT / "views/history.py"), default_timeout=60).run()
    shown = convert_arrow_bytes_to_pandas_df(at.dataframe[0].proto.arrow_data.styler.display_values)
    assert list(shown.iloc[0][["reward", "kl", "estimate GiB", "measured GiB"]]) == ["—"] * 4 and \
        len(shown.iloc[0]["minutes"].split(".")[1]) == 1


def test_preflight_says_a_host_it_could_not_reach_was_not_reached(home):
    from grpo_ui.backends.preflight import HostFacts
    from grpo_ui.backends.preflight.status import PreflightRun
    at = AppTest.from_file(str(ROOT / "views/cluster.py"), default_timeout=60)
    at.session_state["preflight_runs"] = {1: PreflightRun.of(
        FIRST, [HostFacts("gpu-x", error="cannot connect to gpu-x:22")], [])}
    row = next(d for d in at.run().dataframe if "GPUs" in d.value.columns).value.to_dict("records")[0]
    assert row["GPUs"] == "not reached" and row["python"] == row["disk free GiB"] == "—"


# --- 3/4 (the pages). What the example leads to is said where the user looks ------------------------------------

def draft_from(tmp_path, monkeypatch, spec):
    monkeypatch.setenv("GRPO_UI_HOME", str(tmp_path))
    (tmp_path / "draft.yaml").write_text(spec_to_yaml(spec))
    import streamlit
    streamlit.cache_resource.clear()


def test_launch_names_the_rollout_server_outside_the_job_and_whose_gpu_the_estimate_is(tmp_path, monkeypatch):
    """It once said "0 rollout server(s)" and listed a rollout-GPU estimate without a word about the server."""
    spec = with_changes(example("external_server_7b.sh"), {"cluster.external_rollout": True,
                                                           "cluster.nodes[0].gpu_model": "NVIDIA H100 80GB HBM3"})
    draft_from(tmp_path, monkeypatch, spec)
    at = AppTest.from_file(str(Path(APP).parent / "views" / "launch.py"), default_timeout=60).run()
    shown = texts(at)
    assert "Rollout server(s) outside this job, which you start: 127.0.0.1:8000" in shown
    assert "rollout GPU (your server's, outside this job)" in shown
    assert "WANDB_API_KEY" in shown and "no box for it here" in shown  # the tracker's key, where secrets go
    configure = AppTest.from_file(str(APP), default_timeout=60).run()
    assert any("your server's" in m.label for m in configure.metric)


def test_a_preflight_from_before_the_hosts_changed_is_marked_stale_on_the_cluster_page(tmp_path, monkeypatch):
    from grpo_ui.backends.preflight import HostFacts
    from grpo_ui.backends.preflight.status import PreflightRun
    spec = with_changes(example("plugin_reward.sh"), {"cluster.workdir": "/opt/ms-swift"})
    draft_from(tmp_path, monkeypatch, spec)
    at = AppTest.from_file(str(Path(APP).parent / "views" / "cluster.py"), default_timeout=60)
    earlier = with_changes(spec, {"cluster.nodes[0].host": "gpu-old"})
    at.session_state["preflight_runs"] = {1: PreflightRun.of(earlier, [HostFacts("gpu-old", reachable=True)], [])}
    at.run()
    assert any(w.value.startswith("**Stale:** the hosts changed since this preflight") for w in at.warning)


def test_a_preflight_belongs_to_the_draft_it_checked(home):
    """Preflight on one draft (the first preset, on localhost), then a second draft with another cluster (the 8-GPU
    preset on gpu-a): the second's Cluster page showed the first's results as stale, and its step indicator said
    "checked before the cluster changed" for hosts never checked (issue 32, first-hour defect 2). Each draft now
    has its own: none for the second, the first's still there when the tab goes back to it."""
    at = open_app()
    at.switch_page("views/cluster.py").run()
    next(b for b in at.button if b.label == "Run preflight on every host").click().run()
    assert any(d for d in at.dataframe if "GPUs" in d.value.columns)  # the first draft's facts
    at.switch_page("views/configure.py").run()
    at.selectbox(key="preset_choice").set_value("2-7b-full-8x80gb").run()
    next(b for b in at.button if b.label == "Start from this preset").click().run()
    cluster = next(m.value for m in at.markdown if m.value.startswith(":material/") and "[2. Cluster]" in m.value)
    assert "hosts not checked yet" in cluster and "changed" not in cluster
    at.switch_page("views/cluster.py").run()
    assert not [d for d in at.dataframe if "GPUs" in d.value.columns] and not at.warning
    assert [d.value["host"].tolist() for d in at.dataframe] == [["gpu-a"]]  # the second draft's own cluster
    at.switch_page("views/configure.py").run()
    at.selectbox(key="draft_pick").set_value(1).run()
    at.switch_page("views/cluster.py").run()
    assert any(d for d in at.dataframe if "GPUs" in d.value.columns)
