"""Monitoring costs: metric-line parsing speed (target ≥ 200k lines/s), memory while tailing a large log (target:
flat), the CPU cost of GPU telemetry for 8, 16 and 64 hosts × 8 GPUs at 1 Hz (target < 10 % of one core at 64), and
the measured pace the watcher records on every pass of a long run.

Baselines in the same run: bare json.loads per line, reading the file with plain f.read in the same chunks, the
doctor's duty-cycle pass re-reading its 5-minute window from the store (before the running window), and the read of
every stored metric the doctor already makes on each pass.
Rates are per CPU-second of this process (best of 3), so that other work on a shared machine does not count.
Telemetry input is nvidia-smi's documented CSV format (tests/data/nvidia-smi), no GPU being available here.
"""

import json
import os
import resource
import tempfile
import time
from pathlib import Path

from grpo_ui.backends.remote.gpu import TICK, AppsReader, parse_smi_line
from grpo_ui.backends.remote.runner import LocalRunner
from grpo_ui.doctor import curves
from grpo_ui.doctor.diagnose import Snapshot, diagnose
from grpo_ui.doctor.gpu_window import DUTY_WINDOW_S, PEAK_STEPS, GpuWindow
from grpo_ui.doctor.logs import LogTail
from grpo_ui.doctor.metrics import parse_jsonl_line, parse_stdout_line
from grpo_ui.jobs.store import Store
from grpo_ui.jobs.time_loop import record_pace
from grpo_ui.spec.yaml_io import spec_to_yaml, validate_spec

DATA = Path(__file__).parent.parent / "tests" / "data"


def rate(fn, lines, repeat: int = 3) -> float:
    """Lines per CPU-second, best of ``repeat``."""
    best = 0.0
    for _ in range(repeat):
        start = time.process_time()
        for line in lines:
            fn(line)
        best = max(best, len(lines) / (time.process_time() - start))
    return best


def cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def rss_mib() -> float:
    return int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def main(log_mib: int = int(os.environ.get("BENCH_LOG_MIB", "1024"))):
    jsonl = (DATA / "captured/swift46_tiny_grpo_logging.jsonl").read_text().splitlines()[:3] * 70000
    stdout = [line for line in (DATA / "captured/swift46_tiny_grpo_stdout.log").read_text().splitlines()
              if "{'loss'" in line][:3] * 30000
    base = rate(json.loads, jsonl)
    ours = rate(parse_jsonl_line, jsonl)
    print(f"logging.jsonl lines: {ours:,.0f}/s parsed and normalised (json.loads alone: {base:,.0f}/s, "
          f"ratio {ours / base:.2f}); target ≥ 200,000/s")
    print(f"stdout dict lines (ast fallback): {rate(parse_stdout_line, stdout):,.0f}/s")

    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "big.log"
        line = (b"Train:  5%|#     | 12/240 [01:02<19:40, 5.17s/it]\r" * 3 + b"[INFO:swift] step log line\n")
        block = line * ((4 << 20) // len(line) + 1)
        with open(path, "wb") as f:
            for _ in range(log_mib // 4):
                f.write(block[: 4 << 20])
        before = rss_mib()
        tail, count, peak = LogTail(LocalRunner().read, str(path)), 0, before
        start = time.perf_counter()
        while True:
            got = tail.poll()
            if not got:
                break
            count += len(got)
            peak = max(peak, rss_mib())
        ours_s = time.perf_counter() - start
        start = time.perf_counter()
        with open(path, "rb") as f:
            while f.read(1 << 20):
                pass
        raw_s = time.perf_counter() - start
        print(f"tail of a {log_mib} MiB log: {count:,} lines in {ours_s:.1f} s ({log_mib / ours_s:.0f} MiB/s; plain "
              f"read {log_mib / raw_s:.0f} MiB/s); RSS {before:.0f} → peak {peak:.0f} MiB (+{peak - before:.0f} MiB)")

    for hosts in (8, 16, 64):
        telemetry(hosts)
    pace_pass()


def pace_pass(steps: int = 5000, passes: int = 20) -> None:
    """One watcher pass's pace record over a run of ``steps`` logged steps (every metric key of the real 4.6 run)
    and a full log window holding vLLM sleep/wake lines of 8 ranks, against reading every stored metric (which the
    doctor's pass does anyway)."""
    line = (DATA / "captured/swift46_tiny_grpo_logging.jsonl").read_text().splitlines()[0]
    wake = (DATA / "gpu_logs/colocate_sleep_stuck.log").read_text().splitlines()[1:6]
    spec = validate_spec({"train": {"model": "m", "dataset": ["d"], "reward_funcs": ["format"]},
                          "rollout": {"use_vllm": True, "vllm_mode": "colocate", "sleep_level": 1},
                          "cluster": {"nodes": [{"host": "h", "gpus": list(range(8))}]}})
    with tempfile.TemporaryDirectory() as d:
        store = Store(Path(d) / "db.sqlite")
        store.create_job("job", "job", spec_to_yaml(spec), "running")
        store.add_node("job", 0, "h", "trainer", 0, "node_0.sh", d)
        for step in range(1, steps + 1):
            values = parse_jsonl_line(line.replace('"1/3"', f'"{step}/{2 * steps}"')
                                      .replace('"train_speed(s/it)": 0.162195', f'"train_speed(s/it)": {60 + step % 7}'))
            store.add_metrics("job", step, values[1])
        store.add_log_lines("job", 0, [w for w in wake for _ in range(8)] * 125)
        cpu0 = cpu_s()
        for _ in range(passes):
            store.metrics("job")
        read = (cpu_s() - cpu0) / passes
        cpu0 = cpu_s()
        for _ in range(passes):
            record_pace(store, "job", spec)
        ours = (cpu_s() - cpu0) / passes
    print(f"pace record per watcher pass, {steps:,} logged steps: {ours * 1000:.0f} ms CPU (reading every stored metric, "
          f"as the doctor's pass does: {read * 1000:.0f} ms; ratio {ours / read:.2f})")


def telemetry(hosts: int = 8, ticks: int = 300) -> None:
    """5 minutes of ``hosts`` × 8 GPUs at 1 Hz as the Monitor handles them: each line parsed and written to SQLite as
    it arrives (and into the job's running window, as telemetry.Collector does), a process listing per host every
    5 s, and the GPU part of the watcher's doctor pass every 3 s (each GPU's duty cycle over the last 5 min, its
    memory peak per step over the last steps, a step logged every 30 s) from the running window, against re-reading
    those samples from the store (the pass before issue 32, the baseline, in the same run)."""
    rows = (DATA / "nvidia-smi/busy.csv").read_text().splitlines()
    listing = (DATA / "nvidia-smi/compute_apps.csv").read_text().splitlines() + [TICK]
    with tempfile.TemporaryDirectory() as d:
        store = Store(Path(d) / "db.sqlite")
        window = GpuWindow()
        now = time.time()
        readers = [AppsReader(f"h{h}") for h in range(hosts)]
        for read in readers:  # the uuid → index map, once per channel
            for line in (DATA / "nvidia-smi/gpu_uuid.csv").read_text().splitlines():
                read(line)
        cpu0 = cpu_s()
        for t in range(ticks):
            for h in range(hosts):
                for row in rows[(t % 3) * 8:(t % 3) * 8 + 8]:
                    sample = parse_smi_line(row, f"h{h}", now - ticks + t)
                    store.add_gpu_samples("job", [sample])
                    window.add(sample)
                if t % 5 == 0:
                    for line in listing:
                        if (snap := readers[h](line)) is not None:
                            store.set_gpu_processes("job", snap)
        ingest = (cpu_s() - cpu0) / ticks
        steps = [(k, now - ticks + 30 * k) for k in range(1, ticks // 30 + 1)]  # a step logged every 30 s
        since = steps[-PEAK_STEPS][1] if len(steps) > PEAK_STEPS else 0
        passes = 5
        cpu0 = cpu_s()
        for _ in range(passes):
            reread = diagnose(Snapshot(now=now, gpu=store.gpu_samples("job", now - DUTY_WINDOW_S),
                                       first_step_at=now - 3600,
                                       gpu_by_step=curves.memory_per_gpu(store.gpu_samples("job", since), steps)))
        before = (cpu_s() - cpu0) / passes / 3  # one pass every 3 s
        cpu0 = cpu_s()
        for k in range(passes):
            kept = diagnose(Snapshot(now=now + k * 3, gpu_window=window, first_step_at=now - 3600,
                                     gpu_by_step=window.step_peaks(steps)))
        doctor = (cpu_s() - cpu0) / passes / 3
        assert [a.id for a in kept] == [a.id for a in reread]
    print(f"GPU telemetry, {hosts} hosts × 8 GPUs at 1 Hz: {ingest * 100:.2f} % of one core to parse and store "
          f"samples and process listings (and keep the running window), {doctor * 100:.2f} % for the doctor's GPU "
          f"pass every 3 s from the running window (re-reading the samples: {before * 100:.2f} %, "
          f"{before / max(doctor, 1e-9):.0f} ×); total {(ingest + doctor) * 100:.2f} % (re-reading: "
          f"{(ingest + before) * 100:.2f} %; target < 10 %; SSH channel reads not included)")


if __name__ == "__main__":
    main()
