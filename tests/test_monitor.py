"""Monitoring on real data: tails that survive cut connections, ms-swift 3.x/4.x metric lines (4.x captured from a
real run), the doctor's rules (each fires on a stream with its problem and stays silent on a healthy one), the
watcher on a job launched over real SSH to a namespace host, and the nvidia-smi channels over real SSH. The GPU is the
one stand-in: its output is built from nvidia-smi's documented format (no GPU here)."""

import ast
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from grpo_ui.backends.remote.gpu import PROCESSES, TICK, AppsReader, SmiChannel, parse_smi_line
from grpo_ui.backends.remote.runner import LocalRunner, SshRunner
from grpo_ui.backends.remote.ssh import Pool
from grpo_ui.doctor.diagnose import Snapshot, diagnose
from grpo_ui.doctor.gpu_window import GpuWindow
from grpo_ui.doctor.logs import LogTail, LogWindow, fold_cr
from grpo_ui.doctor.metrics import (
    completions_file,
    logging_file,
    normalize,
    parse_completion_line,
    parse_jsonl_line,
    parse_stdout_line,
)
from grpo_ui.jobs.follow import Watcher
from grpo_ui.jobs.store import Store
from grpo_ui.jobs.telemetry import Collector
from grpo_ui.spec.yaml_io import validate_spec
from tests.hosts import launched
from tests.wait import wait_for

DATA = Path(__file__).parent / "data"
STDOUT = (DATA / "captured/swift46_tiny_grpo_stdout.log").read_text()
JSONL = (DATA / "captured/swift46_tiny_grpo_logging.jsonl").read_text().splitlines()
V3_LINE = ("{'loss': 0.04116132, 'grad_norm': 0.06237533, 'learning_rate': 9.99e-06, 'reward': 0.96875, 'reward_std': "
           "1.06768155, 'frac_reward_zero_std': 0.0, 'rewards/ResponseOneRewardRulesAll/mean': 0.96875, "
           "'completions/clipped_ratio': 0.046875, 'kl': 0.00049519, 'clip_ratio': 0.0, 'epoch': 0.12, "
           "'global_step/max_steps': '56/2290', 'percentage': '2.45%', 'elapsed_time': '1h 41m 55s', "
           "'remaining_time': '2d 19h 46m 19s', 'memory(GiB)': 65.09, 'train_speed(iter/s)': 0.009156}")
V4_STDOUT = ("Train:   2%|▏         | 1/60 [00:55<54:36, 55.53s/it]{'loss': '0.6647', 'grad_norm': '0.8371', "
             "'learning_rate': '3.333e-05', 'epoch': '0.08421', 'global_step/max_steps': '1/60', 'elapsed_time': "
             "'56s', 'remaining_time': '54m 37s', 'memory(GiB)': '14.34', 'train_speed(s/it)': '55.54'}")


# logs ----------------------------------------------------------------------------------------------------------

def test_tail_returns_whole_lines_only_and_resumes_from_its_offset(tmp_path):
    log = tmp_path / "node.log"
    log.write_bytes(b"one\ntw")
    tail = LogTail(LocalRunner().read, str(log))
    assert tail.poll() == ["one"]
    with open(log, "ab") as f:
        f.write(b"o\nprogress 1%\rprogress 50%\rprogress 99%\nthree\n")
    again = LogTail(LocalRunner().read, str(log), tail.offset)  # e.g. after an app restart
    assert again.poll() == ["two", "progress 99%", "three"]
    assert again.poll() == []


def test_cutting_the_ssh_connection_ten_times_loses_and_repeats_nothing(ssh_env, tmp_path):
    (h,) = ssh_env.add(1)
    log = tmp_path / "stream.log"
    log.write_text("")
    pool = Pool()
    got, offset = [], 0
    for cut in range(10):
        with open(log, "a") as f:
            f.writelines(f"line {cut}-{k}\n" for k in range(50))
            f.write(f"partial {cut}")  # an unfinished line at every cut
        tail = LogTail(SshRunner(pool.get(h.name)).read, str(log), offset)
        got += tail.poll()
        offset = tail.offset
        pool.drop(h.name)  # the connection dies; the next pass reconnects
        with open(log, "a") as f:
            f.write(" done\n")
    got += LogTail(SshRunner(pool.get(h.name)).read, str(log), offset).poll()
    expected = [f"line {c}-{k}" if k < 50 else f"partial {c} done" for c in range(10) for k in range(51)]
    assert got == expected
    pool.close()


