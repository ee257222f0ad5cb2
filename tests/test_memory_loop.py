"""The memory estimate's closed loop without a cluster: which GPU is which rank, peaks raised from stored samples,
the estimate-vs-measured table, calibration rows and the `calibration export` command. The GPU side is a stand-in
(no GPU here): nvidia-smi lines in its documented format (tests/data/nvidia-smi/busy.csv) and a rank-0 metrics line
of a real ms-swift 3.x GRPO run (ms-swift issue #6083, quoted in tests/test_monitor.py) with its memory(GiB)."""

import json
import os
import subprocess
import sys
from pathlib import Path

from bench.calibration import evaluate, held_out, problems
from grpo_ui.backends.remote.gpu import parse_smi_line
from grpo_ui.backends.remote.runner import LocalRunner
from grpo_ui.doctor.metrics import parse_stdout_line
from grpo_ui.jobs.memory_loop import comparison, export_rows, gpu_roles, record_peaks
from grpo_ui.jobs.store import MemoryAtLaunch, Store
from grpo_ui.knowledge.catalog import fetch_hf_config
from grpo_ui.launch.plan import assessment_at_launch
from grpo_ui.memory.estimate import estimate_spec
from grpo_ui.spec.yaml_io import spec_to_yaml, validate_spec
from tests.test_catalog import QWEN25_7B_CONFIG
from tests.test_monitor import V3_LINE

ROOT = Path(__file__).parent.parent
BUSY = (ROOT / "tests/data/nvidia-smi/busy.csv").read_text().splitlines()


def job_spec(model="Qwen/Qwen2.5-7B-Instruct", **train):
    return validate_spec({"name": "loop", "train": {"model": model, "dataset": ["d"], "reward_funcs": ["accuracy"],
                                                    **train},
                          "rollout": {"vllm_gpu_memory_utilization": 0.4, "sleep_level": 1},
                          "cluster": {"nodes": [{"host": "g1", "gpus": [0, 1, 2, 3], "gpu_model": "H100 80GB"},
                                                {"host": "g2", "gpus": [0, 1, 2, 3], "gpu_model": "H100 80GB"}]}})


def test_ranks_follow_torchrun_order_and_vllm_gpus_have_none():
    roles = gpu_roles(job_spec())
    assert roles[("g1", 0)] == ("trainer", 0) and roles[("g2", 3)] == ("trainer", 7)
    server = validate_spec({"train": {"model": "m", "dataset": ["d"], "reward_funcs": ["accuracy"]},
                            "rollout": {"vllm_mode": "server"},
                            "cluster": {"nodes": [{"host": "t", "gpus": [0, 1]},
                                                  {"host": "r", "role": "rollout", "gpus": [0, 1]}]}})
    assert gpu_roles(server) == {("t", 0): ("trainer", 0), ("t", 1): ("trainer", 1), ("r", 0): ("rollout", None),
                                 ("r", 1): ("rollout", None)}


def stored_job(tmp_path, spec) -> Store:
    store = Store(tmp_path / "db.sqlite")
    store.create_job("j", spec.name, spec_to_yaml(spec), "running")
    store.set_memory_estimate("j", MemoryAtLaunch(assessment_at_launch(spec)[1]))
    for host in ("g1", "g2"):
        store.add_gpu_samples("j", [parse_smi_line(line, host, 1.0) for line in BUSY])
    step, values = parse_stdout_line(V3_LINE)
    store.add_metrics("j", step, values)
    return store


def test_peaks_rise_with_the_samples_and_sit_next_to_the_estimate(tmp_path):
    spec = job_spec()
    store = stored_job(tmp_path, spec)
    record_peaks(store, "j", spec)
    store.add_gpu_samples("j", [parse_smi_line(BUSY[0].replace("61234", "70000"), "g1", 2.0)])
    record_peaks(store, "j", spec)
    rows = {(r["host"], r["GPU"]): r for r in comparison(store, "j", spec)}
    assert rows[("g1", 0)]["nvidia-smi peak GiB"] == round(70000 / 1024, 2)
    assert rows[("g1", 0)]["memory(GiB) logged"] == 65.09 and rows[("g2", 0)]["memory(GiB) logged"] is None
    assert rows[("g2", 3)]["nvidia-smi peak GiB"] == round(61234 / 1024, 2)
    expected = estimate_spec(spec).trainer
    assert rows[("g1", 0)]["estimated peak GiB"] == round(expected.peak_gib, 2)
    assert len(rows) == 8  # GPUs 4-7 of busy.csv are not the job's


def test_exported_rows_are_calibration_rows_the_estimator_can_rebuild(tmp_path):
    spec = job_spec(per_device_train_batch_size=4, max_completion_length=2048)
    rows = export_rows(stored_job(tmp_path, spec), ["j"])
    assert [r["compare"] for r in rows] == ["peak", "torch"]
    assert rows[0]["measured_gib"] == round(61234 / 1024, 3) and rows[1]["measured_gib"] == 65.09
    for row in rows:
        assert problems(row) == [] and row["estimated_gib"] > 0 and held_out(row) in (True, False)
        assert evaluate(row).ours > 0
        assert row["config"]["per_device_train_batch_size"] == 4 and row["config"]["gpus_per_node"] == 4


def test_a_model_the_catalogue_lacks_is_estimated_from_its_config_json_on_the_node(tmp_path):
    model = tmp_path / "house-model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(QWEN25_7B_CONFIG))
    spec = job_spec(model=str(model))
    on_node = lambda path: fetch_hf_config(LocalRunner(), path)  # noqa: E731
    assert assessment_at_launch(spec, read_config=on_node)[1]["roles"][0]["peak_gib"] > 0
    missing = assessment_at_launch(job_spec(model="/nowhere/model"), read_config=on_node)[1]
    assert "unknown architecture" in missing["error"] and "On node 0" in missing["error"]


def test_calibration_export_command(tmp_path):
    spec = job_spec()
    stored_job(tmp_path, spec)
    empty = Store(tmp_path / "empty.sqlite")
    empty.create_job("k", spec.name, spec_to_yaml(spec), "running")

    def cli(db, *args):
        env = {**os.environ, "GRPO_UI_DB": str(tmp_path / db), "PYTHONPATH": str(ROOT)}
        return subprocess.run([sys.executable, "-m", "grpo_ui", "calibration", "export", *args], capture_output=True,
                              text=True, env=env, cwd=ROOT)
    out = cli("db.sqlite", "j")
    assert out.returncode == 0 and [json.loads(line)["compare"] for line in out.stdout.splitlines()] == ["peak", "torch"]
    appended = cli("db.sqlite", "--only", "memory", "--out", str(tmp_path / "rows.jsonl"))
    assert appended.returncode == 0 and len((tmp_path / "rows.jsonl").read_text().splitlines()) == 2
    mixed = cli("db.sqlite", "--out", str(tmp_path / "rows.jsonl"))  # memory and time rows belong in separate files
    assert mixed.returncode == 2 and "--only" in mixed.stderr
    assert cli("db.sqlite", "nope").returncode == 2
    none = cli("empty.sqlite", "k")
    assert none.returncode == 1 and "no measured peaks yet" in none.stderr
