"""Accuracy of the memory estimate against published measurements (tests/data/memory_measurements.jsonl).

For the fit rows and the frozen held-out rows (the split rule is in bench/calibration.py: rows added after issue 3
are held out by a hash of their source, decided before any tuning), overall and for the GRPO rows: median and p90
absolute % error, the share of rows underestimated by more than 10 % and the median signed error (negative: the
estimate runs low), of our estimate and, in the same run, of two baselines: weights only (params × bytes, ÷ TP for
vLLM rows) and DeepSpeed's model-states estimator (GPU bytes, training rows only).
Targets on the held-out rows: median ≤ 10 %, p90 ≤ 25 %, at most a third underestimated by more than 10 %.
It also prints the error margin the verdict adds (memory.ESTIMATE_MARGIN, from the fit rows) and the share of fit,
held-out and fresh rows it covers. The Megatron rows (bench/megatron_calibration.py) are reported on their own lines
after the DeepSpeed path's.
The rows whose "added" starts with "fresh" were collected after the estimator was frozen and never looked at while
tuning it: their line is the out-of-sample check (they also take their place in the split like any later row).
"""

import argparse
import sys
from collections import defaultdict

from bench import megatron_calibration
from bench.calibration import (
    FIRST_ISSUE,
    MARGIN_COVERAGE,
    covered,
    evaluate,
    held_out,
    load,
    margin,
    source_key,
    summary,
)
from grpo_ui.memory.report import ESTIMATE_MARGIN

DATA = "tests/data/memory_measurements.jsonl"
FRESH = "fresh"  # "added" prefix of the rows collected after tuning stopped
# Why each published GRPO run (workload grpo or vllm) the estimate runs more than 10 % low is low, as far as the row
# tells; printed under the table.
UNDER_REASONS = {
    "swift-grpo-transformers-lora-qwen25-7b": "a 3.1 development snapshot's header (like the 3.0 headers the estimator's "
                                              "docstring lists): generate()'s KV cache and its allocator reserve are "
                                              "modelled, the rest of the 80 GiB is not explained by any term",
    "swift-grpo-qwen25vl-3b-full-spare": "vision tokens: no MAX_PIXELS is set, so each image's tokens follow the "
                                         "dataset's image sizes, which the row does not give (the estimate takes "
                                         "the catalogue's default)",
    "swift-grpo-qwen25-omni-7b": "an omni model: its audio tower and talker count as weights only (no activations), a "
                                 "known gap of the estimator",
    "swift-issue3848-qwen25-3b-grpo-lora-fwdbwd": "an approximate '12GB' from an issue comment, method not stated "
                                                  "(read as nvidia-smi's whole-GPU figure)",
    "swift-grpo-colocate-lora-qwen25vl-72b-zero3": "vision tokens of multimodal-open-r1's images not given, and "
                                                   "move_model_batches 40 gathers two layers at a time for the sync "
                                                   "beside ZeRO-3's modelled buffers",
}
HEAD = (f"{'':<24} {'n':>3}   {'ours: median  p90  under>10%  signed':<38}   {'weights only':<16}   "
        f"{'DeepSpeed':<16}")


def cell(stats, wide: bool) -> str:
    if stats is None:
        return f"{'n/a':>{38 if wide else 16}}"
    if wide:
        return f"{stats.median:11.1f} {stats.p90:5.1f} {stats.under_10:9.0%} {stats.median_signed:+7.1f}  "
    return f"{stats.median:6.1f} {stats.p90:6.1f}   "


