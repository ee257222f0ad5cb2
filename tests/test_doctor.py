"""The doctor on real logs: every capture in tests/data/captured/ comes from a real ms-swift 4.6 run on the CPU (how
each was made: the README there), healthy ones must raise nothing — also with their timing stretched to 45 s per
step — and each failing one must be named with its cause. The GPU-only failure modes (vLLM sleep/wake, NCCL weight
sync, memory climbing, ZeRO shards) use lines written in the exact formats of public logs, in tests/data/gpu_logs/
(sources in its README)."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from grpo_ui.doctor import liveness
from grpo_ui.doctor.diagnose import diagnose
from grpo_ui.doctor.logfiles import from_lines, read_lines, snapshot
from grpo_ui.doctor.logs import fold_cr
from grpo_ui.doctor.rootcause import first_error_index, root_cause
from grpo_ui.doctor.stacks import disagreement, parse_dumps

ROOT = Path(__file__).parent.parent
CAPTURED = ROOT / "tests/data/captured"
GPU_LOGS = ROOT / "tests/data/gpu_logs"


def alerts(*names, quiet_for=5.0, folder=CAPTURED, **kw):
    snap = snapshot([folder / n for n in names], quiet_for=quiet_for, **kw)
    return {a.id: a for a in diagnose(snap)}, snap


@pytest.mark.parametrize("names", [("healthy_logging5.log",),
                                   ("healthy_logging5.log", "healthy_logging5.logging.jsonl"),
                                   ("slow_reward.log",),
                                   ("slow_reward.log", "slow_reward.logging.jsonl")])
def test_healthy_captures_raise_nothing(names):
    found, snap = alerts(*names)
    assert found == {} and snap.job_state == "succeeded"


def test_the_first_capture_only_says_what_is_true_of_it():
    """The random tiny model gets reward 0 everywhere: no learning signal, nothing about failures or hangs."""
    found, _ = alerts("swift46_tiny_grpo_stdout.log", quiet_for=3600)
    assert set(found) == {"NO-LEARNING-SIGNAL", "KL-STUCK-ZERO", "GRAD-NORM-ZERO", "COMPLETIONS-CLIPPED"}


@pytest.mark.parametrize("capture,where,exit_text,error", [
    ("rank1_sigabrt.log", "rank 1 (local rank 1)", "signal 6 (SIGABRT)", "failed (exitcode: -6) local_rank: 1"),
    ("rank1_sigkill.log", "rank 1 (local rank 1)", "signal 9 (SIGKILL)", "failed (exitcode: -9) local_rank: 1"),
])
def test_root_cause_is_torchruns_first_failure_with_its_error_line(capture, where, exit_text, error):
    found, snap = alerts(capture)
    failed = found["NODE-FAILED"]
    assert failed.where == f"{capture}, {where}" and exit_text in failed.title and error in failed.explanation
    lines = failed.evidence.split("\n")  # the error line first, then the 30 lines before it
    assert error in lines[0] and lines[1] == "… the lines before it:" and len(lines) == 32
    assert "TRACEBACK" not in found and snap.job_state == "failed"


@pytest.mark.parametrize("capture,where,kind,error", [
    ("reward_raises.log", "rank 0 (local rank 0)", "REWARD-FUNC-FAILED", "IndexError: list index out of range"),
    ("disk_full.log", "rank 0 (local rank 0)", "DISK-FULL", "No space left on device (os error 28)"),
])
def test_an_error_with_a_finding_of_its_own_is_told_once(capture, where, kind, error):
    """NODE-FAILED names the rank torchrun saw fail first and points at the finding of its error, which shows the
    error line and its traceback: no line of that finding again in NODE-FAILED (issue 32: a report that showed one
    OOM's traceback twice and its line four times)."""
    found, snap = alerts(capture)
    failed, own = found["NODE-FAILED"], found[kind]
    assert failed.where == f"{capture}, {where}" and "exit code 1" in failed.title and kind in failed.explanation
    assert error in own.evidence.splitlines()[0] and error not in failed.explanation + failed.evidence
    shown = {line.strip() for line in own.evidence.splitlines()}
    assert not shown & {line.strip() for line in failed.evidence.splitlines()}
    assert "TRACEBACK" not in found and snap.job_state == "failed"


def test_a_rank_killed_by_a_signal_is_blamed_not_the_rank_that_lost_its_peer():
    """rank1_sigabrt: rank 0 prints a traceback (gloo: connection closed by peer) after rank 1 died."""
    lines, _ = read_lines(CAPTURED / "rank1_sigabrt.log")
    assert any(line.startswith("[rank0]: RuntimeError") and "Connection closed by peer" in line for line in lines)
    assert root_cause({"n": lines}).rank == 1


def test_earliest_failure_across_nodes_wins():
    later, _ = read_lines(CAPTURED / "reward_raises.log")   # torchrun time 12:31
    earlier, _ = read_lines(CAPTURED / "rank1_sigkill.log")  # torchrun time 12:28
    cause = root_cause({"node 0 (a)": later, "node 1 (b)": earlier})
    assert cause.node == "node 1 (b)" and cause.rank == 1 and cause.exit == "signal 9 (SIGKILL)"


def test_first_error_is_never_an_argument_dump_line():
    lines, _ = read_lines(CAPTURED / "reward_raises.log")
    assert any(line == "ignore_args_error=False," for line in lines)
    assert lines[first_error_index(lines)] == "[rank0]: Traceback (most recent call last):"


@pytest.mark.parametrize("capture,expected,words", [
    ("reward_none.log", "REWARD-NONE", "returned None"),
    ("reward_nan.log", "REWARD-NONE", "NaN counts as None"),
    ("reward_raises.log", "REWARD-FUNC-FAILED", "reward_plugin.py:44 in <listcomp> raised IndexError"),
    ("reward_inf.log", "NAN-METRICS", "nan"),
    ("lr_blowup.log", "NAN-METRICS", "probability tensor contains either `inf`, `nan`"),
    ("server_unreachable.log", "ROLLOUT-UNREACHABLE", "Servers not reachable"),
    ("server_group_port_closed.log", "WEIGHT-SYNC-STALL", "group port"),
    ("server_vllm_missing.log", "PACKAGE-MISSING", "vLLM is not installed"),
    ("disk_full.log", "DISK-FULL", "No space left on device"),
    ("disk_full.log", "CHECKPOINT-INCOMPLETE", "checkpoint-1"),
    ("reward_slowing.log", "THROUGHPUT-FALLING", "tokens/s"),
])
def test_each_captured_failure_is_named(capture, expected, words):
    found, _ = alerts(capture)
    a = found[expected]
    assert words in a.title + a.explanation + a.evidence


def test_weight_sync_stall_names_the_group_port_the_run_used():
    found, snap = alerts("server_group_port_closed.log")
    port = snap.group_ports[0]
    assert port != 51216 and f"group port {port}" in found["WEIGHT-SYNC-STALL"].explanation


def test_incomplete_checkpoint_from_the_directory_listing():
    """disk_full.listing: what the full disk kept of the run directory (checkpoint-1 holds only its README)."""
    files = (CAPTURED / "disk_full.listing").read_text().split()
    ckpt = sorted(f.split("/", 2)[2] for f in files if f.count("/") == 2 and "/checkpoint-1/" in f)
    snap = snapshot([CAPTURED / "disk_full.log"], quiet_for=5)
    snap.checkpoints = {"/runs/out/v0/checkpoint-1": ckpt}
    a = {a.id: a for a in diagnose(snap)}["CHECKPOINT-INCOMPLETE"]
    assert "no trainer_state.json" in a.explanation and a.evidence == "README.md"


def test_reward_latency_and_phases_from_real_py_spy_dumps():
    found, snap = alerts("reward_slowing.log", "reward_slowing.pyspy")
    assert [s.phase for s in snap.stacks] == ["reward"] * len(snap.stacks) and len(snap.stacks) >= 2
    assert "REWARD-LATENCY" in found and "inside the reward functions" in found["REWARD-LATENCY"].explanation


def test_a_stuck_collective_on_every_rank_is_a_hang_with_their_stacks():
    """rank1_stopped: rank 1 stopped (SIGSTOP) inside an all_gather; both ranks' real py-spy dumps."""
    found, snap = alerts("rank1_stopped.log", "rank1_stopped.pyspy", quiet_for=3600)
    assert snap.job_state == "failed"  # the capture ended by killing both; cut before that it is a live hang
    lines, _ = read_lines(CAPTURED / "rank1_stopped.log")
    live = lines[:next(i for i, line in enumerate(lines) if "torch/distributed/elastic" in line)]
    snap = from_lines({"rank1_stopped.log": live, "stacks": (CAPTURED / "rank1_stopped.pyspy").read_text().split("\n")},
                      None, last_grew=0.0, now=3600.0)
    hang = {a.id: a for a in diagnose(snap)}["HANG"]
    assert [s.summary for s in snap.stacks] == ["generation (waiting in all_gather)"] * 2
    assert "Every rank is in generation (waiting in all_gather)" in hang.explanation


def test_ranks_that_disagree_are_named():
    stacks = parse_dumps((CAPTURED / "rank1_stopped.pyspy").read_text())
    reward = parse_dumps((CAPTURED / "reward_slowing.pyspy").read_text())[0]
    reward.label = "local rank 1"
    assert "local rank 0 wait in a collective for local rank 1 (reward)" in disagreement([stacks[0], reward])


# GPU-only failure modes, in the formats of public logs ---------------------------------------------------------

def test_vllm_asleep_and_never_woken():
    found, _ = alerts("colocate_sleep_stuck.log", folder=GPU_LOGS, quiet_for=3600)
    assert "HANG" in found and "never woke its KV cache" not in found["VLLM-SLEEP-STUCK"].explanation
    assert "woke its weights but never its KV cache" in found["VLLM-SLEEP-STUCK"].explanation
    found, _ = alerts("colocate_sleep_stuck.log", folder=GPU_LOGS, quiet_for=60)
    assert "VLLM-SLEEP-STUCK" not in found and "HANG" not in found  # within one step of 92 s: healthy


def test_weight_sync_stall_seen_on_the_rollout_server_side():
    found, _ = alerts("trainer_sync_stall.log", "rollout_server_sync_stall.log", folder=GPU_LOGS, quiet_for=3600)
    assert "/update_flattened_params/" in found["WEIGHT-SYNC-STALL"].explanation
    found, _ = alerts("trainer_sync_watchdog.log", folder=GPU_LOGS, quiet_for=5)
    assert "group port 51216" in found["WEIGHT-SYNC-STALL"].explanation


def test_memory_climbing_but_not_a_warm_up_plateau():
    found, _ = alerts("memory_climbing.logging.jsonl", folder=GPU_LOGS)
    assert "66.4" in found["MEMORY-CLIMBING"].evidence
    found, _ = alerts("memory_flat.logging.jsonl", folder=GPU_LOGS)
    assert found == {}


def test_out_of_memory_at_the_switch_from_training_to_rollout():
    found, _ = alerts("oom_at_wake.log", folder=GPU_LOGS)
    assert "struck in vLLM sleep/wake: at the switch from training to rollout" in found["OOM"].explanation
    assert "RuntimeError: CUDA Error: out of memory" in found["OOM"].evidence


def test_checkpoint_written_by_some_ranks_only():
    snap = snapshot([CAPTURED / "healthy_logging5.log"], quiet_for=5)
    snap.checkpoints = {"/out/checkpoint-200": (GPU_LOGS / "zero3_checkpoint_one_node.listing").read_text().split()}
    snap.settings["world_size"] = 8
    a = {a.id: a for a in diagnose(snap)}["CHECKPOINT-INCOMPLETE"]
    assert "rank(s) [0, 1, 2, 3] of 8" in a.explanation


# liveness: stretched timing, no wall-clock waiting -------------------------------------------------------------

def replay(name: str, stretch: float):
    """The capture as the watcher would have seen it with training ``stretch`` times slower (start-up and the
    first step as they were, every time after the first metric line stretched): after each piece of output arrived,
    the moment just before the next one (the longest silence); the run's own time metrics stretched alike. Yields
    (snapshot, seconds silent)."""
    data = (CAPTURED / name).read_bytes()
    arrivals = [(int(o), float(t)) for o, t in (line.split() for line in (CAPTURED / name.replace(".log", ".arrivals"))
                                                .read_text().splitlines())]
    t0 = next(t for o, t in arrivals if b"{'loss'" in data[:o])

    def at(t):
        return t if t < t0 else t0 + (t - t0) * stretch

    for (offset, t), (_, t_next) in zip(arrivals, arrivals[1:], strict=False):
        text = data[:offset].decode("utf-8", "replace")
        if "End time of running main" in text:
            return
        lines = [fold_cr(x) for x in text.split("\n")]
        snap = from_lines({name: lines}, None, last_grew=at(t), now=at(t_next) - 0.001)
        for key in ("seconds_per_step", "elapsed_time_s", "step_time"):
            snap.metrics[key] = [(s, v * stretch) for s, v in snap.metrics.get(key, [])]
        yield snap, at(t_next) - at(t)


@pytest.mark.parametrize("name,stretch", [("slow_reward.log", 45 / 4.3), ("healthy_logging5.log", 45 / 0.07)])
def test_a_healthy_run_stretched_to_45_s_per_step_is_never_called_hung(name, stretch):
    """slow_reward: 4.3 s steps, logging_steps 1; healthy_logging5: 0.07 s steps, logging_steps 5 (tqdm's \\r
    updates between metric lines). Both at 45 s per step, at the worst moment of every silence."""
    seen = 0
    for snap, silent in replay(name, stretch):
        assert "HANG" not in {a.id for a in diagnose(snap)}, f"called hung after {silent:.0f} s of silence"
        seen += 1
    assert seen > 20


def test_a_silent_run_is_flagged_within_ten_minutes_beyond_the_expected_gap():
    *_, (snap, _) = replay("slow_reward.log", 45 / 4.3)  # the run at its last step, then silence
    bar = liveness.has_step_bar([line for lines in snap.logs.values() for line in lines])
    gap = liveness.expected_gap(snap.metrics, snap.logging_steps, snap.steps_per_generation, bar)
    assert 40 < gap < 60  # one stretched step
    last = max(snap.last_output_at.values())
    for silent, hung in [(gap + 60, False), (gap + 299, False), (gap + 601, True)]:
        snap.now = last + silent
        assert ("HANG" in {a.id for a in diagnose(snap)}) is hung, silent


def test_a_tqdm_bar_redrawn_only_for_its_clock_is_no_progress():
    a = "Train:  40%|████      | 4/10 [00:02<00:03,  1.95s/it]"
    b = "Train:  40%|████      | 4/10 [09:41<00:03,  1.95s/it]"
    c = "Train:  50%|█████     | 5/10 [09:43<00:02,  1.90s/it]"
    assert liveness.progress_mark(a) == liveness.progress_mark(b) != liveness.progress_mark(c)


# the command ---------------------------------------------------------------------------------------------------

def doctor(*args):
    return subprocess.run([sys.executable, "-m", "grpo_ui", "doctor", *map(str, args)], capture_output=True,
                          text=True, cwd=ROOT, timeout=120)


def test_command_prints_findings_like_validate_and_exits_1_on_an_error():
    bad = doctor(CAPTURED / "rank1_sigabrt.log", "--quiet-for", "5")
    assert bad.returncode == 1, bad.stderr
    assert bad.stdout.startswith("first error: rank1_sigabrt.log, rank 1 (local rank 1): the process died (signal 6 "
                                 "(SIGABRT)) — ")  # the headline, then the findings
    assert "\n[ERROR] NODE-FAILED (rank1_sigabrt.log, rank 1 (local rank 1))\n" in bad.stdout
    assert "\n    fix: " in bad.stdout and "1 error(s)" in bad.stdout
    ok = doctor(CAPTURED / "healthy_logging5.log", CAPTURED / "healthy_logging5.logging.jsonl")
    assert ok.returncode == 0 and ok.stdout.startswith("no findings")
    assert "run succeeded, last logged step 10" in ok.stdout
    as_json = json.loads(doctor(CAPTURED / "reward_none.log", "--json").stdout)
    assert {"REWARD-NONE"} <= {f["id"] for f in as_json} and all({"fields", "fix"} <= set(f) for f in as_json)


def test_command_takes_settings_from_the_job_and_rejects_unreadable_files(tmp_path):
    job = tmp_path / "job.yaml"
    job.write_text("name: x\ntrain: {model: m, dataset: [d], reward_funcs: [format], num_generations: 2, "
                   "per_device_train_batch_size: 2, logging_steps: 50}\n"
                   "cluster: {nodes: [{host: localhost, gpus: [0]}]}\n")
    # the sleep capture at 92 s per step, silent 12 min: a hang by itself; not with logging_steps 50 and no bar
    log = tmp_path / "node0.log"
    log.write_text(re.sub(r"Train:.*?\]", "", (GPU_LOGS / "colocate_sleep_stuck.log").read_text()))
    assert "HANG" in doctor(log, "--quiet-for", "720").stdout
    assert "HANG" not in doctor(log, "--quiet-for", "720", "--job", job).stdout
    missing = doctor(tmp_path / "nope.log")
    assert missing.returncode == 2 and "nope.log: cannot read it" in missing.stderr and not missing.stdout


# curves ----------------------------------------------------------------------------------------------------------

def test_curves_from_a_real_run_and_gpu_samples():
    from grpo_ui.doctor.curves import memory_per_gpu, rollout_throughput, step_phases
    snap = snapshot([CAPTURED / "reward_slowing.log", CAPTURED / "reward_slowing.logging.jsonl"])
    phases = step_phases(snap.metrics)
    inside = dict(phases["rollout + reward + forward/backward (step_time)"])
    assert inside[8] > inside[2] > 0.5  # the reward sleeps 0.5 s more on every call
    tps = [v for _, v in rollout_throughput(snap.metrics)]
    assert tps[1] > 2 * tps[-1]
    samples = [{"host": "h", "gpu_index": g, "ts": t, "mem_used": m}
               for g, t, m in [(0, 1, 10), (0, 2, 30), (0, 4, 20), (1, 4, 5), (0, 9, 99)]]
    assert memory_per_gpu(samples, [(1, 2.5), (2, 5.0)]) == {"h/GPU 0": [(1, 30), (2, 20)], "h/GPU 1": [(2, 5)]}


def test_a_large_log_is_read_by_its_head_and_tail(tmp_path, monkeypatch):
    from grpo_ui.doctor import logfiles
    monkeypatch.setattr(logfiles, "HEAD", 20_000)
    monkeypatch.setattr(logfiles, "TAIL", 30_000)
    text = (CAPTURED / "rank1_sigabrt.log").read_text()
    big = tmp_path / "big.log"
    big.write_text(text.replace("[INFO:swift] use_reentrant", "filler line\n" * 20_000 + "[INFO:swift] use_reentrant"))
    found, snap = alerts(big.name, folder=tmp_path)
    assert found["NODE-FAILED"].where == "big.log, rank 1 (local rank 1)" and snap.logging_steps == 1
    assert any("bytes left out" in line for line in snap.logs["big.log"])
