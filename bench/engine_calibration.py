"""Published training-step times per engine (tests/data/engine_measurements.jsonl) against the step-time model's
training step: ms-swift's swift sft on transformers with DeepSpeed ZeRO (the trainer of a swift rlhf job) and megatron
sft on Megatron-Core (a megatron rlhf job's).

Each row is one optimizer step of packed ``seq_len``-token sequences with a cross-entropy loss and no rollout (its
schema: tests/data/engine_measurements.README.md). A DeepSpeed row is built as bench/calibration builds an SFT memory
row (its ZeRO stage, micro-batch, gradient accumulation, ZeRO-3's prefetch bucket at transformers' 'auto') and timed
by timing.training.train_s over its gradient-accumulation micro-steps; a Megatron row as
bench/megatron_calibration builds one and timed by its step_time. The split is the rows' own (``split``), fixed by
source with the memory rows' rule before any constant was set from them.

The training engines' efficiencies (grpo_ui/timing/efficiency.py) are set here from fit rows only (``derive``): for
each row, the value at which the model reproduces its s/it (``implied``); the constant is their median over the rows
it applies to, rounded to 0.01 (a rate to two significant figures):

- TRANSFORMERS_MFU: this file's DeepSpeed rows of dense models;
- MEGATRON_MFU: tests/data/megatron_measurements.jsonl's s/it rows of dense models whose lengths are given, and this
  file's Megatron rows of dense models, without optimizer_cpu_offload (there the CPU's Adam takes most of the step);
- MEGATRON_EXPERT_EFFICIENCY: the same files' MoE rows (lengths given, no optimizer_cpu_offload), with MEGATRON_MFU
  at its derived value;
- MEGATRON_CPU_ADAM_PARAMS_S: the same files' rows with optimizer_cpu_offload (lengths given), with both at theirs.
``python bench/engine_calibration.py`` prints each row's implied value, the derived constants and the rows' errors.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from bench import calibration, megatron_calibration
from grpo_ui.memory.inputs import resolve_arch
from grpo_ui.timing import efficiency, training
from grpo_ui.timing.inputs import time_inputs

DATA = Path(__file__).parent.parent / "tests" / "data" / "engine_measurements.jsonl"


def rows(path: Path = DATA) -> list[dict]:
    return calibration.load(path)


def deepspeed_step_time(row: dict) -> float:
    """Seconds per optimizer step the model gives a swift sft row: gradient_accumulation_steps micro-steps of one
    packed seq_len-token sequence per GPU, each forward and backward through the row's ZeRO stage, then the
    optimizer (timing.training.train_s)."""
    i = calibration.inputs_of(row)
    t = time_inputs(calibration.spec_of(row))
    t = replace(t, mem=i, prompt_tokens=0.0, completion_tokens=float(row["config"]["seq_len"]), completion_given=True,
                steps_per_generation=i.grad_accum, iterations=1, steps_per_round=1.0,
                padding_free=bool(row["config"].get("fixed_length")))
    return training.train_s(t)


def step_time(row: dict) -> float:
    """The model's seconds per optimizer step for a row of either engine (megatron_measurements.jsonl's rows, which
    carry no ``engine``, are Megatron's)."""
    if row.get("engine") == "deepspeed":
        return deepspeed_step_time(row)
    return megatron_calibration.step_time(row)


def implied(row: dict, name: str, low: float = 0.02, high: float = 1.5) -> float | None:
    """The value of efficiency.<name> at which the model's step time equals the row's s/it (bisection: the step time
    falls as the efficiency rises), or None when no value between ``low`` and ``high`` gives it (another term alone
    is longer than the figure, or the figure is longer than any efficiency in range explains)."""
    saved, measured = getattr(efficiency, name), row["measured_s_per_it"]

    def at(value: float) -> float:
        setattr(efficiency, name, value)
        return step_time(row)
    try:
        if not at(high) <= measured <= at(low):
            return None
        for _ in range(40):
            middle = (low + high) / 2
            low, high = (middle, high) if at(middle) > measured else (low, middle)
        return (low + high) / 2
    finally:
        setattr(efficiency, name, saved)


def is_moe(row: dict) -> bool:
    return bool(resolve_arch(row["config"]["model"]).num_experts)


