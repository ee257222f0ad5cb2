"""The step-time prediction's closed loop without a cluster: a job stored with the metrics of a real ms-swift 4.6 run
(tests/data/captured/slow_reward: 4.1 s steps on this machine's CPU) and the prediction made at launch (a dict as the
launch stores it, or the reason there is none), its measured pace recorded next to it, Monitor and History drawing
both (Streamlit's AppTest), and the calibration rows `calibration export` writes in the format of
tests/data/time_measurements.jsonl."""

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from grpo_ui.doctor.pace import seconds_text
from grpo_ui.jobs.store import Store, TimeAtLaunch, Unavailable
from grpo_ui.jobs.time_loop import comparison, export_rows, record_pace, summary
from grpo_ui.spec.yaml_io import spec_to_yaml, validate_spec
from tests.test_pace import logged

ROOT = Path(__file__).parent.parent
PUBLISHED = [json.loads(line) for line in (ROOT / "tests/data/time_measurements.jsonl").read_text().splitlines()]
PREDICTION = TimeAtLaunch({"step_s": 3.2, "phases_s": {"rollout": 2.1, "train": 1.1}, "steps": 5, "total_h": 0.0047,
                           "gpu_hours": 0.0375, "cost": None, "range": [2.4, 4.3], "assumptions": ["colocated vLLM"]})


def job_spec(**train):
    return validate_spec({"name": "paced", "train": {"model": "Qwen/Qwen2.5-7B-Instruct", "dataset": ["d"],
                                                     "reward_funcs": ["accuracy"], "max_completion_length": 16,
                                                     **train},
                          "rollout": {"use_vllm": True, "vllm_mode": "colocate", "vllm_gpu_memory_utilization": 0.4,
                                      "sleep_level": 1},
                          "cluster": {"nodes": [{"host": "g1", "gpus": [0, 1, 2, 3], "gpu_model": "H100 80GB"},
                                                {"host": "g2", "gpus": [0, 1, 2, 3], "gpu_model": "H100 80GB"}]}})


def stored_job(path: Path, spec, estimate: TimeAtLaunch | Unavailable | None, state: str = "succeeded", upto: int = 5) -> Store:
    store = Store(path)
    store.create_job("j", spec.name, spec_to_yaml(spec), state)
    store.set_job("j", started=1000.0)
    store.add_node("j", 0, "g1", "trainer", 0, "node_0.sh", "/runs/j")
    if estimate is not None:
        store.set_time_estimate("j", estimate)
    for key, series in logged("slow_reward").items():
        for step, value in series:
            if step <= upto:
                store.add_metrics("j", step, {key: value}, ts=1040.0 + 4.1 * step)
    return store


def test_the_prediction_is_kept_with_the_job(tmp_path):
    store = Store(tmp_path / "db.sqlite")
    assert store.time_estimate("j") is None
    store.set_time_estimate("j", PREDICTION)
    assert store.time_estimate("j") == PREDICTION
    store.set_time_estimate("j", Unavailable("no speed facts for this GPU"))
    assert store.time_estimate("j") == Unavailable("no speed facts for this GPU")


def test_measured_next_to_the_prediction(tmp_path):
    store = stored_job(tmp_path / "db.sqlite", job_spec(), PREDICTION)
    measured = record_pace(store, "j", job_spec())
    assert store.time_measured("j") == measured
    assert measured["startup_s"] == pytest.approx(44.1) and measured["logged_intervals"] == 4
    c = comparison(store, "j")
    assert c.no_prediction is None and c.no_pace is None
    assert c.ratio == pytest.approx(measured["median_s"] / 3.2)
    assert c.measured_total_s == pytest.approx(5 * 4.088366) and c.predicted_total_s == pytest.approx(16.92)
    s = summary(store, "j", job_spec())
    assert (s.median, s.predicted, s.ratio) == ("4.1 s", "3.2 s", f"{measured['median_s'] / 3.2:.2f}×")
    assert "Predicted at launch: 3.2 s per step (range 2.4 s–4.3 s)." in s.lines
    assert "Training time: 20 s measured, 17 s predicted." in s.lines
    assert "Completions average 10 of 16 tokens, 0% cut at the cap." in s.lines
    assert "Rollout share unknown: no whole vLLM sleep/wake cycle in the log of rank 0's node." in s.lines


@pytest.mark.parametrize("estimate,reason", [
    (Unavailable("the node's GPU has no speed facts (CPU)"), "No prediction: the node's GPU has no speed facts (CPU)."),
    (None, "No prediction was stored with this job (it was launched before grpo-ui predicted step times).")])
