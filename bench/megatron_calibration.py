"""Megatron rows (tests/data/megatron_measurements.jsonl) against the memory estimate and the training-step time.

Each row is a figure ms-swift published for a Megatron run — an example script's ``# N * XX GiB`` / ``s/it`` header,
the Quick-start page's benchmark, a user's logged GRPO line — with the configuration that produced it (its schema:
tests/data/megatron_measurements.README.md). Most are megatron sft / dpo / kto runs, not GRPO: they exercise the same
Megatron-Core terms (sharding, the distributed optimizer, activations, recomputation, pipeline, offload) with a
cross-entropy loss over every token and no vLLM (and, for DPO/KTO with full tuning, a reference model), which is
what ``inputs_of`` makes of them. The split is the rows' own (``split``), fixed once by their source with the memory
rows' rule (bench/calibration.held_out: sha256("2:" + source key) even → held out) and frozen; nothing in
grpo_ui/memory or grpo_ui/timing is tuned on the held-out rows.
"""

from __future__ import annotations

import re
import statistics
from dataclasses import replace
from pathlib import Path

from bench.calibration import Result, load, modelled_gib, predicted_gib, weights_only_gib
from grpo_ui.memory.estimate import estimate
from grpo_ui.memory.inputs import ExtraModel, Inputs, inputs_from_spec
from grpo_ui.memory.report import ESTIMATE_MARGIN
from grpo_ui.spec.model import JobSpec
from grpo_ui.spec.paths import with_changes
from grpo_ui.spec.swift_args import RolloutArgs, TrainArgs
from grpo_ui.timing import lengths, megatron
from grpo_ui.timing.inputs import time_inputs

DATA = Path(__file__).parent.parent / "tests" / "data" / "megatron_measurements.jsonl"
TRAINING_ONLY = ("sft", "dpo", "kto")  # workloads without rollout: the training step is the whole step
# Row keys that are not JobSpec fields: the layout, the tokens of a micro-batch's sequence, the GPU's memory
LAYOUT_KEYS = {"nodes", "gpus_per_node", "seq_len", "seq_len_assumed", "fixed_length", "env", "gpu_memory_gib",
               "swift_version"}


def rows(path: Path = DATA) -> list[dict]:
    return load(path)


def spec_of(row: dict) -> JobSpec:
    """The megatron rlhf job a row's configuration describes (one node entry per node, all on the row's GPU; the
    GPU's memory when the catalogue does not know it). A row without rollout settings generates nothing
    (use_vllm false)."""
    cfg = row["config"]
    changes: dict = {"train.dataset": ["calibration"], "train.reward_funcs": ["accuracy"], "env": cfg.get("env", {}),
                     "rollout.use_vllm": row["workload"] == "grpo"}
    for key, value in cfg.items():
        if key in LAYOUT_KEYS:
            continue
        section = "train" if key in TrainArgs.model_fields else "rollout" if key in RolloutArgs.model_fields else None
        if section is None:
            raise ValueError(f"{row['id']}: config key {key} is no JobSpec field")
        changes[f"{section}.{key}"] = value
    gpus = list(range(cfg.get("gpus_per_node", 1)))
    changes["cluster.nodes"] = [{"host": f"node{n}", "gpus": gpus, "gpu_model": row["gpu"],
                                 **({"gpu_memory_gib": cfg["gpu_memory_gib"]} if "gpu_memory_gib" in cfg else {})}
                                for n in range(cfg.get("nodes", 1))]
    return with_changes(JobSpec(engine="megatron"), changes)


def inputs_of(row: dict) -> Inputs:
    """A row's Inputs: a training-only row (SFT, DPO, KTO) scores every token of its seq_len-token sequences with
    Megatron-Core's cross entropy, generates nothing and holds a reference model only for DPO/KTO with full tuning;
    packing gives every step the same shapes (fixed_length)."""
    cfg = row["config"]
    i = inputs_from_spec(spec_of(row))
    i = replace(i, fixed_shapes=bool(cfg.get("fixed_length")))
    if row["workload"] in TRAINING_ONLY:
        reference = (ExtraModel("reference", i.arch),) if i.full and row["workload"] != "sft" else ()
        i = replace(i, loss="ce", prompt_len=0, completion_len=cfg["seq_len"], vllm="none", generation_batch=0,
                    extra_models=reference)
    return i


def as_compared(row: dict) -> dict:
    """The row as bench/calibration's comparison reads it: a training-only row has no rollout phase (its 'sft')."""
    return {**row, "workload": "sft"} if row["workload"] in TRAINING_ONLY else row


def evaluate(row: dict) -> Result:
    i = inputs_of(row)
    report = estimate(i)
    seen = as_compared(row)
    return Result(row, predicted_gib(seen, report), modelled_gib(seen, report),
                  weights_only_gib(i.arch.total_params(), i.param_bytes), None)


def held_out(row: dict) -> bool:
    return row["split"] == "held_out"


def lengths_assumed(row: dict) -> bool:
    """The row's tokens per sequence are an assumption (variable-length samples the source does not describe)."""
    return bool(row["config"].get("seq_len_assumed"))


