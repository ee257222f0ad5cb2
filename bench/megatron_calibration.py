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

import statistics
from dataclasses import replace
from pathlib import Path

from bench.calibration import Result, load, modelled_gib, predicted_gib, weights_only_gib
from grpo_ui.memory.estimate import estimate
from grpo_ui.memory.inputs import ExtraModel, Inputs, inputs_from_spec
from grpo_ui.spec.model import JobSpec
from grpo_ui.spec.paths import with_changes
from grpo_ui.spec.swift_args import RolloutArgs, TrainArgs

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
    out.append("per row (measured → ours, signed error; A: lengths assumed, C: the figure is the card's size):")
    for r in sorted(results, key=lambda r: r.signed(r.ours)):
        marks = ("A" if lengths_assumed(r.row) else " ") + ("C" if r.row.get("at_capacity") else " ")
        out.append(f"  {r.row['split'][:4]:<4} {marks} {r.row['id']:<44} {r.row['measured_gib']:7.1f} → {r.ours:7.1f} "
                   f"GiB  {r.signed(r.ours):+6.1f} %")
    return out
