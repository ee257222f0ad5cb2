"""Accuracy of the memory estimate against published measurements (tests/data/memory_measurements.jsonl).

For each kind and overall: rows, median and p90 absolute % error of our estimate and, in the same run, of two
baselines: weights only (params × bytes, ÷ TP for vLLM rows) and DeepSpeed's model-states estimator (GPU bytes,
training rows only). Rows marked held_out were kept out of any tuning of grpo_ui/memory.py and are reported on their
own. Target: ours median ≤ 10 %, p90 ≤ 25 %.
"""

from collections import defaultdict

from grpo_ui.calibration import evaluate, load, summary

DATA = "tests/data/memory_measurements.jsonl"


def line(label, results):
    cells = []
    for pick in (lambda r: r.ours, lambda r: r.weights_only, lambda r: r.deepspeed):
        stats = summary([r.error(pick(r)) for r in results if pick(r) is not None])
        cells.append(f"{stats[0]:6.1f} {stats[1]:6.1f}" if stats else f"{'n/a':>13}")
    return f"{label:<22} {len(results):>3}   " + "   ".join(cells)


def main():
    rows = load(DATA)
    results = [evaluate(r) for r in rows]
    print(f"{len(rows)} measurements from {len({r['source'].split(' — ')[0] for r in rows})} sources\n")
    print(f"{'abs % error':<22} {'n':>3}   {'ours':^13}   {'weights only':^13}   {'DeepSpeed':^13}")
    print(f"{'':<22} {'':>3}   " + "   ".join([f"{'median':>6} {'p90':>6}"] * 3))
    by_kind = defaultdict(list)
    for r in results:
        by_kind[r.row["kind"]].append(r)
    for kind in sorted(by_kind):
        print(line(kind, by_kind[kind]))
    tuned = [r for r in results if not r.row["held_out"]]
    held = [r for r in results if r.row["held_out"]]
    print(line("overall", results))
    print(line("tuning rows", tuned))
    print(line("held out", held))
    print("\nper row (measured → ours):")
    for r in sorted(results, key=lambda r: -r.error(r.ours)):
        mark = " (held out)" if r.row["held_out"] else ""
        print(f"  {r.row['id']:<42} {r.row['measured_gib']:7.1f} → {r.ours:7.1f} GiB  {r.error(r.ours):5.1f} %{mark}")


if __name__ == "__main__":
    main()
