"""The GPU calibration kit (bench/gpu/) is known to work before a GPU comes: its one command runs here on the CPU with
the tiny model in ms-swift's venv — real `swift rlhf` GRPO steps with ms-swift's own phase timers, recorded in a
grpo-ui store and exported as `calibration export` writes rows — and the rows load into both calibration tools
(bench/memory_accuracy.py --rows, bench/time_calibration.py --fit --rows). No GPU exists here: the process's peak RSS
stands in for GPU memory, which the rows say. What can be checked without running: the wheels it carries and the
grid it runs on a GPU."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench.gpu.kit import GRID, ON_THE_IMAGE, carried
from grpo_ui.knowledge.catalog import find_model
from tests.tiny_job import ASSETS

ROOT = Path(__file__).parent.parent


def test_the_kit_carries_ms_swifts_locked_environment_less_what_the_gpu_image_has():
    pins = dict(p.split("==") for p in carried())
    assert pins["ms-swift"] == "4.6.0" and pins["trl"] and pins["pydantic"] and "liger-kernel" in pins
    assert not {name.lower() for name in pins} & ON_THE_IMAGE  # torch, transformers … stay as the image has them


def test_the_gpu_grid_spans_what_the_issue_asks_within_the_budget():
    models = {find_model(c.model).total_params() / 1e9 for c in GRID}
    assert min(models) < 0.6 and 7 < max(models) < 8
    assert {c.tuner for c in GRID} == {"lora", "full"} and len({c.micro_batch for c in GRID}) > 1
    assert len({c.completion for c in GRID}) > 1 and {c.grad_ckpt for c in GRID} == {True, False}
    assert {c.liger for c in GRID} == {True, False}
    assert sum(c.expect_s for c in GRID) <= 600  # with the installs, 10 minutes on one GPU


@pytest.mark.slow
def test_the_kit_runs_on_the_cpu_and_its_rows_load_into_both_calibration_tools(swift_python, tmp_path):
    out = tmp_path / "kit"
    run = subprocess.run([str(swift_python), "bench/gpu/kit.py", "run", "--grid", "tiny", "--assets", str(ASSETS),
                          "--as-gpu", "NVIDIA H100 80GB HBM3", "--out", str(out)], cwd=ROOT, capture_output=True,
                         text=True, timeout=600)
    assert run.returncode == 0, run.stdout + run.stderr
    time_rows = [json.loads(line) for line in (out / "time_rows.jsonl").read_text().splitlines()]
    memory_rows = [json.loads(line) for line in (out / "memory_rows.jsonl").read_text().splitlines()]
    assert len(time_rows) == 2 and len(memory_rows) == 2
    for row in time_rows:
        phases = row["measured"]["phases_s"]
        assert row["split"] == "own_gpu" and row["measured"]["step_s"] > 0 and row["framework"] == "ms-swift"
        assert phases["generate"] > 0 and phases["train"] >= 0 and phases["logprobs"] > 0  # ms-swift's own timers
        assert row["config"]["mean_completion_tokens"] == 16  # the random model never stops early
        assert row["config"]["extra"]["bench_gpu"]["ms-swift"] == "4.6.0"
        assert "prediction at launch" in row["notes"]
    assert all(r["compare"] == "torch" and "peak RSS" in r["measures"] and "CPU" in r["added"] for r in memory_rows)
    memory = subprocess.run([sys.executable, "bench/memory_accuracy.py", "--rows", str(out / "memory_rows.jsonl")],
                            cwd=ROOT, capture_output=True, text=True, env={"PYTHONPATH": str(ROOT)})
    assert memory.returncode == 0, memory.stderr
    assert "your rows                  2" in memory.stdout and memory_rows[0]["id"] in memory.stdout
    timing = subprocess.run([sys.executable, "bench/time_calibration.py", "--fit", "--rows",
                             str(out / "time_rows.jsonl")], cwd=ROOT, capture_output=True, text=True,
                            env={"PYTHONPATH": str(ROOT)})
    assert timing.returncode == 0, timing.stderr
    assert "+ 2 of yours" in timing.stdout and "your rows                2" in timing.stdout
    summary = (out / "summary.txt").read_text()
    assert "tiny-lora-b2-l16" in summary and "predicted" in summary
