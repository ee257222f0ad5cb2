"""Make-it-fit: search the memory knobs for the few smallest changes that make a job fit its GPUs.

Each candidate is a ready-to-apply {dotted spec path: value} change with an expected speed cost (a rough relative
slowdown, 0 = free). Single changes and pairs are tried; the cheapest that fit are returned.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import combinations

from grpo_ui.memory.estimate import estimate_spec
from grpo_ui.memory.report import MemoryReport
from grpo_ui.spec.errors import SpecError
from grpo_ui.spec.model import JobSpec
from grpo_ui.spec.paths import with_changes
from grpo_ui.spec.resolve import Resolved, resolve


@dataclass(frozen=True)
class Suggestion:
    changes: dict
    why: str
    cost: float
    peak_gib: float
    verdict: str


def _knobs(eff: Resolved) -> list[tuple[dict, str, float]]:
    t, r = eff.spec.train, eff.spec.rollout
    out: list[tuple[dict, str, float]] = []
    if not t.use_liger_kernel and t.delta is None and t.sequence_parallel_size == 1 and not t.padding_free:
        out.append(({"train.use_liger_kernel": True}, "Liger kernels: no full logits tensor", 0.0))
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
    if not t.gradient_checkpointing:
        out.append(({"train.gradient_checkpointing": True}, "gradient checkpointing", 0.3))
    ds = t.deepspeed or ""
    for preset, cost in (("zero2", 0.05), ("zero3", 0.15), ("zero3_offload", 1.0)):
        if preset > (ds or "zero") and (preset != "zero2" or not ds.startswith("zero3")):
            out.append(({"train.deepspeed": preset}, f"DeepSpeed {preset}", cost))
    if t.per_device_train_batch_size > 1:
        half = t.per_device_train_batch_size // 2
        key, steps = ("train.steps_per_generation", eff.steps_per_generation * 2) if t.steps_per_generation else (
            "train.gradient_accumulation_steps", eff.grad_accum * 2)
        out.append(({"train.per_device_train_batch_size": half, key: steps},
                    f"micro-batch {half} with {steps} accumulation steps (same batch)", 0.1))
    if t.tuner_type == "full" and eff.beta > 0:
        out.append(({"train.beta": 0.0}, "beta 0: no reference model (drops the KL term)", 0.2))
    if t.tuner_type == "full":
        out.append(({"train.tuner_type": "lora"}, "LoRA instead of full tuning", 0.3))
    return out


def suggest(job: JobSpec | Resolved, gpu: str | None = None, limit: int = 3, gpu_gib: float | None = None,
            arch=None, base: MemoryReport | None = None) -> list[Suggestion]:
    """Cheapest changes after which the job (its spec or Resolved values) fits: a tight job's changes that make it fit
    with the estimate's error margin, an OOM job's that make it fit or at least tight (those first at equal cost);
    empty if it already fits, none does, or no estimate can be made. ``gpu``, ``gpu_gib`` and ``arch`` as for
    memory.estimate_spec; ``base``: the job's own report when the caller has it (not estimated again)."""
    eff = resolve(job, arch)
    try:
        base = base or estimate_spec(eff, gpu, gpu_gib=gpu_gib)
    except ValueError:  # memory.EstimateError, catalog.UnknownGpu, engines.EngineConfigError
        return []
    if base.verdict in ("fits", "unknown"):
        return []
    wanted = ("fits",) if base.verdict == "tight" else ("fits", "tight")
    knobs = _knobs(eff)
    found: list[Suggestion] = []
    for size in (1, 2):
        for combo in combinations(knobs, size):
            changes = {k: v for c, _, _ in combo for k, v in c.items()}
            if len(changes) < sum(len(c) for c, _, _ in combo):
                continue  # two options for the same knob
            try:
                report = estimate_spec(with_changes(eff.spec, changes), gpu, eff.arch, gpu_gib)
            except SpecError:
                continue
            if report.verdict in wanted:
                found.append(Suggestion(changes, " + ".join(w for _, w, _ in combo), sum(c for _, _, c in combo),
                                        report.trainer.peak_gib, report.verdict))
    found.sort(key=lambda s: (s.cost, s.verdict != "fits", s.peak_gib))
    return found[:limit]
