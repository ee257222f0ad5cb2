"""Make-it-fit: search the memory knobs for the few smallest changes that make a job fit its GPUs.

Each candidate is a ready-to-apply {dotted spec path: value} change with an expected speed cost (a rough relative
slowdown, 0 = free). Single changes and pairs are tried; of those that fit, the cheapest are offered, each only once
ms-swift's rules and the command line, run on the job it produces, find no error the job did not already have. What a
card says is computed on that job too: its verdict and peak from its estimate, and what happens to the batch from the
batch before and after.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import combinations

from grpo_ui.checks import megatron_levers
from grpo_ui.checks.rules import validate
from grpo_ui.core.findings import Finding
from grpo_ui.knowledge.engines import ZeroConfig, zero_config
from grpo_ui.memory.estimate import estimate_spec
from grpo_ui.memory.report import MemoryReport
from grpo_ui.spec.errors import SpecError
from grpo_ui.spec.model import JobSpec
from grpo_ui.spec.paths import with_changes
from grpo_ui.spec.resolve import Resolved, resolve
from grpo_ui.spec.swift_cli import train_command


@dataclass(frozen=True)
class Suggestion:
    changes: dict
    why: str
    cost: float
    peak_gib: float
    verdict: str


def _changed(eff: Resolved, changes: dict) -> Resolved:
    """The job's effective values after ``changes`` (SpecError when they make an invalid spec)."""
    return resolve(with_changes(eff.spec, changes), eff.arch)


def _batches(eff: Resolved) -> tuple[int, int]:
    """(the generation batch ms-swift checks against num_generations, the train batch of one optimizer step)."""
    return eff.generation_batch, eff.spec.train.per_device_train_batch_size * eff.world_size * eff.grad_accum


