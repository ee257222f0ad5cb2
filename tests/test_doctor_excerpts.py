"""The doctor on logs it did not capture itself: excerpts pasted into issues (tests/data/doctor_corpus/, real lines
from public threads), other trainers' metric formats, and several processes' logs read together — the trainer
nodes and a rollout server — for which the process that failed first is named. The multi-process logs and the
crash at vLLM's wake-up are written in the formats of public logs (tests/data/gpu_logs/README.md), since the
failures they show need GPUs."""

import subprocess
import sys
from pathlib import Path

import pytest

from grpo_ui.doctor.diagnose import diagnose, report
from grpo_ui.doctor.lines import parse
from grpo_ui.doctor.logfiles import read_lines, snapshot
from grpo_ui.doctor.metrics import parse_table
from grpo_ui.doctor.snapshot import Snapshot

ROOT = Path(__file__).parent.parent
CORPUS = ROOT / "tests/data/doctor_corpus"
GPU_LOGS = ROOT / "tests/data/gpu_logs"
CAPTURED = ROOT / "tests/data/captured"


def found(*paths):
    s = snapshot(list(paths), quiet_for=0.0)
    return {a.id: a for a in diagnose(s)}, s


def corpus(prefix: str) -> Path:
    return next(CORPUS.glob(f"{prefix}_*.log"))


@pytest.mark.parametrize("raw,body,rank,process,level", [
    ("[rank2]:[E816 00:34:01.133910474 ProcessGroupNCCL.cpp:629] [Rank 2] Watchdog caught", "[Rank 2] Watchdog caught",
     2, None, "error"),
    ("\x1b[36m(RayWorkerWrapper pid=4009) [rank1]:[E ProcessGroupNCCL.cpp:563] [Rank 1] x", "[Rank 1] x", 1,
     "RayWorkerWrapper pid=4009", "error"),
    ("vllm-1  | ERROR 11-18 18:07:28 engine.py:366] ValueError: No available memory",
     "ValueError: No available memory", None, None, "error"),
    ("│ ERROR 09-27 06:46:46 engine.py:157] RuntimeError: CUDA error       │", "RuntimeError: CUDA error", None, None,
     "error"),
    ("  6%|▋         | 89/1398 [1:32:11<25:28:13, 70.05s/it]../aten/src/ATen/native/cuda/Indexing.cu:1284: x",
     "../aten/src/ATen/native/cuda/Indexing.cu:1284: x", None, None, None),
    ("rank2]: TypeError: len_reward() missing 1 required positional argument", "TypeError: len_reward() missing 1 "
     "required positional argument", 2, None, None),  # the paste cut its first character
    ("\t[rank1]:     self._partition(param_list)", "    self._partition(param_list)", 1, None, None),
    ("2026-11-24 12:29:14,973 | WARNING | modelscope_hub.legacy_api | Repo unknown", "Repo unknown", None, None,
     "warning"),
    ("(raylet) A worker died or was killed", "A worker died or was killed", None, "raylet", None),
])
def test_each_printers_decoration_is_peeled_and_what_it_says_kept(raw, body, rank, process, level):
    line = parse(raw)
    assert (line.body, line.rank, line.process, line.level) == (body, rank, process, level)


def test_the_first_real_error_not_the_noise_that_follows_it():
    alerts, s = found(corpus("049"))   # SIGTERM to the other ranks, then torchrun reports local rank 3's segfault
    assert s.first_failure.error.strip().endswith("failed (exitcode: -11) local_rank: 3 (pid: 2916310) of binary: "
                                                  "/home/user/anaconda3/envs/test/bin/python3.1")
    assert alerts["NODE-FAILED"].where.endswith("local rank 3") and "TRACEBACK" not in alerts  # torchrun's own
    alerts, s = found(corpus("051"))   # a Ray worker died, then NCCL watchdogs fire on the others
    assert "A worker died or was killed" in alerts["NODE-FAILED"].evidence.splitlines()[0]
    assert "NCCL-TIMEOUT" not in alerts


def test_a_traceback_whose_exception_line_comes_first_or_is_cut():
    alerts, _ = found(corpus("031"))   # the exception line pasted above its rank's frames
    assert alerts["MAX-MODEL-LEN"].evidence.startswith("ValueError: The decoder prompt (length 3353)")
    alerts, s = found(corpus("035"))   # DNS failures, then torchrun's traceback cut before its exception
    assert s.first_failure.event.sig.id == "DIST-INIT" and "TRACEBACK" not in alerts and s.job_state == "unknown"
    alerts, _ = found(corpus("024"))   # the reward's TypeError on a mangled "rank2]:" line
    assert "len_reward() missing 1 required positional argument" in alerts["REWARD-FUNC-FAILED"].explanation