def test_window_is_bounded_and_finds_errors():
    w = LogWindow(size=100)
    w.extend([f"step {i}" for i in range(1000)] + ["Traceback (most recent call last):", "ValueError: boom"])
    assert len(w.lines) == 100 and w.count == 1002
    assert w.first_error() == (1001, "Traceback (most recent call last):")
    assert w.last(1) == ["ValueError: boom"] and w.search("step 990") == [(991, "step 990")]
    assert [i for i, _ in w.search(r"^step 99\d$", regex=True)] == list(range(991, 1001))
    assert fold_cr("a\rb\r") == "b"


# metrics -------------------------------------------------------------------------------------------------------

def test_real_4x_stdout_and_logging_jsonl_agree():
    from_stdout = [p for p in map(parse_stdout_line, STDOUT.splitlines()) if p and p[0] is not None]
    from_jsonl = [p for p in map(parse_jsonl_line, JSONL) if p and p[0] is not None]
    assert [s for s, _ in from_jsonl] == [1, 2, 3] and [s for s, _ in from_stdout] == [1, 2, 3]
    for (_, a), (_, b) in zip(from_stdout, from_jsonl, strict=True):
        for key in ("reward", "reward_std", "frac_reward_zero_std", "kl", "completions/clipped_ratio",
                    "rewards/Format/mean", "seconds_per_step"):
            assert a[key] == pytest.approx(b[key], rel=1e-3, abs=1e-4), key
    assert logging_file(STDOUT.splitlines()).endswith("/logging.jsonl")


def test_3x_and_4x_lines_normalise_to_the_same_names():
    step3, m3 = parse_stdout_line(V3_LINE)
    step4, m4 = parse_stdout_line(V4_STDOUT)
    assert (step3, m3["max_steps"], step4, m4["max_steps"]) == (56, 2290, 1, 60)
    assert m3["seconds_per_step"] == pytest.approx(1 / 0.009156) and m4["seconds_per_step"] == 55.54
    assert m3["elapsed_time_s"] == 6115 and m3["remaining_time_s"] == 2 * 86400 + 19 * 3600 + 46 * 60 + 19
    common = {"loss", "grad_norm", "learning_rate", "epoch", "memory(GiB)", "seconds_per_step", "max_steps"}
    assert common <= set(m3) and common <= set(m4)
    assert normalize({"train_runtime": "0.3215"}) == (None, {"train_runtime": 0.3215})


def test_fast_jsonl_path_agrees_with_the_general_one():
    """parse_jsonl_line's schema pass must give what normalize gives on the decoded dict, for real 4.x lines, a 3.x
    line written as JSON, and lines the schema rejects (summary with nested dicts, nulls, strings)."""
    v3_json = json.dumps(ast.literal_eval(V3_LINE))
    odd = ['{"loss": null, "kl": "0.5", "global_step/max_steps": "4/9", "train_runtime": 3}',
           '{"model_parameter_info": {"a": 1}, "global_step": 3, "memory": "12 GiB", "flag": true}',
           '{"reward": 1, "percentage": "50%", "train_speed(iter/s)": 0}']
    for line in JSONL + [v3_json] + odd:
        assert parse_jsonl_line(line) == normalize(json.loads(line)), line
    step, m = parse_jsonl_line(v3_json)
    assert step == 56 and m["seconds_per_step"] == pytest.approx(1 / 0.009156) and m["percentage"] == 2.45
    assert parse_jsonl_line("[1, 2]") is None and parse_jsonl_line("not json") is None
    assert parse_jsonl_line(JSONL[0].encode()) == parse_jsonl_line(JSONL[0])


# doctor --------------------------------------------------------------------------------------------------------

def series(rows):
    out = {}
    for step, d in rows:
        for k, v in d.items():
            out.setdefault(k, []).append((step, v))
    return out


REAL = series([p for p in map(parse_jsonl_line, JSONL) if p and p[0] is not None])
HEALTHY = series([(s, {"reward": 0.5 + s / 100, "reward_std": 0.4, "frac_reward_zero_std": 0.1, "kl": 0.001 * s,
                       "grad_norm": 0.3, "completions/clipped_ratio": 0.05, "seconds_per_step": 60.0})
                  for s in range(1, 10)])
HEALTHY_LOG = {"node 0 (h0)": ["[INFO:swift] output_dir: /x/v0", "Train: 10%|█ | 1/10", "{'loss': '0.01'}"]}


def ids(**kw):
    return {a.id for a in diagnose(Snapshot(**kw))}


