"""The doctor's speed on a large log: lines per CPU-second of `python -m grpo_ui doctor LOG`'s work (read the file,
scan every line for failures, read the metrics it prints, diagnose) on a 64 MB log made of real ms-swift runs
(tests/data/captured: a healthy run's log repeated, then the log of a run whose rank 1 died).

Baseline in the same run: reading the same file into lines (decode, split, tqdm's carriage returns folded), the part
no diagnosis can skip. Times are CPU seconds of this process, best of 3, so that other work on a shared machine does
not count.

Run: PYTHONPATH=. python bench/doctor_speed.py
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from grpo_ui.doctor.diagnose import report
from grpo_ui.doctor.logfiles import read_lines, snapshot

CAPTURED = Path(__file__).resolve().parent.parent / "tests/data/captured"
SIZE = 64 << 20


def build(path: Path) -> None:
    body = (CAPTURED / "healthy_logging5.log").read_bytes()
    end = (CAPTURED / "rank1_sigabrt.log").read_bytes()
    with open(path, "wb") as f:
        for _ in range(SIZE // len(body)):
            f.write(body)
        f.write(end)


def best_cpu_s(fn, repeat: int = 3) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.process_time()
        fn()
        best = min(best, time.process_time() - start)
    return best


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "big.log"
        build(path)
        size = path.stat().st_size
        lines = len(read_lines(path)[0])
        read = best_cpu_s(lambda: read_lines(path))
        found = report(snapshot([path], quiet_for=0.0))
        doctor = best_cpu_s(lambda: report(snapshot([path], quiet_for=0.0)))
    print(f"{size / 2**20:.0f} MB, {lines:,} lines; "
          f"the doctor said: {found.state}, {len(found.alerts)} finding(s)")
    print(f"reading the lines alone: {read:.2f} CPU s ({lines / read:,.0f} lines/s)")
    print(f"the doctor: {doctor:.2f} CPU s ({lines / doctor:,.0f} lines/s), {doctor / read:.1f} × reading")


if __name__ == "__main__":
    main()
