"""Monitoring costs: metric-line parsing speed (target ≥ 200k lines/s), memory while tailing a large log (target:
flat), and the CPU cost of GPU telemetry for 8 hosts × 8 GPUs at 1 Hz (target < 10 % of one core).

Baselines in the same run: bare json.loads per line, and reading the file with plain f.read in the same chunks.
Telemetry input is nvidia-smi's documented CSV format (tests/data/nvidia-smi), no GPU being available here.
"""

import json
import os
import resource
import tempfile
import time
from pathlib import Path

from grpo_ui.monitor.gpu import parse_smi_line
from grpo_ui.monitor.logs import LogTail
from grpo_ui.monitor.metrics import parse_jsonl_line, parse_stdout_line
from grpo_ui.remote.runner import LocalRunner

DATA = Path(__file__).parent.parent / "tests" / "data"


def rate(fn, lines) -> float:
    start = time.perf_counter()
    for line in lines:
        fn(line)
    return len(lines) / (time.perf_counter() - start)


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

    rows = (DATA / "nvidia-smi/busy.csv").read_text().splitlines()
    ticks = 300  # 5 minutes of 8 hosts × 8 GPUs at 1 Hz
    cpu0 = resource.getrusage(resource.RUSAGE_SELF).ru_utime + resource.getrusage(resource.RUSAGE_SELF).ru_stime
    for t in range(ticks):
        for host in range(8):
            for row in rows[:8]:
                parse_smi_line(row, f"h{host}", float(t))
    cpu1 = resource.getrusage(resource.RUSAGE_SELF).ru_utime + resource.getrusage(resource.RUSAGE_SELF).ru_stime
    print(f"GPU telemetry parsing, 8 hosts × 8 GPUs at 1 Hz: {(cpu1 - cpu0) / ticks * 100:.3f} % of one core "
          "(target < 10 %; SSH channel reads not included)")


if __name__ == "__main__":
    main()