def test_real_tiny_run_has_no_learning_signal_and_kl_stuck():
    found = ids(metrics=REAL, beta=0.04)
    assert {"NO-LEARNING-SIGNAL", "KL-STUCK-ZERO", "GRAD-NORM-ZERO", "COMPLETIONS-CLIPPED"} <= found
    assert "KL-STUCK-ZERO" not in ids(metrics=REAL, beta=0.0)


def test_healthy_stream_raises_nothing():
    now = time.time()
    assert ids(metrics=HEALTHY, logs=HEALTHY_LOG, now=now, last_step_at=now - 30, started_at=now - 600,
               last_output_at={"node 0 (h0)": now - 5}) == set()


def test_kl_blowup():
    blown = {**HEALTHY, "kl": HEALTHY["kl"][:-1] + [(9, 3.5)]}
    assert "KL-BLOWUP" in ids(metrics=blown) and "KL-BLOWUP" not in ids(metrics=HEALTHY)


@pytest.mark.parametrize("alert,line", [
    ("OOM", "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"),
    ("NCCL-TIMEOUT", "[Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=5, OpType=ALLGATHER)"),
    ("DIST-INIT", "[c10d] The client socket has timed out after 300000ms while trying to connect to "
                  "(10.156.33.26, 29500)."),
    ("ROLLOUT-UNREACHABLE", "ConnectionError: Servers not reachable after 240.0s: ['10.0.0.5:8000']"),
    ("TRACEBACK", "Traceback (most recent call last):"),
])
def test_log_signatures_name_the_first_node(alert, line):
    logs = {"node 0 (a)": ["fine"], "node 1 (b)": ["fine", line, "more"]}
    alerts = [a for a in diagnose(Snapshot(logs=logs)) if a.id == alert]
    assert alerts and "first on node 1 (b)" in alerts[0].explanation and line in alerts[0].evidence
    assert alert not in ids(logs=HEALTHY_LOG)


def test_a_socket_timing_out_on_the_weight_sync_group_port_is_the_stall_on_its_node():
    """The weight-sync group port (51216), not an NCCL collective: one alert, the stall, on the node that logged it."""
    line = "[c10d] The client socket has timed out after 300000ms while trying to connect to (10.156.33.26, 51216)."
    alerts = diagnose(Snapshot(logs={"node 0 (a)": ["fine"], "node 1 (b)": ["fine", line, "more"]}))
    assert [(a.id, a.where, a.evidence) for a in alerts if a.severity == "error"] == [
        ("WEIGHT-SYNC-STALL", "node 1 (b)", line)]


def real_traceback(depth: int) -> list[str]:
    """What Python prints for an exception raised ``depth`` distinct frames deep, then re-raised from."""
    code = "\n".join(f"def f{k}():\n    f{k + 1}()" for k in range(depth))
    code += f"\ndef f{depth}():\n    raise ValueError('boom')\ntry:\n    f0()\nexcept ValueError as e:\n" \
            "    raise RuntimeError('reward function failed') from e\n"
    err = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stderr
    return err.rstrip("\n").split("\n")


def traceback_alert(logs):
    return next(a for a in diagnose(Snapshot(logs=logs)) if a.id == "TRACEBACK")


def test_traceback_evidence_is_the_whole_traceback_through_the_exception():
    tb = real_traceback(3)
    glued = "Train:   0%|          | 0/122 [00:00<?, ?it/s]" + tb[0]  # tqdm's bar on the same line
    alert = traceback_alert({"node 0 (a)": ["[INFO:swift] start", glued, *tb[1:], "[INFO:swift] later line"]})
    # the exception line first, then the traceback through it (both chained), nothing before or after
    assert alert.evidence.split("\n") == [tb[-1], "… its traceback:", *tb[:-1]]
    assert tb[-1] == "RuntimeError: reward function failed" and "ValueError: boom" in alert.evidence


def test_a_long_traceback_keeps_its_head_and_its_exception_line():
    tb = real_traceback(80)
    lines = traceback_alert({"node 0 (a)": tb}).evidence.split("\n")
    assert len(tb) > 80 and len(lines) == 60 and lines[:2] == [tb[-1], "… its traceback:"]
    assert lines[2:20] == tb[:18] and lines[-39:] == tb[-40:-1] and f"{len(tb) - 58} lines left out" in lines[20]


