"""Batch arithmetic: the generation batch, steps per generation and num_generations as ms-swift checks them, with the
nearest values that pass."""

from __future__ import annotations

from grpo_ui.checks.rules.base import _near, rule
from grpo_ui.core.findings import finding


def _accumulation_knob(spec, eff) -> str | None:
    """The field that multiplies the checked batch in this version (none before 3.4, nor when
    generation_batch_size fixes the batch)."""
    v = eff.version
    if v < (3, 4, 0) or (v >= (3, 5, 0) and spec.train.generation_batch_size is not None
                         and spec.train.steps_per_generation is None):
        return None
    if v < (3, 5, 0) or not spec.train.steps_per_generation:
        return "train.gradient_accumulation_steps"
    return "train.steps_per_generation"


def _valid_batch_knobs(spec, eff) -> dict[str, list[int]]:
    """Nearest values of each knob that make the checked batch divisible by num_generations."""
    t, world = spec.train, eff.world_size
    pd, ng, nproc = t.per_device_train_batch_size, t.num_generations, max(eff.nproc_per_node, 1)
    acc_key = _accumulation_knob(spec, eff)
    factor = eff.generation_batch // (pd * world)
    out = {
        "train.per_device_train_batch_size": _near([p for p in range(1, 4 * ng + 1) if p * world * factor % ng == 0],
                                                   pd),
        "train.num_generations": _near([g for g in range(2, pd * world * factor + 1) if pd * world * factor % g == 0],
                                       ng),
        "GPUs in total": _near([w for w in range(nproc, 64 * nproc + 1, nproc) if pd * w * factor % ng == 0], world),
    }
    if acc_key:
        out[acc_key] = _near([s for s in range(1, 4 * ng + 1) if pd * world * s % ng == 0], factor)
    return out


@rule
def batch_arithmetic(spec, eff):
    t, world = spec.train, eff.world_size
    if not world:
        return
    g = t.per_device_train_batch_size * world
    v = eff.version
    if t.steps_per_generation is not None and t.steps_per_generation <= 0:
        yield finding("GRPO-STEPS-PER-GEN", "error", "train.steps_per_generation",
                      f"steps_per_generation must be > 0, got {t.steps_per_generation}.", "Set it to 1 or more.",
                      {"train.steps_per_generation": 1})
        return
    if t.generation_batch_size is not None and v >= (3, 5, 0):
        if t.steps_per_generation is not None:
            if (4, 0, 0) <= v < (4, 4, 0):
                yield finding("VERSION-GEN-AND-STEPS", "error",
                              ("train.generation_batch_size", "train.steps_per_generation"),
                              f"ms-swift {spec.swift_version} (TRL's GRPOConfig) rejects generation_batch_size and "
                              "steps_per_generation together.", "Set only one of them.",
                              {"train.generation_batch_size": None})
            expected = g * t.steps_per_generation
            if t.generation_batch_size != expected:
                yield finding("GRPO-GEN-BATCH-MISMATCH", "error",
                              ("train.generation_batch_size", "train.steps_per_generation"),
                              f"generation_batch_size ({t.generation_batch_size}) must equal per_device_train_batch_"
                              f"size × world_size × steps_per_generation = {t.per_device_train_batch_size} × {world} "
                              f"× {t.steps_per_generation} = {expected}.",
                              f"Set generation_batch_size to {expected} or clear it.",
                              {"train.generation_batch_size": expected})
                return
        elif t.generation_batch_size % g:
            near = _near([m * g for m in range(1, t.generation_batch_size // g + 3)], t.generation_batch_size)
            yield finding("GRPO-GEN-BATCH-DIV", "error", "train.generation_batch_size",
                          f"generation_batch_size ({t.generation_batch_size}) must be divisible by the global batch "
                          f"size {t.per_device_train_batch_size} × {world} = {g}.",
                          f"Use a multiple of {g}: {near}.", {"train.generation_batch_size": near[0]})
            return
    if t.num_generations < 2:
        yield finding("GRPO-NUM-GEN-MIN", "error", "train.num_generations",
                      f"num_generations is {t.num_generations}: GRPO needs at least 2 completions per prompt to "
                      "compute advantages (with one, every advantage is 0 and the policy never updates).",
                      "Set num_generations to 2 or more (8 is typical).", {"train.num_generations": 8})
        return
    gen = eff.generation_batch
    if gen % t.num_generations:
        knobs = _valid_batch_knobs(spec, eff)
        what = ("the global train batch per_device × world" if v < (3, 4, 0) else
                "the effective train batch per_device × world × gradient_accumulation_steps" if v < (3, 5, 0) else
                "generation_batch_size = per_device × world × steps_per_generation")
        options = "; ".join(f"{k}: {vals}" for k, vals in knobs.items() if vals)
        first = next(((k, vals[0]) for k, vals in knobs.items() if vals and k.startswith("train.")), None)
        yield finding("GRPO-BATCH-DIV", "error",
                      ("train.num_generations", "train.per_device_train_batch_size",
                       "train.gradient_accumulation_steps"),
                      f"{what} = {gen} is not divisible by num_generations ({t.num_generations}).",
                      f"Nearest valid values — {options}.", dict([first]) if first else {})


@rule
def eval_batch(spec, eff):
    t, world = spec.train, eff.world_size
    # ms-swift: eval_strategy defaults to save_strategy, and evaluation is off without an eval set.
    eval_on = (t.eval_strategy or t.save_strategy) != "no" and (t.split_dataset_ratio > 0 or bool(t.val_dataset))
    ng = t.num_generations_eval or t.num_generations
    if not eval_on or not world or ng < 2:
        return
    total = t.per_device_eval_batch_size * world
    if total % ng:
        valid = _near([b for b in range(1, 4 * ng + 1) if b * world % ng == 0], t.per_device_eval_batch_size)
        yield finding("GRPO-EVAL-BATCH-DIV", "error", ("train.per_device_eval_batch_size", "train.num_generations"),
                      f"The global eval batch size ({world} x {t.per_device_eval_batch_size}) must be evenly "
                      f"divisible by num_generations_eval ({ng}).",
                      f"Set per_device_eval_batch_size to one of {valid}, or turn evaluation off.",
                      {"train.per_device_eval_batch_size": valid[0]} if valid else {})