def test_without_a_prediction_the_reason_is_shown(tmp_path, estimate, reason):
    store = stored_job(tmp_path / "db.sqlite", job_spec(), estimate)
    s = summary(store, "j", job_spec())
    assert reason in s.lines and (s.predicted, s.ratio) == ("—", "—") and s.median == "4.1 s"


def test_a_running_job_gets_an_eta_and_one_step_is_not_a_pace_yet(tmp_path):
    store = stored_job(tmp_path / "db.sqlite", job_spec(), PREDICTION, state="running", upto=3)
    measured = record_pace(store, "j", job_spec())
    assert measured["finish_at"] == pytest.approx(1040.0 + 4.1 * 3 + 2 * measured["recent_s"])
    assert comparison(store, "j").measured_total_s == pytest.approx(measured["train_s"] + measured["eta_s"])
    first_only = stored_job(tmp_path / "one.sqlite", job_spec(), PREDICTION, state="running", upto=1)
    s = summary(first_only, "j", job_spec())
    assert s.median == "—" and s.lines[0].startswith("Only the first step is logged (warm-up")


def test_exported_rows_follow_the_published_schema(tmp_path):
    store = stored_job(tmp_path / "db.sqlite", job_spec(per_device_train_batch_size=4, num_generations=8), PREDICTION)
    (row,), skipped = export_rows(store, ["j"])
    assert skipped == {}
    assert set(row) == set(PUBLISHED[0]) and set(row["config"]) == set(PUBLISHED[0]["config"])
    assert set(row["measured"]) == set(PUBLISHED[0]["measured"])
    measured = store.time_measured("j")
    assert row["measured"]["per"] == "optimizer_step" and row["measured"]["step_s"] == round(measured["median_s"], 4)
    assert row["measured"]["total_steps"] == 5 and row["measured"]["total_h"] == round(5 * 4.088366 / 3600, 4)
    assert row["added"] == "grpo-ui export" and row["framework"] == "ms-swift" and row["algorithm"] == "grpo"
    key = row["source"].split(" — ")[0]
    assert row["split"] == ("held_out" if hashlib.sha256(key.encode()).hexdigest()[0] in "012345" else "fit")
    cfg = row["config"]
    assert (cfg["gpu"], cfg["nodes"], cfg["gpus_per_node"], cfg["trainer_gpus"], cfg["rollout_gpus"]) == (
        "NVIDIA H100 80GB HBM3", 2, 4, 8, None)  # the catalogue's name, as the published rows give it
    assert (cfg["prompts_per_step"], cfg["num_generations"], cfg["max_completion_tokens"]) == (4, 8, 16)
    assert cfg["mean_completion_tokens"] == 10 and cfg["vllm"] is True and cfg["optimizer_steps_per_generation"] == 1
    assert "prediction at launch: 3.2 s/step (range 2.4–4.3)" in row["notes"]
    for published in PUBLISHED:  # the same types as the published rows, field by field
        for k, v in row["config"].items():
            if v is not None and published["config"][k] is not None:
                assert isinstance(v, type(published["config"][k])) or k == "beta", (k, v, published["id"])