def test_traceback_names_the_rank_and_leaves_other_ranks_lines_out():
    tb = real_traceback(2)
    mixed = []
    for k, line in enumerate(tb):
        mixed += [f"[rank1]: {line}", f"[rank0]: [INFO:swift] rank 0 still busy {k}"]
    alert = traceback_alert({"node 0 (a)": ["fine"], "node 1 (b)": ["fine", *mixed]})
    assert "first on node 1 (b), rank 1." in alert.explanation
    assert alert.evidence.split("\n") == [f"[rank1]: {tb[-1]}", "… its traceback:",
                                          *(f"[rank1]: {line}" for line in tb[:-1])]
    summary = ["Root Cause (first observed failure):", "[0]:", "  time      : 2026-11-22_12:00:00",
               "  host      : node-b", "  rank      : 9 (local_rank: 1)", "  exitcode  : 1 (pid: 4242)"]
    failed = {a.id: a for a in diagnose(Snapshot(logs={"node 1 (b)": tb + summary}, job_state="failed"))}
    assert failed["NODE-FAILED"].where == "node 1 (b), rank 9 (local rank 1)" and "TRACEBACK" not in failed


def test_failed_node_is_reported_with_its_log():
    err = "node 1 (h1, rank 1) failed first: exit code 137\nKilled"
    alert = next(a for a in diagnose(Snapshot(job_state="failed", job_error=err)) if a.id == "NODE-FAILED")
    assert alert.evidence == err


def gpu_rows(name, now):
    rows = [parse_smi_line(line, "h0", now - 100 + k * 0.5)
            for k, line in enumerate((DATA / "nvidia-smi" / name).read_text().splitlines())]
    return rows * 5


def test_hang_with_the_nccl_spin_signature_names_the_quiet_node():
    now = time.time()
    kw = dict(metrics=HEALTHY, now=now, last_step_at=now - 1200, started_at=now - 3000,
              last_output_at={"node 0 (a)": now - 1100, "node 1 (b)": now - 1300})
    alerts = {a.id: a for a in diagnose(Snapshot(gpu=gpu_rows("nccl_spin.csv", now), **kw))}
    assert "HANG" in alerts and "NCCL spin" in alerts["HANG"].explanation
    assert "went quiet first: node 1 (b)" in alerts["HANG"].explanation
    idle = {a.id: a for a in diagnose(Snapshot(gpu=gpu_rows("idle.csv", now), **kw))}
    assert "near 0% utilisation" in idle["HANG"].explanation
    assert "HANG" not in ids(**{**kw, "last_step_at": now - 60, "last_output_at": {"node 0 (a)": now - 5}})


SMI_BUSY, SMI_IDLE = ((DATA / "nvidia-smi" / f).read_text().splitlines() for f in ("busy.csv", "idle.csv"))


def gpu_series(busy, now, seconds=300, host="h0"):
    """1 Hz samples of 8 GPUs over the last ``seconds``: at second t GPU g shows a tick of busy.csv when
    busy(t, g), else of idle.csv (nvidia-smi's documented format, no GPU here)."""
    out = []
    for t in range(seconds):
        for g in range(8):
            rows = SMI_BUSY if busy(t, g) else SMI_IDLE
            out.append(parse_smi_line(rows[(t % 3) * 8 + g], host, now - seconds + t))
    return out


def underused(**kw):
    return next((a for a in diagnose(Snapshot(**kw)) if a.id == "GPU-UNDERUSED"), None)


