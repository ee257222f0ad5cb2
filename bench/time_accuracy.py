"""Accuracy of the step-time model against published GRPO step times (tests/data/time_measurements.jsonl).

Seconds per optimizer step, predicted for each row as the same shape run on ms-swift (bench/time_calibration.py), on
the fit rows and the frozen held-out rows: median and p90 absolute % error of ours, next to the naive baseline (one
tokens-per-second-per-GPU figure fitted on the fit rows, measured in the same run); the same per framework the rows
come from; the measured range the prediction carries (timing.report.RANGE) and how many rows fall within it; each row.
Targets on the held-out rows: median ≤ 25 %, p90 ≤ 60 %, and better than the baseline. The rows whose source gives the
mean completion length and those where the model assumes it (efficiency.COMPLETION_FILL of the cap) are also shown
apart: the length is the input the prediction depends on most.

``--fit`` first searches the efficiency constants on the fit rows (bench/time_calibration.fit) and prints them.
"""

from __future__ import annotations

import sys
from collections import defaultdict

from bench.time_calibration import (
    baseline_rate,
    completion_fill,
    error,
    evaluate_all,
    fit,
    load,
    measured_range,
    stats,
)
from grpo_ui.timing import efficiency
from grpo_ui.timing.report import RANGE


def line(label: str, part, rate: float) -> str:
    ours = stats([error(r.ours, r.measured) for r in part])
    base = stats([error(r.baseline(rate), r.measured) for r in part])
    better = sum(error(r.ours, r.measured) < error(r.baseline(rate), r.measured) for r in part)
    return (f"{label:<34} {len(part):>3}   {ours[0]:7.0f} {ours[1]:6.0f}   {base[0]:9.0f} {base[1]:6.0f}   "
            f"{better:>3}/{len(part)}")


def main(argv: list[str]) -> None:
    rows = load()
    if "--fit" in argv:
        print("fitted on the fit rows:", fit(rows), "\n")
    results, skipped = evaluate_all(rows)
    fit_part = [r for r in results if r.split == "fit"]
    held = [r for r in results if r.split == "held_out"]
    rate = baseline_rate(fit_part)
    print(f"{len(rows)} published step times; {len(fit_part)} fit, {len(held)} held out predicted. Baseline: "
          f"{rate:,.0f} tokens/s per GPU (median of the fit rows) × the step's tokens.")
    for row, why in skipped:
        print(f"not predicted ({row['split']}): {row['id']}: {why}")
    print()
    print(f"{'seconds per optimizer step':<34} {'n':>3}   {'ours: median   p90':<18}   {'baseline: median   p90':<22}"
          "  ours better")
    print(f"{'(absolute % error)':<34}")
    print(line("fit", fit_part, rate))
    print(line("held out", held, rate))
    print(line("all", results, rate))
    for label, part in (("fit", fit_part), ("held out", held)):
        given = [r for r in part if r.inputs.completion_given]
        print(line(f"{label}, mean length published", given, rate))
        print(line(f"{label}, mean length assumed", [r for r in part if not r.inputs.completion_given], rate))
    ours = stats([error(r.ours, r.measured) for r in held])
    base = stats([error(r.baseline(rate), r.measured) for r in held])
    met = ours[0] <= 25 and ours[1] <= 60 and ours[0] < base[0] and ours[1] < base[1]
    print(f"held-out target (median ≤ 25 %, p90 ≤ 60 %, better than the baseline): {'met' if met else 'NOT met'}")
    by_framework = defaultdict(list)
    for r in results:
        by_framework[r.row["framework"]].append(r)
    print()
    for name in sorted(by_framework):
        part = by_framework[name]
        print(line(f"{name} ({sum(r.split == 'held_out' for r in part)} held out)", part, rate))
    low, high = measured_range(fit_part)
    within = {label: sum(RANGE[0] <= r.measured / r.ours <= RANGE[1] for r in part) / len(part)
              for label, part in (("fit", fit_part), ("held out", held))}
    print(f"\nrange: measured ÷ predicted on the fit rows, 10th-90th percentile {low:.2f}-{high:.2f} (timing.report.RANGE"
          f" = {RANGE[0]:.2f}-{RANGE[1]:.2f}); rows within it: fit {within['fit']:.0%}, held out "
          f"{within['held out']:.0%}")
    print(f"mean completion when none is given: {efficiency.COMPLETION_FILL:.0%} of the cap (fit rows' median "
          f"{completion_fill(rows):.0%})")
    print("\nper row (measured → ours | baseline, seconds per optimizer step, signed error of ours):")
    for r in sorted(results, key=lambda r: (r.split, r.ours / r.measured)):
        print(f"  {r.split[:4]:<4} {r.row['framework']:<14} {r.row['id']:<46} {r.measured:8.1f} → {r.ours:8.1f} | "
              f"{r.baseline(rate):8.1f}  {(r.ours / r.measured - 1) * 100:+6.0f} %")


if __name__ == "__main__":
    main(sys.argv[1:])
