"""Monitoring a megatron rlhf job: its metrics come from the last global rank, on the last node (ms-swift's
is_last_rank: stdout, logging.jsonl, completions.jsonl), as ``iteration: 'N/M'`` dicts in 4.x and Megatron-LM's
``iteration N/ M | …`` line in 3.x. The 4.x lines are ms-swift 4.6's own output (tests/data/megatron_metrics,
written with its logger and JsonlWriter: no GPU, so no real run), the 3.x line follows the ones users posted. The
watcher runs on a two-node Megatron job launched over real SSH to namespace hosts whose megatron command only sleeps."""

from __future__ import annotations

from pathlib import Path

import pytest

from grpo_ui.doctor.metrics import (
    completions_file,
    logging_file,
    parse_jsonl_line,
    parse_megatron_lm_line,
    parse_printed_line,
    printed_rows,
)
from grpo_ui.doctor.pace import pace
from grpo_ui.jobs.follow import Watcher
from grpo_ui.jobs.memory_loop import gpu_roles
from grpo_ui.spec.model import JobSpec
from grpo_ui.spec.paths import with_changes
from grpo_ui.spec.resolve import resolve
from grpo_ui.spec.yaml_io import validate_spec
from tests.hosts import launched

DATA = Path(__file__).parent / "data" / "megatron_metrics"
RUN = "/tmp/megatron_run"  # the run directory the files were written with
STDOUT = (DATA / "last_node.log").read_text().splitlines()
JSONL = (DATA / "logging.jsonl").read_text().splitlines()
V3 = (DATA / "megatron_lm_3x.log").read_text().splitlines()


def series(rows) -> dict[str, list[tuple[int, float]]]:
    out: dict[str, list[tuple[int, float]]] = {}
    for step, values in rows:
        for k, v in values.items():
            out.setdefault(k, []).append((step, v))
    return out


def test_the_last_ranks_dicts_and_logging_jsonl_read_the_same():
    """4.x: the printed dict and its logging.jsonl line give the same step (from iteration), total, pace and
    memory."""
    printed = [p for p in map(parse_printed_line, STDOUT) if p]
    logged = [parse_jsonl_line(line) for line in JSONL]
    assert [s for s, _ in printed] == [s for s, _ in logged] == [1, 2, 4, 6, 8, 10, 12]
    for (_, a), (_, b) in zip(printed, logged, strict=True):
        assert a == b and a["max_steps"] == 12 and "memory(GiB)" in a and "epoch" not in a
    assert logging_file(STDOUT) == f"{RUN}/run/logging.jsonl"


def test_pace_and_eta_from_the_megatron_dicts():
    """train_speed(s/it) is the same running average as swift rlhf's: the clock it gives puts every logged interval
    at the run's 80 s per iteration after a 140 s first one, and the ETA at what is left."""
    m = pace(series(parse_jsonl_line(line) for line in JSONL[:5]))
    assert m.warmup_s == pytest.approx(140) and m.median_s == pytest.approx(80)
    assert (m.step, m.total) == (8, 12) and m.eta_s == pytest.approx(4 * 80)


def test_the_3x_megatron_lm_line_is_read_and_timed_from_its_elapsed_time():
    """3.x: Megatron-LM's line names its fields its own way; its per-iteration time covers only the iterations since
    the line before, so the pace comes from the elapsed time (whole seconds)."""
    step, values = parse_megatron_lm_line(V3[1])
    assert step == 1 and values["max_steps"] == 12 and values["memory(GiB)"] == 61.23
    assert values["learning_rate"] == pytest.approx(1e-6) and values["grad_norm"] == pytest.approx(0.21)
    assert values["iteration_time_s"] == 140 and values["elapsed_time_s"] == 140
    m = pace(series(filter(None, map(parse_megatron_lm_line, V3))))
    assert m.median_s == pytest.approx(80) and m.eta_s == pytest.approx(8 * 80)
    assert [step for step, _, _ in printed_rows(V3)] == [1, 2, 4]  # the doctor reads it in any pasted log
    assert logging_file(V3[:1]) == f"{RUN}/run/logging.jsonl"


def test_the_logging_rank_is_the_last_and_lives_on_the_last_node():
    nodes = [{"host": f"n{k}", "gpus": list(range(8))} for k in range(2)]
    base = {"train.model": "Qwen/Qwen3-8B", "train.dataset": ["d"], "train.reward_funcs": ["accuracy"],
            "rollout.vllm_mode": "colocate", "cluster.nodes": nodes}
    swift = resolve(with_changes(JobSpec(), {**base, "rollout.use_vllm": True}))
    mega = resolve(with_changes(JobSpec(engine="megatron"), base))
    assert (swift.logging_rank, swift.logging_node) == (0, 0)
    assert (mega.logging_rank, mega.logging_node) == (15, 1)
    assert gpu_roles(mega)[("n1", 7)] == ("trainer", 15)  # memory(GiB) is paired with that GPU