def rank_overhead(results: list[Result]) -> float:
    """memory.megatron.RANK_OVERHEAD_GIB as the fit rows give it: the median of measured − estimate without it over
    the fit rows whose lengths are given and whose figure is below the card's size (``results`` estimated with the
    constant as it stands)."""
    from grpo_ui.memory.megatron import RANK_OVERHEAD_GIB
    gaps = [r.row["measured_gib"] - (r.ours - RANK_OVERHEAD_GIB) for r in results
            if not held_out(r.row) and not lengths_assumed(r.row) and not r.row.get("at_capacity")]
    return statistics.median(gaps)


def memory_report(line) -> list[str]:
    """The Megatron rows' lines for bench/memory_accuracy.py (``line(label, results)`` formats one)."""
    results = [evaluate(r) for r in rows()]
    fit = [r for r in results if not held_out(r.row)]
    held = [r for r in results if held_out(r.row)]
    out = [f"\nMegatron rows (tests/data/megatron_measurements.jsonl: ms-swift's Megatron example headers, its "
           f"Quick-start benchmark, a logged GRPO line; {len(results)} rows, {len(held)} held out; mostly SFT/DPO/KTO, "
           "modelled as training without rollout):"]
    for label, part in (("fit", fit), ("held out", held)):
        out.append(line(f"Megatron {label}", part))
        out.append(line("  lengths given", [r for r in part if not lengths_assumed(r.row)]))
        out.append(line("  lengths assumed", [r for r in part if lengths_assumed(r.row)]))
    out.append(line("Megatron GRPO", [r for r in results if r.row["workload"] == "grpo"]))
    out.append(f"rank overhead the fit rows give: {rank_overhead(results):.1f} GiB (memory.megatron.RANK_OVERHEAD_GIB)")
    out.append(f"rows within the estimate's error margin (memory.ESTIMATE_MARGIN {ESTIMATE_MARGIN:.0%}, set on the "
               "DeepSpeed path's fit rows): " + ", ".join(
                   f"{label} {sum(r.margin_needed <= ESTIMATE_MARGIN for r in part)}/{len(part)}"
                   for label, part in (("fit", fit), ("held out", held))))
    out.append("per row (measured → ours, signed error; A: lengths assumed, C: the figure is the card's size):")
    for r in sorted(results, key=lambda r: r.signed(r.ours)):
        marks = ("A" if lengths_assumed(r.row) else " ") + ("C" if r.row.get("at_capacity") else " ")
        out.append(f"  {r.row['split'][:4]:<4} {marks} {r.row['id']:<44} {r.row['measured_gib']:7.1f} → {r.ours:7.1f} "
                   f"GiB  {r.signed(r.ours):+6.1f} %")
    return out


# Step times (tests/data/time_measurements.jsonl's Megatron-Core rows, and this file's s/it figures)

# A row whose layout is only in its notes: verl's one-step-off README runs Megatron with TP 2 and PP 2 (the row's
# notes quote the recipe's dapo_7b_math_megatron_colocate.sh).
LAYOUT_IN_NOTES = {"verl-osop-7b-dapo-colocate-megatron-16xh20": "TP2 PP2"}


def time_row_layout(row: dict) -> dict | None:
    """The Megatron-Core layout a time row was measured with — TP, PP, CP, EP, sequence parallelism — from NeMo RL's
    table column (``training_parallelism_tp_cp_ep_pp``, e.g. 'TP2 CP2 EP16 PP4, sequence parallel', or the blog's
    ``training_parallelism``, e.g. 'TP4 PP2', 'context parallel 4'), the row's own fields (``tp``/``train_tp`` …) or
    LAYOUT_IN_NOTES; a size none of them gives is 1; None for a row that is not a Megatron run."""
    extra = row["config"].get("extra", {})
    if extra.get("training_backend") not in ("megatron", "megatron-core"):
        return None
    text = (extra.get("training_parallelism_tp_cp_ep_pp") or extra.get("training_parallelism")
            or LAYOUT_IN_NOTES.get(row["id"], "")).replace("context parallel ", "CP")
    sizes = {k: int(m[1]) if (m := re.search(rf"\b{k.upper()}(\d+)", text)) else None for k in ("tp", "pp", "cp", "ep")}
    for k in sizes:
        sizes[k] = sizes[k] or extra.get(k) or extra.get(f"train_{k}") or 1
    sizes["sp"] = "sequence parallel" in text or bool(extra.get("megatron_sequence_parallel"))
    return sizes