def megatron_fit_rows() -> list[dict]:
    """Megatron fit rows with an s/it figure and given lengths: megatron_measurements.jsonl's and this file's."""
    timed = [r for r in megatron_calibration.rows() if "measured_s_per_it" in r and not
             megatron_calibration.lengths_assumed(r)]
    return [r for r in timed + [r for r in rows() if r["engine"] == "megatron"] if r["split"] == "fit"]


def cpu_offload(row: dict) -> bool:
    return bool(row["config"].get("optimizer_cpu_offload"))


# constant → (the fit rows it is set from, the range its value is searched in)
SOURCES: dict[str, tuple[Callable[[], list[dict]], tuple[float, float]]] = {
    "TRANSFORMERS_MFU": (lambda: [r for r in rows() if r["split"] == "fit" and r["engine"] == "deepspeed"
                                  and not is_moe(r)], (0.02, 1.5)),
    "MEGATRON_MFU": (lambda: [r for r in megatron_fit_rows() if not is_moe(r) and not cpu_offload(r)], (0.02, 1.5)),
    "MEGATRON_EXPERT_EFFICIENCY": (lambda: [r for r in megatron_fit_rows() if is_moe(r) and not cpu_offload(r)],
                                   (0.02, 1.5)),
    "MEGATRON_CPU_ADAM_PARAMS_S": (lambda: [r for r in megatron_fit_rows() if cpu_offload(r)], (1e8, 1e11)),
}


def derive() -> tuple[dict[str, float], dict[str, dict[str, float | None]]]:
    """(constant → its value, constant → each source row's implied value), in SOURCES' order, each later one with
    the earlier ones at their derived values; the constants in grpo_ui.timing.efficiency are left as they were."""
    saved = {name: getattr(efficiency, name) for name in SOURCES}
    values: dict[str, float] = {}
    per_row: dict[str, dict[str, float | None]] = {}
    try:
        for name, (source, (low, high)) in SOURCES.items():
            per_row[name] = {r["id"]: implied(r, name, low, high) for r in source()}
            median = statistics.median(v for v in per_row[name].values() if v is not None)
            values[name] = float(f"{median:.2g}") if median > 10 else round(median, 2)
            setattr(efficiency, name, values[name])
    finally:
        for name, value in saved.items():
            setattr(efficiency, name, value)
    return values, per_row


def signed(row: dict, ours: float) -> float:
    return (ours / row["measured_s_per_it"] - 1) * 100


def time_report(label_width: int = 46) -> list[str]:
    """bench/time_accuracy.py's lines: median and p90 absolute % error per split and engine, and each row."""
    timed = [(r, step_time(r)) for r in rows()]

    def line(label: str, part: list) -> str:
        return megatron_calibration.error_line(label, [signed(r, ours) for r, ours in part], label_width)

    out = ["\nTraining steps per engine (tests/data/engine_measurements.jsonl: ms-swift's swift sft with DeepSpeed and "
           "megatron sft, s/it, the training step alone, no rollout):"]
    for split, name in (("fit", "fit"), ("held_out", "held out")):
        part = [x for x in timed if x[0]["split"] == split]
        out.append(line(f"engine s/it, {name}", part))
        for engine in ("deepspeed", "megatron"):
            out.append(line(f"  {engine}", [x for x in part if x[0]["engine"] == engine]))
    for r, ours in sorted(timed, key=lambda x: signed(*x)):
        out.append(f"  {r['split'][:4]:<4} {r['id']:<46} {r['measured_s_per_it']:7.2f} → {ours:7.2f} s/it  "
                   f"{signed(r, ours):+6.0f} %")
    return out


def main() -> None:
    values, per_row = derive()
    print("training efficiencies from the fit rows (the value each row implies → the median):")
    for name, implied_values in per_row.items():
        print(f"  {name} = {values[name]:.3g} (grpo_ui/timing/efficiency.py: {getattr(efficiency, name):.3g})")
        for row_id, value in implied_values.items():
            print(f"    {row_id:<46} {'none reproduces it' if value is None else f'{value:.3g}'}")
    print("\n".join(time_report()))


if __name__ == "__main__":
    main()