def test_in_ray_mode_the_last_rank_is_on_the_trainer_node_whose_address_sorts_last():
    """ms-swift's Ray mode ranks the train placement groups by their node's IP as a string (resource_pool.py
    sort_pgs_by_node_ip): 10.0.0.9 sorts after 10.0.0.10, so the last rank, and logging.jsonl, are on the node listed
    first here; memory(GiB) pairs with that node's last GPU."""
    nodes = [{"host": "a", "address": "10.0.0.9", "gpus": [0, 1]}, {"host": "b", "address": "10.0.0.10", "gpus": [0, 1]}]
    base = {"train.model": "Qwen/Qwen3-8B", "train.dataset": ["d"], "train.reward_funcs": ["accuracy"],
            "train.train_iters": 10, "cluster.nodes": nodes}
    ray = resolve(with_changes(JobSpec(engine="megatron"), {**base, "train.use_ray": True}))
    assert (ray.node_order, ray.logging_rank, ray.logging_node) == ([1, 0], 3, 0)
    assert gpu_roles(ray)[("a", 1)] == ("trainer", 3) and gpu_roles(ray)[("b", 0)] == ("trainer", 0)
    torchrun = resolve(with_changes(JobSpec(engine="megatron"), {**base, "rollout.vllm_mode": "colocate"}))
    assert (torchrun.node_order, torchrun.logging_node) == ([0, 1], 1)


def test_ray_mode_keeps_completions_in_the_drivers_output_dir():
    """Ray mode: the workers write logging.jsonl in their versioned run dir, the driver completions.jsonl in the
    unversioned output_dir above it."""
    path = "/w/megatron_output/Qwen3-8B/v0-20261128-100000/logging.jsonl"
    assert completions_file(path) == "/w/megatron_output/Qwen3-8B/v0-20261128-100000/completions.jsonl"
    assert completions_file(path, ray=True) == "/w/megatron_output/Qwen3-8B/completions.jsonl"


@pytest.fixture
def megatron_job(ssh_env, tmp_path):
    """A two-node megatron rlhf job whose megatron command sleeps; output_dir 'out'."""
    env = tmp_path / "env"
    (env / "bin").mkdir(parents=True)
    (env / "bin/megatron").write_text("#!/bin/bash\nexec sleep 300\n")
    (env / "bin/megatron").chmod(0o755)
    hosts = ssh_env.add(2)
    spec = validate_spec({
        "name": "watch", "engine": "megatron",
        "train": {"model": "Qwen/Qwen2.5-0.5B", "dataset": ["/data/d.jsonl"], "reward_funcs": ["format"],
                  "num_generations": 2, "global_batch_size": 4, "output_dir": "out"},
        "rollout": {"vllm_mode": "colocate"},
        "cluster": {"nodes": [{"host": h.name, "address": h.addr, "gpus": [0], "python_env": str(env)} for h in hosts],
                    "run_root": str(tmp_path / "runs")}})
    with launched(spec, tmp_path) as job:
        yield job


def test_the_watcher_reads_the_last_nodes_metrics(megatron_job):
    """Node 0 prints ms-swift's INFO lines but no metrics; the last node prints the dicts and its last rank writes
    logging.jsonl: the watcher stores every logged iteration from there, once."""
    jobs, job, rd = megatron_job
    run = rd / "out"
    with open(rd / "node_0.log", "a") as f:
        f.write(f"[INFO:swift] args.output_dir: {run}/run\n")
    with open(rd / "node_1.log", "a") as f:
        f.writelines(line.replace(RUN, str(run)) + "\n" for line in STDOUT[:3])
    watcher = Watcher(jobs)
    assert watcher.poll(job).new_steps == 2  # from stdout until logging.jsonl is read
    (run / "run").mkdir(parents=True)
    (run / "run/logging.jsonl").write_text("\n".join(JSONL[:4]) + "\n")
    assert watcher.poll(job).new_steps == 2  # iterations 4 and 6; 1 and 2 overwritten, not repeated
    metrics = jobs.store.metrics(job)
    assert [s for s, _ in metrics["reward"]] == [1, 2, 4, 6] and metrics["max_steps"][-1] == (6, 12)
    assert jobs.store.meta(job, "logging_jsonl") == f"{run}/run/logging.jsonl"