def _smaller_micro_batch(eff: Resolved) -> tuple[dict, str] | None:
    """The largest micro-batch below the current one that keeps both batches, the accumulation (and an explicit
    steps_per_generation) grown to match, with what happens to the batch computed on the changed job."""
    t = eff.spec.train
    pd, spg = t.per_device_train_batch_size, t.steps_per_generation
    micro = next((m for m in range(pd - 1, 0, -1) if pd * eff.grad_accum % m == 0 and (spg is None or pd * spg % m == 0)),
                 None)
    if micro is None:
        return None
    accum = pd * eff.grad_accum // micro
    changes = {"train.per_device_train_batch_size": micro, "train.gradient_accumulation_steps": accum,
               **({"train.steps_per_generation": pd * spg // micro} if spg is not None else {})}
    try:
        before, after = _batches(eff), _batches(_changed(eff, changes))
    except SpecError:
        return None
    batch = "same batch" if before == after else (f"generation batch {before[0]} → {after[0]}, optimizer-step batch "
                                                  f"{before[1]} → {after[1]}")
    return changes, f"micro-batch {micro} with {accum} accumulation steps ({batch})"


def _shards_more(preset: ZeroConfig, current: ZeroConfig | None) -> bool:
    """A ZeRO preset keeps less on the GPU than the job's DeepSpeed settings: a higher stage, or more offloaded."""
    def depth(z: ZeroConfig) -> tuple[int, int]:
        return z.stage, z.offload_optimizer + z.offload_param
    return current is None or depth(preset) > depth(current)


def _colocate_knobs(eff: Resolved) -> list[tuple[dict, str, float]]:
    """A colocated vLLM's levers (both engines)."""
    r = eff.spec.rollout
    out: list[tuple[dict, str, float]] = []
    if eff.colocate:
        if r.sleep_level < 1:  # level 2 frees the same GPU memory (memory.vllm_asleep); it only saves host RAM
            out.append(({"rollout.sleep_level": 1},
                        "sleep_level 1: vLLM's weights to CPU RAM and its KV cache freed while training", 0.05))
        for util in (0.3, 0.4, 0.5, 0.6, 0.7):
            if util < r.vllm_gpu_memory_utilization:
                out.append(({"rollout.vllm_gpu_memory_utilization": util},
                            f"vLLM reserves {util:.0%} of the GPU", 0.05 + (r.vllm_gpu_memory_utilization - util) / 4))
        for tp in (2, 4, 8):
            if tp > r.vllm_tensor_parallel_size and eff.nproc_per_node % tp == 0:
                out.append(({"rollout.vllm_tensor_parallel_size": tp}, f"vLLM tensor parallel {tp}", 0.1 * tp / 2))
        if not r.offload_optimizer:
            out.append(({"rollout.offload_optimizer": True}, "offload optimizer states during rollout", 0.15))
        if not r.offload_model:
            out.append(({"rollout.offload_model": True}, "offload the policy during rollout", 0.25))
    return out


def _knobs(eff: Resolved) -> list[tuple[dict, str, float]]:
    if eff.megatron:  # megatron rlhf: its own levers (checks/megatron_levers.py)
        return _colocate_knobs(eff) + megatron_levers.fit_knobs(eff)
    t = eff.spec.train
    out: list[tuple[dict, str, float]] = []
    if not t.use_liger_kernel:  # what Liger cannot run with is the rules' (LIGER-INCOMPATIBLE) to say
        out.append(({"train.use_liger_kernel": True}, "Liger kernels: no full logits tensor", 0.0))
    out += _colocate_knobs(eff)
    if not t.gradient_checkpointing:
        out.append(({"train.gradient_checkpointing": True}, "gradient checkpointing", 0.3))
    for preset, cost in (("zero2", 0.05), ("zero3", 0.15), ("zero3_offload", 1.0)):
        if _shards_more(zero_config(preset), eff.zero):
            out.append(({"train.deepspeed": preset}, f"DeepSpeed {preset}", cost))
    if (smaller := _smaller_micro_batch(eff)) is not None:
        out.append((*smaller, 0.1))
    if eff.reference_model:
        out.append(({"train.beta": 0.0}, "beta 0: no reference model (drops the KL term)", 0.2))
    if t.tuner_type == "full":
        out.append(({"train.tuner_type": "lora"}, "LoRA instead of full tuning", 0.3))
    return out


def _errors(eff: Resolved) -> set[tuple]:
    """The errors ms-swift's rules and the swift rlhf command line find in a job, as (id, fields)."""
    return {(f.id, f.fields) for f in validate(eff) + train_command(eff).findings if f.severity == "error"}


def suggest(job: JobSpec | Resolved, gpu: str | None = None, limit: int = 3, gpu_gib: float | None = None,
            arch=None, base: MemoryReport | None = None, errors: list[Finding] | None = None) -> list[Suggestion]:
    """Cheapest changes after which the job (its spec or Resolved values) fits: a tight job's changes that make it fit
    with the estimate's error margin, an OOM job's that make it fit or at least tight (those first at equal cost);
    never one that raises an error the job did not already have. Empty if it already fits, none does, or no estimate
    can be made. ``gpu``, ``gpu_gib`` and ``arch`` as for grpo_ui.memory.estimate.estimate_spec; ``base``: the job's
    own report and ``errors`` its own rule and command-line errors, when the caller has them (not computed again)."""
    eff = resolve(job, arch)
    try:
        base = base or estimate_spec(eff, gpu, gpu_gib=gpu_gib)
    except ValueError:  # memory.EstimateError, catalog.UnknownGpu, engines.EngineConfigError
        return []
    if base.verdict in ("fits", "unknown"):
        return []
    wanted = ("fits",) if base.verdict == "tight" else ("fits", "tight")
    knobs = _knobs(eff)
    fitting: list[tuple[Suggestion, Resolved]] = []
    for size in (1, 2):
        for combo in combinations(knobs, size):
            changes = {k: v for c, _, _ in combo for k, v in c.items()}
            if len(changes) < sum(len(c) for c, _, _ in combo):
                continue  # two options for the same knob
            try:
                changed = _changed(eff, changes)
            except SpecError:
                continue
            report = estimate_spec(changed, gpu, gpu_gib=gpu_gib)
            if report.verdict in wanted:
                fitting.append((Suggestion(changes, " + ".join(w for _, w, _ in combo), sum(c for _, _, c in combo),
                                           report.trainer.peak_gib, report.verdict), changed))
    fitting.sort(key=lambda found: (found[0].cost, found[0].verdict != "fits", found[0].peak_gib))
    known = {(f.id, f.fields) for f in errors} if errors is not None else _errors(eff)
    offered: list[Suggestion] = []
    for suggestion, changed in fitting:  # checked in the order offered, until enough pass
        if len(offered) == limit:
            break
        if _errors(changed) <= known:
            offered.append(suggestion)
    return offered
