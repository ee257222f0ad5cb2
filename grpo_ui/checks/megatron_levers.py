"""The changes make-it-fit (checks/fit.py) and make-it-faster (checks/faster.py) try on a megatron rlhf job: Megatron's
own levers — more tensor, pipeline, context or expert parallelism, full recomputation, sequence parallelism, the
optimizer's precision and CPU offload, a smaller micro-batch, LoRA — beside the rollout's, which both engines share.
Each is a ready-to-apply {dotted spec path: value} change; fit.py and faster.py offer one only when ms-swift's rules
(the Megatron ones: TP divides the heads, PP the layers, EP the experts, the world the model-parallel size, the batch
its micro-batches …) find no new error on the job it leads to, so a lever here may propose what the rules refuse."""

from __future__ import annotations

from grpo_ui.spec.resolve import Resolved

# (relative slowdown) of each memory lever: a guess of its cost, used only to order the suggestions
TP_COST, PP_COST, CP_COST, EP_COST, RECOMPUTE_COST, CPU_OFFLOAD_COST = 0.15, 0.2, 0.2, 0.1, 0.3, 0.5


def fit_knobs(eff: Resolved) -> list[tuple[dict, str, float]]:
    """Megatron's memory levers for ``eff`` (the rollout's are fit.py's own)."""
    mv, arch = eff.megatron, eff.arch
    out: list[tuple[dict, str, float]] = []
    if mv.recompute != "full":
        out.append(({"train.recompute_granularity": "full", "train.recompute_method": "uniform",
                     "train.recompute_num_layers": 1},
                    "full recomputation: each layer keeps only its input, one layer rebuilt at a time", RECOMPUTE_COST))
    if mv.tp > 1 and not mv.sequence_parallel:
        out.append(({"train.sequence_parallel": True}, "sequence parallelism: norms and residuals split over TP", 0.0))
    if mv.tp * 2 <= eff.nproc_per_node:
        out.append(({**{"train.tensor_model_parallel_size": mv.tp * 2}, "train.sequence_parallel": True},
                    f"tensor parallel {mv.tp * 2} with sequence parallelism: weights and activations split further",
                    TP_COST))
    out.append(({"train.pipeline_model_parallel_size": mv.pp * 2},
                f"pipeline parallel {mv.pp * 2}: each GPU holds half the layers", PP_COST))
    if mv.cp == 1:
        out.append(({"train.context_parallel_size": 2}, "context parallel 2: each sequence split over 2 GPUs",
                    CP_COST))
    if arch is not None and arch.num_experts and mv.ep * 2 <= mv.world:
        out.append(({"train.expert_model_parallel_size": mv.ep * 2},
                    f"expert parallel {mv.ep * 2}: each GPU holds half as many experts", EP_COST))
    if not mv.distributed_optimizer:
        out.append(({"train.use_distributed_optimizer": True}, "the distributed optimizer: states split over DP",
                     0.02))
    if not mv.precision_aware_optimizer:
        out.append(({"train.use_precision_aware_optimizer": True},
                    "precision-aware optimizer: 16-bit remainders of the fp32 main parameters", 0.02))
    if not mv.optimizer_cpu_offload:
        out.append(({"train.optimizer_cpu_offload": True}, "optimizer states and step on the CPU", CPU_OFFLOAD_COST))
    if mv.micro_batch > 1:
        out.append(({"train.micro_batch_size": mv.micro_batch // 2},
                    f"micro-batch {mv.micro_batch // 2}: the same global batch in twice the micro-batches", 0.1))
    if mv.full_tuning:
        out.append(({"train.tuner_type": "lora"}, "LoRA instead of full tuning (no reference model either)", 0.3))
    return out


def faster_candidates(eff: Resolved) -> list[tuple[dict, str]]:
    """Megatron's speed levers for ``eff`` (the rollout's, LoRA and the completion cap are faster.py's own)."""
    mv = eff.megatron
    out: list[tuple[dict, str]] = []
    if mv.recompute == "full":
        out.append(({"train.recompute_granularity": "selective", "train.recompute_method": None,
                     "train.recompute_num_layers": None}, "selective recomputation: no full forward again"))
    if mv.pp > 1:
        out.append(({"train.pipeline_model_parallel_size": mv.pp // 2},
                    f"pipeline parallel {mv.pp // 2}: a smaller bubble and log-prob forwards through fewer stages"))
    if mv.tp > 1:
        out.append(({"train.tensor_model_parallel_size": mv.tp // 2},
                    f"tensor parallel {mv.tp // 2}: fewer all-reduces per layer"))
    if mv.optimizer_cpu_offload:
        out.append(({"train.optimizer_cpu_offload": False}, "the optimizer on the GPU, not the CPU"))
    if mv.micro_batch * 2 * mv.dp <= mv.global_batch:
        out.append(({"train.micro_batch_size": mv.micro_batch * 2},
                    f"micro-batch {mv.micro_batch * 2}: half the micro-batches, each fuller"))
    return out