def test_exported_rows_load_and_refit_the_constants(tmp_path, monkeypatch):
    """A user's exported rows are read by the fitting code and fitted on with the published fit rows
    (bench/time_calibration.py --fit --rows FILE): the API returns the refit constants, the command prints them with
    each split's error before and after, the user's rows included."""
    from bench import time_calibration as tc
    from grpo_ui.timing import efficiency, lengths

    store = stored_job(tmp_path / "db.sqlite", job_spec(per_device_train_batch_size=4, num_generations=8), PREDICTION)
    rows, _ = export_rows(store, ["j"])
    mine = tmp_path / "mine.jsonl"
    mine.write_text("".join(json.dumps(row) + "\n" for row in rows))
    extra = tc.load(mine)
    assert extra == json.loads(json.dumps(rows)) and tc.evaluate(extra[0]).ours > 0
    for name in tc.FITTED:
        monkeypatch.setattr(efficiency, name, getattr(efficiency, name))
    monkeypatch.setattr(lengths, "FILL", lengths.FILL)
    monkeypatch.setattr(lengths, "TYPICAL_TOKENS", lengths.TYPICAL_TOKENS)
    refit = tc.fit(tc.load(), extra)
    assert set(refit) == {*tc.FITTED, "FILL", "TYPICAL_TOKENS"} and refit == tc.constants()
    assert "your rows" in tc.split_errors(tc.load(), extra)
    done = subprocess.run([sys.executable, "bench/time_calibration.py", "--fit", "--rows", str(mine)],
                          capture_output=True, text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr
    assert f"+ 1 of yours ({mine})" in done.stdout
    for label in ("BANDWIDTH_EFFICIENCY", "TYPICAL_TOKENS", "fit", "held out (seen)", "fresh", "your rows", "range"):
        assert label in done.stdout
    unreadable = subprocess.run([sys.executable, "bench/time_calibration.py", "--fit", "--rows", str(tmp_path / "no")],
                                capture_output=True, text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert unreadable.returncode == 1 and "cannot be read" in unreadable.stderr and "Traceback" not in unreadable.stderr


def test_a_job_without_a_gpu_model_or_steps_gives_no_time_row(tmp_path):
    cpu = validate_spec({"train": {"model": "m", "dataset": ["d"], "reward_funcs": ["format"]},
                         "cluster": {"nodes": [{"host": "h", "gpus": [0]}]}})
    store = stored_job(tmp_path / "db.sqlite", cpu, None)
    store.create_job("k", "k", spec_to_yaml(cpu), "failed")
    rows, skipped = export_rows(store, ["j", "k"])
    assert rows == [] and "no GPU model" in skipped["j"] and skipped["k"] == "no step logged yet"


def test_calibration_export_writes_time_rows(tmp_path):
    stored_job(tmp_path / "db.sqlite", job_spec(), PREDICTION)

    def cli(*args):
        env = {**os.environ, "GRPO_UI_DB": str(tmp_path / "db.sqlite"), "PYTHONPATH": str(ROOT)}
        return subprocess.run([sys.executable, "-m", "grpo_ui", "calibration", "export", *args], capture_output=True,
                              text=True, env=env, cwd=ROOT)
    both = cli("j")  # no GPU samples: no memory row, said so; the time row
    assert both.returncode == 0 and "no measured peaks yet" in both.stderr
    assert [json.loads(line)["id"] for line in both.stdout.splitlines()] == ["grpoui-j-time"]
    appended = cli("--only", "time", "--out", str(tmp_path / "time.jsonl"))
    assert appended.returncode == 0 and json.loads((tmp_path / "time.jsonl").read_text())["measured"]["per"] == (
        "optimizer_step")
    assert cli("j", "--only", "memory").returncode == 1


@pytest.fixture
def pages(tmp_path, monkeypatch):
    monkeypatch.setenv("GRPO_UI_HOME", str(tmp_path))
    monkeypatch.setenv("GRPO_UI_DB", str(tmp_path / "db.sqlite"))
    import streamlit as st
    st.cache_resource.clear()  # the app's jobs service is cached per process: open this test's store

    def run(page: str) -> AppTest:
        at = AppTest.from_file(str(ROOT / "views" / f"{page}.py"), default_timeout=60).run()
        assert not at.exception, at.exception
        return at
    return run


def step_time(at: AppTest) -> dict:
    return {m.label: m.value for m in at.metric}


def test_monitor_and_history_show_measured_beside_predicted(tmp_path, pages):
    store = stored_job(tmp_path / "db.sqlite", job_spec(), PREDICTION)
    store.set_meta("j", "drained", "1")  # ended and read to the end: the page polls nothing
    median = record_pace(store, "j", job_spec())["median_s"]
    monitor = pages("monitor")
    assert "Step time" in [h.value for h in monitor.subheader]
    shown = step_time(monitor)
    assert (shown["measured s/step (median)"], shown["predicted s/step"], shown["measured / predicted"]) == (
        seconds_text(median), "3.2 s", f"{median / 3.2:.2f}×")
    captions = [c.value for c in monitor.caption]
    assert any(c.startswith("First step (warm-up: first rollout, compilation): 4.1 s per step") for c in captions)
    history = pages("history")
    runs = next(d.value for d in history.dataframe if "measured s/step" in d.value.columns).to_dict("records")[0]
    assert (runs["predicted s/step"], runs["measured s/step"], runs["predicted h"]) == (3.2, float(f"{median:.3g}"),
                                                                                        0.0047)
    assert runs["measured h"] == float(f"{5 * 4.088366 / 3600:.3g}")
    assert any("measured 4.1 s per step (median), predicted 3.2 s" in m.value for m in history.markdown)


def test_monitor_says_why_there_is_no_prediction(tmp_path, pages):
    store = stored_job(tmp_path / "db.sqlite", job_spec(), Unavailable("the node's GPU has no speed facts (CPU)"))
    store.set_meta("j", "drained", "1")
    monitor = pages("monitor")
    assert step_time(monitor)["predicted s/step"] == "—"
    assert "No prediction: the node's GPU has no speed facts (CPU)." in [c.value for c in monitor.caption]
