"""How long one memory estimate and one step-time prediction take (the form recomputes both on every change); target
< 5 ms each.

Baseline in the same run: a weights-only estimate (params × 2 bytes) for the same spec.
"""

import time

from bench.calibration import weights_only_gib
from grpo_ui.checks.fit import suggest
from grpo_ui.memory.estimate import estimate_spec
from grpo_ui.spec.resolve import resolve
from grpo_ui.spec.yaml_io import load_spec
from grpo_ui.timing.predict import predict_spec


def per_call(fn, n):
    start = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - start) / n * 1e3


def main():
    spec = load_spec("tests/fixtures/seeds/004_qwen2_7b_24gb.yaml")
    ours = per_call(lambda: estimate_spec(spec), 2000)
    base = per_call(lambda: weights_only_gib(7.6e9), 2000)
    advice = per_call(lambda: suggest(spec), 20)
    eff = resolve(spec)
    timing = per_call(lambda: predict_spec(eff), 2000)
    print(f"estimate_spec: {ours:.3f} ms per call (target < 5 ms)")
    print(f"weights-only baseline: {base * 1e3:.2f} µs per call; ratio {ours / base:.0f}×")
    print(f"make-it-fit search (single + paired knobs): {advice:.1f} ms")
    print(f"predict_spec (step time by phase, from the resolved job): {timing:.3f} ms per call (target < 5 ms); "
          f"ratio to the weights-only baseline {timing / base:.0f}×")


if __name__ == "__main__":
    main()