@pytest.mark.parametrize("order", [("multinode_node0.log", "multinode_node1.log"),
                                   ("multinode_node1.log", "multinode_node0.log")])
def test_the_node_that_failed_first_across_nodes(order):
    alerts, s = found(*(GPU_LOGS / name for name in order))
    failed = alerts["NODE-FAILED"]
    assert failed.where == "multinode_node1.log, rank 12" and "Out of GPU memory" in failed.title
    assert alerts["OOM"].evidence.startswith("[rank12]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate "
                                             "9.27") and "OutOfMemoryError" not in failed.evidence  # told once
    assert "After it: multinode_node0.log, rank 3: NCCL collective timed out" in failed.explanation
    assert "NCCL-TIMEOUT" not in alerts and "OOM" in alerts  # the timeouts follow the OOM


def test_a_rollout_server_crash_is_named_before_the_trainers_failure():
    out = subprocess.run([sys.executable, "-m", "grpo_ui", "doctor", GPU_LOGS / "server_trainer.log",
                          GPU_LOGS / "server_rollout.log"], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 1
    assert out.stdout.startswith("first error: server_rollout.log: CUDA error — ERROR 11-24 10:13:47 [core.py:584] "
                                 "RuntimeError: CUDA error: an illegal memory access was encountered\n")
    assert "After it: server_trainer.log, rank 0: Rollout server unreachable." in out.stdout
    assert "[ERROR] ROLLOUT-UNREACHABLE" not in out.stdout and "[ERROR] VLLM-ENGINE-DEAD" not in out.stdout


def test_a_crash_right_after_vllm_woke_up_is_named_so():
    alerts, s = found(GPU_LOGS / "wake_up_crash.log")
    assert alerts["VLLM-SLEEP-CRASH"].evidence.startswith("Fatal Python error: Segmentation fault")
    assert "wake up tags ['weights']" in alerts["VLLM-SLEEP-CRASH"].evidence and s.job_state == "failed"


def test_an_nccl_error_at_the_weight_sync_is_the_weight_syncs():
    alerts, _ = found(corpus("047"))   # NCCL WARN from ibverbs while vLLM's worker updates a weight
    assert "NCCL WARN Call to ibv_modify_qp failed" in alerts["WEIGHT-SYNC-FAILED"].evidence.splitlines()[0]
    alerts, _ = found(corpus("017"))   # torch's NCCL error, whose 'Last error:' names two ranks on one GPU
    assert alerts["GPU-DUPLICATE"].evidence.startswith("Duplicate GPU detected : rank 1 and rank 0")
    assert "NCCL-ERROR" not in alerts


def test_nccl_timeouts_name_the_collective_and_the_ranks():
    alerts, _ = found(corpus("014"))
    assert "Ranks 3, 7 waited 600 s in ALLTOALL (collective #4486)" in alerts["NCCL-TIMEOUT"].explanation


def test_metrics_of_other_trainers_and_tables():
    alerts, s = found(corpus("009"))   # TRL prints its dicts without a step
    assert s.metrics["reward_std"] == [(1, 0.0)] and "NO-LEARNING-SIGNAL" in alerts
    alerts, s = found(corpus("046"))   # verl's step line, wrapped by the paste
    assert "actor/grad_norm:nan" in alerts["NAN-METRICS"].evidence.splitlines()[0]
    alerts, s = found(corpus("040"))   # a table of the metrics per step
    assert [step for step, _ in s.metrics["completions/clipped_ratio"]] == [1, 2, 10]
    assert alerts["COMPLETIONS-CLIPPED"].title == "Completions hit max_completion_length, and every reward is 0"
    md = ["| Step | Training Loss | reward | grad_norm |", "|---|---|---|---|", "| 10 | 0.0123 | 0.5 | 0.31 |"]
    assert parse_table(md) == [(10, {"training_loss": 0.0123, "reward": 0.5, "grad_norm": 0.31, "loss": 0.0123}, 2)]


def test_advice_fits_where_the_log_came_from_and_never_says_none():
    for path in [*CORPUS.glob("*.log"), *CAPTURED.glob("*.log")]:
        for a in diagnose(snapshot([path], quiet_for=0.0)):
            text = " ".join([a.title, a.explanation, a.fix, a.where])
            assert "History" not in text and "rank None" not in text and "(None" not in text, (path.name, a.id)
    lines, _ = read_lines(CAPTURED / "rank1_sigabrt.log")
    launched = {a.id: a for a in diagnose(Snapshot(logs={"node 0 (h0)": lines}, job_state="failed"))}
    assert "relaunch from History" in launched["NODE-FAILED"].fix  # a job grpo-ui launched and follows


def test_state_from_what_the_logs_can_tell():
    assert report(snapshot([GPU_LOGS / "colocate_sleep_stuck.log"], quiet_for=0.0)).state == "running"  # its start
    assert report(snapshot([CAPTURED / "healthy_logging5.log"], quiet_for=0.0)).state == "succeeded"
    assert report(snapshot([corpus("001")], quiet_for=0.0)).state == "failed"
    assert report(snapshot([corpus("010")], quiet_for=0.0)).state == "unknown"


def test_a_reward_function_called_by_trls_scoring_step_and_a_library_missing_an_attribute():
    """Lines in the format TRL (before its _calculate_rewards) and transformers print them."""
    tb = ["[rank0]: Traceback (most recent call last):",
          '[rank0]:   File "/usr/lib/python3.11/site-packages/trl/trainer/grpo_trainer.py", line 1102, in '
          "_generate_and_score_completions",
          "[rank0]:     output_reward_func = reward_func(prompts=prompts, completions=completions, **reward_kwargs)",
          '[rank0]:   File "/home/me/train_grpo.py", line 41, in format_score',
          "[rank0]:     return [1.0 if re.match(pattern, c) else 0.0 for c in completions]",
          "[rank0]: TypeError: expected string or bytes-like object, got 'list'"]
    alerts = {a.id: a for a in diagnose(Snapshot(logs={"train.log": tb}, source="logs"))}
    assert "train_grpo.py:41 in format_score raised TypeError" in alerts["REWARD-FUNC-FAILED"].explanation
    tb = ["Traceback (most recent call last):",
          '  File "/usr/lib/python3.11/site-packages/transformers/modeling_rope_utils.py", line 120, in '
          "_compute_default_rope_parameters",
          "    base = config.rope_theta",
          "AttributeError: 'Qwen2Config' object has no attribute 'rope_theta'"]
    assert "VERSION-MISMATCH" in {a.id for a in diagnose(Snapshot(logs={"train.log": tb}, source="logs"))}


def test_a_node_that_only_lost_its_peer_is_not_blamed_when_the_launcher_saw_another_fail():
    """test_e2e's scenario 3 on the doctor alone, in torch's formats: node 1's torchrun was killed; node 0's log
    shows only what follows (its rank losing the peer, its torchrun stopped by a signal)."""
    node0 = ["[rank0]: RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer "
             "[10.0.0.2]:41240",
             "Traceback (most recent call last):",
             '  File "/opt/venv/bin/torchrun", line 8, in <module>',
             "    sys.exit(main())",
             "torch.distributed.elastic.multiprocessing.api.SignalException: Process 4242 got signal: 15"]
    snap = Snapshot(logs={"node 0 (h0)": node0, "node 1 (h1)": ["[INFO:swift] training"]}, job_state="failed",
                    job_error="node 1 (h1, rank 1) failed first: exit code 247")
    failed = {a.id: a for a in diagnose(snap)}["NODE-FAILED"]
    assert failed.title == "node 1 (h1, rank 1) failed first: exit code 247" and "TRACEBACK" not in failed.title


def test_kl_of_one_pasted_step_is_no_stuck_kl_but_of_two_it_is(tmp_path):
    """KL is exactly 0 at the first step by construction (the policy is the reference until its first update): one
    pasted step with kl 0 (corpus 086, a healthy open-r1 start) raises nothing; two such steps are stuck."""
    alerts, _ = found(corpus("086"))
    assert "KL-STUCK-ZERO" not in alerts
    step = "{'loss': 0.01, 'grad_norm': 0.2, 'learning_rate': 1e-06, 'reward': 0.4, 'reward_std': 0.3, 'kl': 0.0}\n"
    (tmp_path / "two.log").write_text(step * 2)
    alerts, _ = found(tmp_path / "two.log")
    assert "KL-STUCK-ZERO" in alerts
