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