def line(label: str, results) -> str:
    ours = summary(results)
    return (f"{label:<24} {len(results):>3}   {cell(ours, True)}   {cell(summary(results, lambda r: r.weights_only), False)}"
            f"   {cell(summary(results, lambda r: r.deepspeed), False)}")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="bench/memory_accuracy.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", nargs="+", default=[], metavar="FILE",
                        help="your own rows (`python -m grpo_ui calibration export --only memory`, bench/gpu/kit.py "
                             "run's memory_rows.jsonl), reported as their own line, never part of the split")
    files = parser.parse_args(argv).rows
    rows = load(DATA)
    results = [evaluate(r) for r in rows]
    fit = [r for r in results if not held_out(r.row)]
    held = [r for r in results if held_out(r.row)]
    print(f"{len(rows)} measurements from {len({source_key(r) for r in rows})} sources; "
          f"{len(held)} held out ({len(held) / len(rows):.0%}), "
          f"{sum(r.row['workload'] == 'grpo' for r in held)} of "
          f"{sum(r['workload'] == 'grpo' for r in rows)} GRPO rows held out\n")
    print(HEAD)
    print(f"{'':<24} {'':>3}   {'abs % error, share, median signed %':<38}   {'median    p90':<16}   "
          f"{'median    p90':<16}")
    for label, part in (("fit", fit), ("held out", held)):
        print(line(label, part))
        print(line(f"{label}, GRPO", [r for r in part if r.row["workload"] == "grpo"]))
    print(line("all", results))
    fresh = [r for r in results if r.row["added"].startswith(FRESH)]
    print(line("fresh (never tuned on)", fresh))
    print(line("fresh, GRPO", [r for r in fresh if r.row["workload"] == "grpo"]))
    m = margin(fit)
    print(f"\nerror margin: {MARGIN_COVERAGE:.0%} of the fit rows measured at most the estimate + {m:.0%} of what it "
          f"models (memory.ESTIMATE_MARGIN = {ESTIMATE_MARGIN:.0%}); rows within it: "
          + ", ".join(f"{label} {covered(part, ESTIMATE_MARGIN):.0%}" for label, part in
                      (("fit", fit), ("held out", held), ("fresh", fresh)))
          + " (a job is 'fits' only with the margin, 'tight' within the card without it)")
    tuned = [r for r in fit if r.row["added"] == FIRST_ISSUE]
    later = [r for r in fit if r.row["added"] != FIRST_ISSUE and not r.row["added"].startswith(FRESH)]
    print("  in sample and out: " + ", ".join(
        f"{label} {sum(r.margin_needed <= ESTIMATE_MARGIN for r in part)}/{len(part)}" for label, part in (
            (f"fit rows the terms were tuned on ({FIRST_ISSUE}'s)", tuned), ("later fit rows", later),
            ("held out (never tuned on)", held), ("fresh (never tuned on; in both splits)", fresh))))
    by_kind = defaultdict(list)
    for r in results:
        by_kind[r.row["kind"]].append(r)
    print()
    for kind in sorted(by_kind):
        print(line(kind, by_kind[kind]))
    grpo = [r for r in results if r.row["workload"] in ("grpo", "vllm")]
    low = sorted((r for r in grpo if r.signed(r.ours) < -10), key=lambda r: r.signed(r.ours))
    print(f"\npublished GRPO runs (workload grpo or vllm) underestimated by more than 10 %: {len(low)} of {len(grpo)}")
    for r in low:
        print(f"  {r.row['id']:<44} {r.signed(r.ours):+6.1f} %  {UNDER_REASONS.get(r.row['id'], 'UNEXPLAINED')}")
    yours = [evaluate(row) for path in files for row in load(path)]
    if files:
        print()
        print(line("your rows", yours))
        for r in yours:
            print(f"  {r.row['id']:<44} {r.row['compare']:<9} {r.row['measured_gib']:7.2f} → {r.ours:7.2f} GiB  "
                  f"{r.signed(r.ours):+6.1f} %")
    print("\nper row (measured → ours, signed error):")
    for r in sorted(results, key=lambda r: r.signed(r.ours)):
        mark = (" (held out)" if held_out(r.row) else "") + (" (fresh)" if r.row["added"].startswith(FRESH) else "")
        print(f"  {r.row['id']:<44} {r.row['measured_gib']:7.1f} → {r.ours:7.1f} GiB  {r.signed(r.ours):+6.1f} %{mark}")
    print("\n".join(megatron_calibration.memory_report(line)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