def test_gpu_underused_catches_colocate_oscillation_with_numbers_and_levers():
    now = time.time()
    alert = underused(gpu=gpu_series(lambda t, g: (t // 20) % 2 == 0, now), now=now,
                      settings={"sleep_level": 1, "offload_model": True, "vllm_gpu_memory_utilization": 0.5,
                                "steps_per_generation": None, "async_generate": False})
    assert alert and "alternating busy and idle" in alert.title and "8 of 8 GPUs" in alert.explanation
    # 8 busy and 7 idle stretches of 20 s: 159 of 299 s busy
    assert "h0 GPU 0: busy 53% of the last 5 min, 14 busy↔idle switches; median busy stretch 20 s, idle stretch " \
           "20 s" in alert.evidence
    for lever in ("sleep_level 1", "offload_model True", "vllm_gpu_memory_utilization (now 0.5)",
                  "steps_per_generation", "async_generate"):
        assert lever in alert.fix, lever


def test_gpu_underused_names_data_loading_and_server_mode_levers():
    now = time.time()
    stall = gpu_series(lambda t, g: t % 11 < 8, now)  # 8 s of work, 3 s waiting for the next batch
    alert = underused(gpu=stall, now=now, server_mode=True, settings={"dataloader_num_workers": 1,
                                                                      "async_generate": False})
    assert alert and "idle stretch 3 s" in alert.evidence
    assert "raise dataloader_num_workers (now 1)" in alert.fix and "async_generate true (now False)" in alert.fix


def test_gpu_underused_counts_only_the_gpus_that_wait():
    now = time.time()
    alert = underused(gpu=gpu_series(lambda t, g: g < 4 or (t // 30) % 2 == 0, now), now=now)
    assert "4 of 8 GPUs" in alert.explanation and "h0 GPU 4" in alert.evidence and "h0 GPU 3" not in alert.evidence


def test_gpu_underused_silent_on_steady_work_and_a_start_up_stretch():
    now = time.time()
    steps_long_ago = now - 3600
    assert underused(gpu=gpu_series(lambda t, g: True, now), now=now, first_step_at=steps_long_ago) is None
    start_up = gpu_series(lambda t, g: t >= 150, now)  # loading the model, then training
    assert underused(gpu=start_up, now=now) is None
    assert underused(gpu=start_up, now=now, first_step_at=now - 60) is None  # first step logged after the GPUs began
    assert underused(gpu=start_up, now=now, first_step_at=steps_long_ago) is not None  # the same gap mid-run
    assert underused(gpu=gpu_series(lambda t, g: False, now), now=now) is None  # nothing logged yet: still starting
    assert underused(gpu=gpu_series(lambda t, g: False, now), now=now, first_step_at=steps_long_ago) is not None
    assert underused(gpu=gpu_series(lambda t, g: t < 200, now), now=now, first_step_at=steps_long_ago,
                     job_state="succeeded") is None


def test_parse_documented_smi_csv():
    s = parse_smi_line((DATA / "nvidia-smi/busy.csv").read_text().splitlines()[3], "h0", 1.0)
    assert s["gpu_index"] == 3 and s["mem_total"] == 81559 and s["power_limit"] == 700.0 and s["host"] == "h0"
    assert parse_smi_line("index, name", "h0") is None
    assert parse_smi_line("2026/11/22, 0, X, [N/A], 1, 2, [N/A], 3, 4, 5", "h")["util"] is None


def collect(channel, items: list, n: int, timeout: float):
    """Run ``channel`` until ``items`` holds ``n`` entries or ``timeout`` seconds pass; returns the stopped channel."""
    channel.start()
    wait_for(lambda: len(items) >= n, timeout)
    channel.stop()
    return channel


def test_smi_channel_over_ssh_restarts_after_a_drop(ssh_env, tmp_path):
    (h,) = ssh_env.add(1)
    standin = tmp_path / "bin" / "nvidia-smi"
    standin.parent.mkdir()
    # the UUID map, or one documented-format tick of 8 GPUs, then exits as a dropped channel would
    standin.write_text(f"#!/bin/bash\ncase \"$*\" in *index,uuid*) cat {DATA / 'nvidia-smi/gpu_uuid.csv'} ;;\n"
                       f"  *) head -n 8 {DATA / 'nvidia-smi/busy.csv'} ;;\nesac\n")
    standin.chmod(0o755)
    pool = Pool()

    def open_stream(cmd):
        _, out, _ = pool.get(h.name).client.exec_command(f"export PATH={standin.parent}:$PATH; {cmd}", timeout=10)
        return iter(out.readline, "")

    samples = []
    channel = collect(SmiChannel(h.name, open_stream, samples.append), samples, 16, 15)
    pool.close()
    assert len(samples) >= 16 and channel.restarts >= 1
    assert {s["gpu_index"] for s in samples} == set(range(8)) and all(s["host"] == h.name for s in samples)


def test_apps_reader_maps_uuids_to_indexes_and_reports_each_listing():
    read = AppsReader("h0")
    lines = (DATA / "nvidia-smi/gpu_uuid.csv").read_text().splitlines()
    lines += (DATA / "nvidia-smi/compute_apps.csv").read_text().splitlines() + [TICK, TICK]
    snaps = [s for s in map(read, lines) if s is not None]
    assert [len(s["processes"]) for s in snaps] == [9, 0]  # the second listing is empty: the processes ended
    on_3 = sorted((p["pid"], p["used_mib"]) for p in snaps[0]["processes"] if p["gpu_index"] == 3)
    assert on_3 == [(28817, 20480.0), (41233, 61210.0)]
    assert sorted(p["gpu_index"] for p in snaps[0]["processes"]) == [0, 1, 2, 3, 3, 4, 5, 6, 7]
    assert read("GPU-x, 12, [N/A]") is None and read(TICK)["processes"][0]["used_mib"] is None


def test_process_channel_over_ssh_stores_who_holds_which_gpu(ssh_env, tmp_path):
    (h,) = ssh_env.add(1)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    # the stand-in answers both documented queries; every third process listing fails, as a dropped channel would
    (bin_dir / "nvidia-smi").write_text(f"""#!/bin/bash
case "$*" in
  *--query-gpu=index,uuid*) cat {DATA / "nvidia-smi/gpu_uuid.csv"} ;;
  *--query-compute-apps=gpu_uuid,pid,used_memory*)
    n=$(cat {tmp_path}/calls 2>/dev/null || echo 0); echo $((n + 1)) > {tmp_path}/calls
    [ $((n % 3)) -eq 2 ] && exit 9
    cat {DATA / "nvidia-smi/compute_apps.csv"} ;;
  *) exit 2 ;;
esac
""")
    (bin_dir / "nvidia-smi").chmod(0o755)
    store, pool = Store(tmp_path / "db.sqlite"), Pool()

    def open_stream(cmd):
        _, out, _ = pool.get(h.name).client.exec_command(f"export PATH={bin_dir}:$PATH; {cmd}", timeout=10)
        return iter(out.readline, "")

    snaps = []
    channel = collect(SmiChannel(h.name, open_stream, lambda s: (snaps.append(s), store.set_gpu_processes("j", s)),
                                 interval_ms=100, query=PROCESSES), snaps, 3, 20)
    pool.close()
    assert len(snaps) >= 3 and channel.restarts >= 1
    rows = store.gpu_processes("j")
    assert len(rows) == 9 and {r.host for r in rows} == {h.name}
    assert [(r.pid, r.used_mib) for r in rows if r.gpu_index == 3] == [(41233, 61210.0), (28817, 20480.0)]
    store.set_gpu_processes("j", {"host": h.name, "ts": time.time(), "processes": []})
    assert store.gpu_processes("j") == []


def test_real_completions_rows_parse():
    rows = [row for line in (DATA / "captured/swift46_tiny_grpo_completions.jsonl").read_text().splitlines()
            for row in parse_completion_line(line)]
    assert [r["step"] for r in rows] == [1, 1, 2, 2, 2, 2]  # two per step; the last step is logged twice
    assert all(isinstance(r["completion"], str) and r["Format"] == 0.0 and r["solution"] for r in rows)
    assert parse_completion_line('{"loss": 1}') == [] and parse_completion_line("not json") == []
    assert completions_file("/r/out/v0-1/logging.jsonl") == "/r/out/v0-1/completions.jsonl"


# watcher -------------------------------------------------------------------------------------------------------
# A job launched over real SSH onto a namespace host; its `swift` is a sleeper, and what ms-swift would print and
# write there is the real captured 4.6 output, appended by the test (test hosts share this file system).

@pytest.fixture
def sleeper_job(ssh_env, tmp_path, request):
    """A launched job whose swift sleeps; the train section's output_dir is "out" unless the test's param says."""
    env = tmp_path / "env"
    (env / "bin").mkdir(parents=True)
    (env / "bin/swift").write_text("#!/bin/bash\nexec sleep 300\n")
    (env / "bin/swift").chmod(0o755)
    (h,) = ssh_env.add(1)
    spec = validate_spec({
        "name": "watch", "train": {"model": "Qwen/Qwen2.5-0.5B", "dataset": ["/data/d.jsonl"], "reward_funcs": ["format"],
                                   "num_generations": 2, "per_device_train_batch_size": 2,
                                   **getattr(request, "param", {"output_dir": "out"})},
        "rollout": {"use_vllm": False, "vllm_mode": None},
        "cluster": {"nodes": [{"host": h.name, "address": h.addr, "gpus": [0], "python_env": str(env)}],
                    "run_root": str(tmp_path / "runs")}})
    with launched(spec, tmp_path) as job:
        yield job


STDOUT_LINES = STDOUT.rstrip("\n").split("\n")  # as written: tqdm's \r stays inside its line


def swift_prints(run_dir: Path, lines: list[str]) -> None:
    with open(run_dir / "node_0.log", "a") as f:
        f.writelines(line + "\n" for line in lines)


def swift_logs(run: Path, lines: list[str]) -> None:
    run.mkdir(parents=True, exist_ok=True)
    with open(run / "logging.jsonl", "a") as f:
        f.writelines(line + "\n" for line in lines)


def at_step(line: str, step: int) -> str:
    return line.replace('"global_step/max_steps": "3/3"', f'"global_step/max_steps": "{step}/9"')


def test_metrics_continue_after_the_logging_path_leaves_the_window(sleeper_job):
    jobs, job, rd = sleeper_job
    run = rd / "out/v0-20261122-114336"
    swift_prints(rd, [line.replace("/tmp/tinyruns/out", str(rd / "out")) for line in STDOUT_LINES])
    swift_logs(run, JSONL[:3])
    watcher = Watcher(jobs)
    assert watcher.poll(job).new_steps == 3
    swift_prints(rd, [f"[INFO:swift] rollout {k}" for k in range(5200)])
    assert watcher.poll(job).new_steps == 0
    assert not jobs.store.log_lines(job, 0, 1, contains="The logging file will be saved in")  # scrolled out
    swift_logs(run, [at_step(JSONL[2], 4)])
    assert watcher.poll(job).new_steps == 1
    assert [s for s, _ in jobs.store.metrics(job)["reward"]] == [1, 2, 3, 4]


def test_without_log_anchors_the_newest_run_dir_since_launch_is_found(sleeper_job):
    """LOG_LEVEL=WARNING hides ms-swift's INFO lines (output_dir, logging file): the run dir is then listed."""
    jobs, job, rd = sleeper_job
    old = rd / "out/v0-20261121-090000"
    swift_logs(old, [at_step(JSONL[0], 7)])
    os.utime(old / "logging.jsonl", (time.time() - 86400, time.time() - 86400))  # an earlier run, same output_dir
    swift_prints(rd, [line for line in STDOUT_LINES if "[INFO:swift]" not in line and "{'" not in line])
    watcher = Watcher(jobs)
    assert watcher.poll(job).new_steps == 0
    swift_logs(rd / "out/v1-20261122-114336", JSONL[:2])
    assert watcher.poll(job).new_steps == 2
    assert jobs.store.meta(job, "logging_jsonl") == str(rd / "out/v1-20261122-114336/logging.jsonl")
    assert sorted({s for rows in jobs.store.metrics(job).values() for s, _ in rows}) == [1, 2]


@pytest.mark.parametrize("sleeper_job", [{}], indirect=True)
def test_without_output_dir_the_run_dir_is_listed_where_ms_swift_puts_it(sleeper_job):
    """No --output_dir: ms-swift writes output/<model name>/vN-…/ under the working directory."""
    jobs, job, rd = sleeper_job
    swift_prints(rd, [line for line in STDOUT_LINES if "[INFO:swift]" not in line and "{'" not in line])
    swift_logs(rd / "output/Qwen2.5-0.5B/v0-20261122-114336", JSONL[:2])
    assert Watcher(jobs).poll(job).new_steps == 2


def test_stdout_dicts_stand_in_until_logging_jsonl_appears_without_double_counting(sleeper_job):
    jobs, job, rd = sleeper_job
    lines = [line.replace("/tmp/tinyruns/out", str(rd / "out")) for line in STDOUT_LINES]
    second_step = [k for k, line in enumerate(lines) if "{'loss'" in line][1]
    swift_prints(rd, lines[:second_step + 1])  # steps 1 and 2 printed; no logging.jsonl to read yet
    watcher = Watcher(jobs)
    assert watcher.poll(job).new_steps == 2
    assert jobs.store.metrics(job)["seconds_per_step"][0] == (1, 0.1622)  # stdout's 4 significant digits
    swift_logs(rd / "out/v0-20261122-114336", JSONL[:3])
    swift_prints(rd, lines[second_step + 1:])
    assert watcher.poll(job).new_steps == 1  # step 3; steps 1 and 2 are overwritten, not added
    m = jobs.store.metrics(job)
    assert [s for s, _ in m["reward"]] == [1, 2, 3]
    assert m["seconds_per_step"][0] == (1, 0.162195)  # logging.jsonl's value replaced stdout's


def test_the_watcher_records_the_pace_next_to_the_prediction(sleeper_job):
    """The real 4.6 run's steps as they arrive: after the first, only its warm-up (stdout's digits until
    logging.jsonl is read); after three, two logged intervals from ms-swift's clock (train_speed × steps)."""
    jobs, job, rd = sleeper_job
    run = rd / "out/v0-20261122-114336"
    lines = [line.replace("/tmp/tinyruns/out", str(rd / "out")) for line in STDOUT_LINES]
    swift_prints(rd, lines[:[k for k, line in enumerate(lines) if "{'loss'" in line][0] + 1])
    watcher = Watcher(jobs)
    watcher.poll(job)
    first = jobs.store.time_measured(job)
    assert (first["first_step"], first["warmup_s"], first["median_s"]) == (1, 0.1622, None)  # stdout's digits
    swift_logs(run, JSONL[:3])
    watcher.poll(job)
    m = jobs.store.time_measured(job)
    clock = [0.162195 * 1, 0.112705 * 2, 0.095395 * 3]  # train_speed(s/it) × steps at steps 1, 2, 3
    assert (m["warmup_s"], m["logged_intervals"], m["step"], m["total"]) == (0.162195, 2, 3, 3)
    assert m["median_s"] == pytest.approx((clock[2] - clock[1] + clock[1] - clock[0]) / 2)
    assert m["startup_s"] > 0 and m["completions"] == {"mean_length": 16.0, "cap": 512, "clipped_ratio": 1.0}


def test_watcher_alerts_on_stored_gpu_samples_with_the_jobs_settings(sleeper_job):
    jobs, job, _ = sleeper_job
    jobs.store.add_gpu_samples(job, gpu_series(lambda t, g: (t // 20) % 2 == 0, time.time()))
    alert = next(a for a in Watcher(jobs).poll(job).alerts if a.id == "GPU-UNDERUSED")
    assert "sleep_level 0, offload_model False" in alert.fix and "(now 0.9)" in alert.fix
    assert jobs.store.alerts(job)[0].evidence == alert.evidence


def test_the_watcher_judges_the_gpus_from_the_running_window_when_telemetry_keeps_one(sleeper_job):
    """With the app's telemetry on, the samples reach the doctor through the job's running window (GpuWindow), not a
    re-read of the store: here the store holds none. The collector stands in for the channels that feed it, which need
    GPUs (tests/test_telemetry.py runs them with an nvidia-smi stand-in)."""
    jobs, job, _ = sleeper_job
    window = GpuWindow(gpu_series(lambda t, g: (t // 20) % 2 == 0, time.time()))

    class Fed(Collector):
        def follow(self, *args):  # no channels to open: the window is given
            pass

        def window(self, job_id):
            return window if job_id == job else None
    jobs.collector = Fed(jobs.store)
    alert = next(a for a in Watcher(jobs).poll(job).alerts if a.id == "GPU-UNDERUSED")
    assert "8 of 8 GPUs" in alert.explanation and not jobs.store.gpu_samples(job)


def test_a_moving_tqdm_bar_without_a_new_line_counts_as_progress(sleeper_job):
    """Between metric lines (logging_steps > 1) rank 0 only redraws its Train bar with \\r: no new line arrives, the
    run is alive all the same; a redraw that only moves the bar's clock is not progress."""
    jobs, job, rd = sleeper_job
    watcher = Watcher(jobs)
    swift_prints(rd, ["[INFO:swift] The logging file will be saved in: /x/logging.jsonl"])
    bar = "\rTrain:  10%|█         | 1/10 [00:{:02d}<00:09,  1.00s/it]"
    with open(rd / "node_0.log", "a") as f:
        f.write(bar.format(1))
    watcher.poll(job)
    first = jobs.store.meta(job, "progress_at:0")
    assert first and jobs.store.meta(job, "pending:0") == "Train:  10%|█         | 1/10"
    with open(rd / "node_0.log", "a") as f:
        f.write(bar.format(9))  # tqdm's monitor redrawing the same step
    watcher.poll(job)
    assert jobs.store.meta(job, "progress_at:0") == first
    with open(rd / "node_0.log", "a") as f:
        f.write(bar.replace("10%|█  ", "20%|██ ").replace("1/10", "2/10").format(11))
    time.sleep(0.01)
    watcher.poll(job)
    assert float(jobs.store.meta(job, "progress_at:0")) > float(first)


def test_polling_an_unchanged_job_parses_and_resolves_its_spec_once(sleeper_job, monkeypatch):
    """The Monitor polls every 3 s: the stored spec (which never changes) is parsed and resolved once per text, not
    on every pass of the watcher or the jobs service."""
    from grpo_ui.jobs import specs
    from grpo_ui.spec import yaml_io
    jobs, job, _ = sleeper_job
    parsed, parse = [], yaml_io.validate_spec  # every spec_from_yaml, wherever it is called, validates through it
    monkeypatch.setattr(yaml_io, "validate_spec", lambda data, source="spec": parsed.append(source) or parse(data,
                                                                                                        source))
    specs.stored_job.cache_clear()
    watcher = Watcher(jobs)
    for _ in range(3):
        watcher.poll(job)
    assert len(parsed) == 1