def as_megatron(row: dict, swift: JobSpec) -> JobSpec:
    """The megatron rlhf job of a Megatron-Core time row, from the swift rlhf job bench/time_calibration.spec_of
    builds for it (its GPUs, rollout, lengths and estimate settings kept):

    - TP/PP/CP/EP and sequence parallelism as the row ran them; EP lowered to what the trainer GPUs hold when the
      row's table gives more (NeMo RL's 1-step-off rows list EP 16 for 8 training GPUs);
    - a micro-batch of as many completions as NeMo RL's packed micro-batch holds (its recipes pack
      max_total_sequence_length × train_micro_batch_size 1 tokens: that ÷ the published mean length), or the row's
      own; the global batch the round's completions ÷ its optimizer steps; the micro-batch lowered until the global
      batch divides into whole micro-batches over DP;
    - gradient checkpointing as full recomputation, otherwise ms-swift's selective; packed sequences (padding_free);
    - no async_generate (Megatron GRPO refuses it: a 1-step-off row is predicted as ms-swift would run it, on-policy).
    """
    c, extra = row["config"], row["config"].get("extra", {})
    lay = time_row_layout(row)
    world, pp, tp, cp = c["trainer_gpus"], lay["pp"], lay["tp"], lay["cp"]
    ep = lay["ep"]
    while ep > 1 and world % (ep * pp):
        ep //= 2
    dp = max(world // (tp * pp * cp), 1)
    completions = c["prompts_per_step"] * c["num_generations"]
    gbs = completions // c["optimizer_steps_per_generation"]
    mean = swift.estimate.completion_tokens or lengths.assumed_mean(swift.train.max_completion_length)
    total = (swift.estimate.prompt_tokens or 0) + mean
    micro = extra.get("micro_batch_size") or max(1, int(extra.get("max_total_sequence_length", total) // total))
    while micro > 1 and gbs % (micro * dp):
        micro -= 1
    t = swift.train
    changes = {
        "train.model": t.model, "train.tuner_type": t.tuner_type, "train.lora_rank": t.lora_rank,
        "train.dataset": t.dataset, "train.reward_funcs": t.reward_funcs, "train.num_generations": t.num_generations,
        "train.max_completion_length": t.max_completion_length, "train.max_length": t.max_length, "train.beta": t.beta,
        "train.global_batch_size": gbs, "train.micro_batch_size": micro,
        "train.steps_per_generation": c["optimizer_steps_per_generation"],
        "train.tensor_model_parallel_size": tp, "train.pipeline_model_parallel_size": pp,
        "train.context_parallel_size": cp, "train.expert_model_parallel_size": ep,
        "train.sequence_parallel": lay["sp"], "train.padding_free": True,
        "train.recompute_granularity": "full" if c.get("gradient_checkpointing") else "selective",
        "rollout.async_generate": False}
    base = swift.model_copy(update={"engine": "megatron", "train": type(t)()})
    return with_changes(base, changes)


def step_time(row: dict) -> float:
    """Seconds per optimizer step the model gives a training-only row: its micro-batches through Megatron-Core's
    pipeline forward and backward, the gradient sync and the optimizer (timing.megatron.train_s), plus the
    reference forward of every micro-batch for DPO and KTO (a model of its own with full tuning, the adapter off
    with LoRA)."""
    t = time_inputs(spec_of(row))
    t = replace(t, mem=inputs_of(row), prompt_tokens=0.0, completion_tokens=float(row["config"]["seq_len"]),
                completion_given=True, steps_per_round=1.0)
    reference = megatron.pipeline_s(t, t.mem.megatron.micro_batches, backward=False) if row["workload"] in (
        "dpo", "kto") else 0.0
    return megatron.train_s(t) + reference


def error_line(label: str, signed: list[float], label_width: int = 46) -> str:
    """A report line: the label, how many rows, and the median and p90 of their absolute % errors (``signed``: each
    row's (ours ÷ measured − 1) × 100; p90 by linear interpolation, one row's own error)."""
    if not signed:
        return f"{label:<{label_width}} {0:>3}"
    errors = sorted(abs(e) for e in signed)
    p90 = errors[0] if len(errors) == 1 else statistics.quantiles(errors, n=10, method="inclusive")[8]
    return f"{label:<{label_width}} {len(errors):>3}   {statistics.median(errors):7.0f} {p90:6.0f}"


def time_report(label_width: int = 46) -> list[str]:
    """The Megatron lines of bench/time_accuracy.py: the s/it figures of this file's training-only rows, each split
    and by whether its lengths are given."""
    timed = [(r, step_time(r), r["measured_s_per_it"]) for r in rows() if "measured_s_per_it" in r]

    def line(label: str, part: list) -> str:
        return error_line(label, [(ours / measured - 1) * 100 for _, ours, measured in part], label_width)

    out = ["\nMegatron training steps (tests/data/megatron_measurements.jsonl: ms-swift's Megatron example headers' "
           "s/it, SFT/DPO runs: the training step alone, no rollout):"]
    for split, name in (("fit", "fit"), ("held_out", "held out")):
        part = [x for x in timed if x[0]["split"] == split]
        out.append(line(f"Megatron s/it, {name}", part))
        out.append(line("  lengths given", [x for x in part if not lengths_assumed(x[0])]))
        out.append(line("  lengths assumed", [x for x in part if lengths_assumed(x[0])]))
    for r, ours, measured in sorted(timed, key=lambda x: x[1] / x[2]):
        mark = "A" if lengths_assumed(r) else " "
        out.append(f"  {r['split'][:4]:<4} {mark} {r['id']:<44} {measured:7.2f} → {ours:7.2f} s/it  "
                   f"{(ours / measured - 1) * 100:+6.0f} %")
    return out
