"""Published training-step times per engine (tests/data/engine_measurements.jsonl) against the step-time model's
training step: ms-swift's swift sft on transformers with DeepSpeed ZeRO (the trainer of a swift rlhf job) and megatron
sft on Megatron-Core (a megatron rlhf job's).

Each row is one optimizer step of packed ``seq_len``-token sequences with a cross-entropy loss and no rollout (its
schema: tests/data/engine_measurements.README.md). A DeepSpeed row is built as bench/calibration builds an SFT memory
row (its ZeRO stage, micro-batch, gradient accumulation, ZeRO-3's prefetch bucket at transformers' 'auto') and timed
by timing.training.train_s over its gradient-accumulation micro-steps; a Megatron row as
bench/megatron_calibration builds one and timed by its step_time. The split is the rows' own (``split``), fixed by
source with the memory rows' rule before any constant was set from them.
"""

from __future__ import annotations

import statistics
from dataclasses import replace
from pathlib import Path

from bench import calibration, megatron_calibration
from grpo_ui.timing import training
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
    """The model's seconds per optimizer step for a row of either engine."""
    if row["engine"] == "megatron":
        return megatron_calibration.step_time(row)
    return deepspeed_step_time(row)


def signed(row: dict, ours: float) -> float:
    return (ours / row["measured_s_per_it"] - 1) * 100


def time_report(label_width: int = 46) -> list[str]:
    """bench/time_accuracy.py's lines: median and p90 absolute % error per split and engine, and each row."""
    timed = [(r, step_time(r)) for r in rows()]

    def line(label: str, part: list) -> str:
        if not part:
            return f"{label:<{label_width}} {0:>3}"
        errors = sorted(abs(signed(r, ours)) for r, ours in part)
        p90 = errors[0] if len(errors) == 1 else statistics.quantiles(errors, n=10, method="inclusive")[8]
        return f"{label:<{label_width}} {len(part):>3}   {statistics.median(errors):7.0f} {p90:6.0f}"

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


if __name__ == "__main__":
    print("\n".join(time_report()))
