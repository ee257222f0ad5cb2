"""Per-GPU memory of a megatron rlhf job (Megatron-Core under ms-swift), term by term, for the pipeline stage that
holds the most: pure functions over ``Inputs`` whose ``megatron`` Layout is set. estimate.py puts the terms into the
same phases and report as the DeepSpeed path's.

Sources: Megatron-LM's distributed-optimizer guide (docs/source/api-guide/dist_optimizer.md: bytes per parameter
"6 + 12/d" for bf16 parameters with fp32 gradients), Megatron-Core's optimizer factory (TE FusedAdam with
store_param_remainders under use_precision_aware_optimizer; HybridDeviceOptimizer for optimizer_cpu_offload),
Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models" (arXiv:2205.05198: §4 the
activation memory per layer sbh(34 + 5as/h) bytes, with TP sbh(10 + 24/t + 5as/(ht)), with TP and sequence
parallelism sbh(34/t + 5as/(ht)), selective recomputation dropping the 5as/(ht) attention term, full recomputation
keeping 2sbh per layer; §4.2.3 the first pipeline stage holding p micro-batches in flight under 1F1B, × (1 +
(p−1)/(pm)) interleaved), and ms-swift 4.6 (swift/megatron: bf16 with fp32 main grads, accumulate_allreduce_grads_in_fp32
(arguments/megatron_args.py _map_dtype); the reference model of full tuning (trainers/rlhf_mixin.py prepare_model);
what offload_model and offload_optimizer move (trainers/utils.py offload_megatron_model_to_cpu /
offload_megatron_optimizer); the GRPO log-probs from vocab-parallel logits (trainers/vocab_parallel_utils.py)).

Korthikanti's per-layer count assumes GPT's layer (4h GeLU MLP, dropout, unfused attention). Megatron-Core's layers
under ms-swift differ, so the count is redone per tensor with the same rules: 16-bit activations; each norm keeps its
input and its output (the next linear's input) and an fp32 rsigma; q, k, v and the attention output (flash
attention keeps no s² scores, only an fp32 log-sum-exp per head); a gated MLP keeps fc1's 2·I output (SwiGLU's
input) and fc2's I input; no dropout (ms-swift's hidden and attention dropout are 0); tensors outside the
tensor-parallel region are ÷ TP only with sequence parallelism; an MoE layer keeps the router's fp32 logits and
probabilities and, for each of the k routed copies of a token, the permuted input, fc1's output, fc2's input and
output.
"""

from __future__ import annotations

import math

from grpo_ui.memory.dynamic import vision_activations
from grpo_ui.memory.inputs import Inputs
from grpo_ui.memory.layout import Layout
from grpo_ui.memory.report import GIB, Term
from grpo_ui.memory.states import lora_params

ACT_BYTES = 2
# Fitted. What a Megatron-Core rank holds beyond the modelled terms (GiB): the median, over the fit rows of
# tests/data/megatron_measurements.jsonl whose sequence lengths are given and whose figure is below the card's size,
# of the measured figure minus the estimate without it (bench/megatron_calibration.py rank_overhead prints it; the
# held-out rows are never used). What it stands for is not measured apart: Transformer Engine's and cuBLAS's
# workspaces, buffers of Megatron's many process groups, the allocator's slack under expandable segments.
RANK_OVERHEAD_GIB = 7.4
EXPERT_LINEARS = ("gate_proj", "up_proj", "down_proj")
SYNC_BUCKET_GIB = 0.5  # the weight sync's HF-format bucket (SWIFT_UPDATE_WEIGHTS_BUCKET_SIZE, 512 MiB by default)


def _layout(i: Inputs) -> Layout:
    assert i.megatron is not None, "a Megatron estimate needs Inputs.megatron"
    return i.megatron


# Parameters on one GPU

def expert_layer_params(i: Inputs) -> int:
    """One MoE layer's routed experts: E × 3·h·I_moe (0 for a dense model)."""
    a = i.arch
    return a.num_experts * 3 * a.hidden_size * a.moe_intermediate_size if a.num_experts else 0


def dense_layer_params(i: Inputs) -> float:
    """One decoder layer's parameters outside the routed experts (attention, norms, a dense MLP or the router and
    shared expert), averaged over the layers."""
    a = i.arch
    return a.decoder_params() / a.num_hidden_layers - expert_layer_params(i)


def stage_params(i: Inputs, stage: int) -> tuple[float, float]:
    """(dense, expert) parameters one GPU of ``stage`` holds: its layers' dense part ÷ TP and experts ÷ (EP·ETP); the
    first stage the input embedding (V·h ÷ TP) and the vision tower, the last the output layer (÷ TP; a tied
    embedding is kept there too once PP > 1) and the final norm."""
    lay, a = _layout(i), i.arch
    n = lay.stage_layers[stage]
    vocab = a.vocab_size * a.hidden_size / lay.tp
    dense = n * dense_layer_params(i) / lay.tp
    if stage == 0:
        dense += vocab + (a.vision.params() / lay.tp if a.vision else 0)
    if stage == lay.pp - 1:
        dense += a.hidden_size + (vocab if (not a.tie_word_embeddings or lay.pp > 1) else 0)
    return dense, n * expert_layer_params(i) / (lay.ep * lay.etp)


def stage_lora_params(i: Inputs, stage: int) -> tuple[float, float]:
    """(dense, expert) LoRA parameters on one GPU of ``stage``: the adapters of its layers' share, split like the
    linears they adapt (mostly: one of A and B is split, the other replicated; r is small)."""
    lay, a = _layout(i), i.arch
    share = lay.stage_layers[stage] / a.num_hidden_layers
    experts = sum(i.lora_rank * (fan_in + fan_out) * count for name, fan_in, fan_out, count in a.linears()
                  if name in i.lora_targets and a.num_experts and name in EXPERT_LINEARS)
    return (lora_params(i) - experts) * share / lay.tp, experts * share / (lay.ep * lay.etp)


def main_param_bytes(i: Inputs) -> float:
    """Bytes per parameter the optimizer keeps: the fp32 main copy (4 B; 2 B, its low 16 bits, with the
    precision-aware optimizer's store_param_remainders over bf16 parameters; none for fp32 parameters) and Adam's
    two fp32 moments (8 B)."""
    if i.compute_bytes >= 4:
        return 8.0
    return (2.0 if _layout(i).precision_aware else 4.0) + 8.0


def model_states(i: Inputs, stage: int) -> dict[str, float]:
    """Weights, gradients and optimizer states on one GPU of ``stage`` (bytes), Megatron-LM's "6 + 12/d":

    - weights: the stage's parameters in the model dtype (base and adapters);
    - gradients: Megatron's DDP keeps one contiguous fp32 buffer for every trainable parameter (bf16 training sets
      accumulate_allreduce_grads_in_fp32), allocated for the whole run, reduce-scattered in place;
    - optimizer: main_param_bytes per trainable parameter, ÷ DP·CP for dense parameters and ÷ the expert
      data-parallel size for experts with the distributed optimizer (whole without it); optimizer_cpu_offload keeps
      optimizer_offload_fraction of them in host memory (HybridDeviceOptimizer)."""
    lay = _layout(i)
    dense, expert = stage_params(i, stage)
    weights = (dense + expert) * i.compute_bytes
    if i.full:
        t_dense, t_expert = dense, expert
    else:
        t_dense, t_expert = stage_lora_params(i, stage)
        weights += (t_dense + t_expert) * i.compute_bytes
    grad_b = 4.0 if i.compute_bytes < 4 else i.compute_bytes
    states = main_param_bytes(i) * (t_dense / lay.optimizer_shards + t_expert / lay.expert_shards)
    return {"weights": weights, "grads": (t_dense + t_expert) * grad_b, "trainable": t_dense + t_expert,
            "optimizer": states * (1 - lay.cpu_offload_fraction), "cpu_optimizer": states * lay.cpu_offload_fraction}


def reference_bytes(i: Inputs, stage: int) -> float:
    """The reference model of full tuning (ms-swift's MegatronRLHFTrainer.prepare_model builds it whenever tuner_type
    is full, whatever beta is), laid out like the policy: its stage's weights in the model dtype. LoRA has none: the
    policy with its adapter disabled is the reference. Also the reference of a DPO/KTO row (extra_models)."""
    if not i.extra_models:
        return 0.0
    dense, expert = stage_params(i, stage)
    return (dense + expert) * i.compute_bytes


# Activations

def _seq_share(lay: Layout) -> float:
    """The share of a tensor outside the tensor-parallel region one GPU holds: 1/TP with sequence parallelism, all
    of it without."""
    return 1 / lay.tp if lay.sp else 1.0


def _norm_bytes(h: int, share: float) -> float:
    """A norm's input and output (16-bit) and its fp32 rsigma, per token."""
    return (2 * ACT_BYTES * h + 4) * share


def _lora_bytes(i: Inputs) -> float:
    """What LoRA adds per token and layer: lora_A's input after lora_dropout (a 16-bit copy and its 1-byte mask per
    adapted linear; Megatron-SWIFT's lora_dropout is 0.05) and lora_B's r-wide input, ÷ TP (the inputs are split by
    heads or, with sequence parallelism, by tokens). Megatron-Core fuses a layer's linears into linear_qkv (input h),
    linear_proj (q), linear_fc1 (gate and up: h) and linear_fc2 (I), each adapted once when any HF linear it holds is
    a target; a routed expert's fc1 and fc2 once per routed copy."""
    if i.full:
        return 0.0
    a = i.arch
    inter, copies = (a.moe_intermediate_size, a.num_experts_per_tok) if a.num_experts else (a.intermediate_size, 1)
    fused = ((("q_proj", "k_proj", "v_proj"), a.hidden_size, 1), (("o_proj",), a.num_attention_heads * a.hd, 1),
             (("gate_proj", "up_proj"), a.hidden_size, copies), (("down_proj",), inter, copies))
    per_input = ACT_BYTES + (1 if i.lora_dropout > 0 else 0)
    kept = sum(uses * (per_input * fan_in + ACT_BYTES * i.lora_rank) for names, fan_in, uses in fused
               if set(names) & set(i.lora_targets))
    return kept / _layout(i).tp


def layer_bytes(i: Inputs) -> float:
    """Bytes one decoder layer keeps for backward per token of the micro-batch, on one GPU (module docstring):

    - attention: a norm; q, k, v and the attention's output ÷ TP (heads split); q/k norms' inputs; flash
      attention's fp32 log-sum-exp per head; unfused attention also its s² scores, softmax and mask (Korthikanti's
      5·a·s/TP bytes per token) unless recomputed (selective);
    - dense MLP: a norm, fc1's 2·I and fc2's I ÷ TP;
    - MoE: a norm, the router's fp32 logits, probabilities and routing map (12·E B on the tokens this rank routes:
      ÷ TP with sequence parallelism), per routed copy the permuted input and fc2's output (2·h) and fc1's 2·I and
      fc2's I input ÷ ETP; a shared expert like a dense MLP;
    - LoRA (_lora_bytes)."""
    a, lay = i.arch, _layout(i)
    t, share, b = lay.tp, _seq_share(lay), ACT_BYTES
    h, q, kv = a.hidden_size, a.num_attention_heads * a.hd, a.num_key_value_heads * a.hd
    attn = _norm_bytes(h, share) + b * (q + 2 * kv + q) / t + 4 * a.num_attention_heads / t
    if a.qk_norm:
        attn += b * (q + kv) / t
    if i.attn == "eager" and lay.recompute != "selective":
        attn += 5 * a.num_attention_heads * (i.prompt_len + i.completion_len) / (t * lay.cp)
    if a.num_experts:
        routed = a.num_experts_per_tok * (2 * h + 3 * a.moe_intermediate_size / lay.etp) * b
        mlp = _norm_bytes(h, share) + share * (12 * a.num_experts + routed)
        if a.shared_expert_intermediate_size:
            mlp += b * 3 * a.shared_expert_intermediate_size / t
    else:
        mlp = _norm_bytes(h, share) + b * 3 * a.intermediate_size / t
    return attn + mlp + _lora_bytes(i)


def micro_batch_tokens(i: Inputs) -> float:
    """Tokens of one micro-batch on one GPU's slice of the sequence: micro-batch × (prompt + completion) ÷ CP."""
    return i.micro_batch * (i.prompt_len + i.completion_len) / _layout(i).cp


def in_flight(i: Inputs, stage: int) -> float:
    """Micro-batches whose activations ``stage`` holds at once under 1F1B: PP − stage (the warm-up forwards and the
    one in steady state), at most the step's micro-batches; the interleaved schedule's first stage × (1 + (PP−1) /
    (PP·VPP)) (Korthikanti §4.2.3)."""
    lay = _layout(i)
    n = min(lay.pp - stage, lay.micro_batches)
    if lay.vpp > 1 and stage == 0:
        n *= 1 + (lay.pp - 1) / (lay.pp * lay.vpp)
    return n


def activations(i: Inputs, stage: int) -> float:
    """Activations ``stage`` keeps at its peak (bytes): its layers' layer_bytes for each micro-batch in flight;
    with full recomputation only each recomputed unit's input (h per token, ÷ TP with sequence parallelism) for
    those, plus one unit recomputed with all it keeps during its backward (uniform: units of recompute_num_layers
    layers; block: the first recompute_num_layers layers of the stage checkpointed one by one, the rest kept)."""
    lay = _layout(i)
    n = lay.stage_layers[stage]
    tokens, per_layer = micro_batch_tokens(i), layer_bytes(i)
    layer_input = ACT_BYTES * i.arch.hidden_size * _seq_share(lay)
    if lay.recompute != "full":
        return in_flight(i, stage) * n * per_layer * tokens
    if lay.recompute_method == "block":
        checkpointed = min(lay.recompute_layers, n)
        kept = (n - checkpointed) * per_layer + checkpointed * layer_input
        return (in_flight(i, stage) * kept + per_layer) * tokens
    units = math.ceil(n / lay.recompute_layers)
    return (in_flight(i, stage) * units * layer_input + min(lay.recompute_layers, n) * per_layer) * tokens


def logits(i: Inputs, stage: int) -> float:
    """The last stage's logits and what the loss keeps of them (bytes), over micro-batch × sequence ÷ CP tokens and
    V ÷ TP (the output layer is vocab-parallel and computes every token of the packed sequence):

    - GRPO (ms-swift's compute_logps_and_entropy_from_logits): 16-bit logits divided by the temperature in place,
      vocab_parallel_log_softmax keeps exp(logits − max) for backward, whose gradients through the gather, the exp
      and into the logits are three more 16-bit tensors of the same size at the backward's start: 4 × 2 B;
    - cross entropy (SFT, DPO, KTO rows: Megatron-Core's fused vocab-parallel cross entropy): an fp32 copy of the
      16-bit logits, exponentiated in place and kept as the softmax, then the 16-bit gradient: 6 B."""
    lay = _layout(i)
    if stage != lay.pp - 1:
        return 0.0
    per_logit = 4 * ACT_BYTES if i.loss == "grpo" else 6
    return per_logit * micro_batch_tokens(i) * i.arch.vocab_size / lay.tp


def pipeline_buffers(i: Inputs, stage: int) -> float:
    """The activations a middle or last stage receives and the gradients it sends back per micro-batch in flight
    (point-to-point buffers: micro-batch tokens × h, ÷ TP with sequence parallelism)."""
    lay = _layout(i)
    if lay.pp == 1:
        return 0.0
    return 2 * ACT_BYTES * i.arch.hidden_size * _seq_share(lay) * micro_batch_tokens(i) * in_flight(i, stage)


def stage_training_bytes(i: Inputs, stage: int) -> float:
    """Everything ``stage`` holds at the training peak apart from vLLM and the fixed overheads (to find the peak
    stage)."""
    ms = model_states(i, stage)
    vision = vision_activations(i) * in_flight(i, stage) if stage == 0 else 0.0
    return (ms["weights"] + ms["grads"] + ms["optimizer"] + reference_bytes(i, stage) + activations(i, stage)
            + logits(i, stage) + pipeline_buffers(i, stage) + vision)


def peak_stage(i: Inputs) -> int:
    """The pipeline stage whose GPUs need the most during training: the first (the most micro-batches in flight)
    or the last (the output layer and the logits)."""
    return max(sorted({0, _layout(i).pp - 1}), key=lambda s: stage_training_bytes(i, s))


# The terms, as the report shows them

def stage_name(i: Inputs, stage: int) -> str:
    lay = _layout(i)
    if lay.pp == 1:
        return "every GPU"
    return f"pipeline stage {stage + 1} of {lay.pp} ({'first' if stage == 0 else 'last'}, {lay.stage_layers[stage]} layers)"


def training_terms(i: Inputs, ms: dict, reference: float, stage: int) -> list[Term]:
    lay = _layout(i)
    shards = f"÷ DP·CP {lay.optimizer_shards}" + (f", experts ÷ {lay.expert_shards}" if i.arch.num_experts else "")
    offload = (f"; {lay.cpu_offload_fraction:.0%} on the CPU (optimizer_cpu_offload)" if lay.cpu_offload_fraction
               else "")
    recompute = {"full": f"full recomputation ({lay.recompute_method}, {lay.recompute_layers} layer(s)): layer "
                         "inputs + one unit recomputed", "selective": "selective recomputation (core attention)",
                 None: "no recomputation"}[lay.recompute]
    return [
        Term("weights", ms["weights"] / GIB, f"stage's parameters ÷ TP {lay.tp} (experts ÷ EP·ETP "
             f"{lay.ep * lay.etp}), model dtype" + ("" if i.full else ", LoRA adapters added")),
        Term("gradients", ms["grads"] / GIB, "fp32 grad buffer of every trainable parameter (Megatron DDP, kept "
             "all run)"),
        Term("optimizer states", ms["optimizer"] / GIB, f"fp32 main params + Adam moments, {main_param_bytes(i):g} B"
             f"/param {shards if lay.distributed_optimizer else '(no distributed optimizer)'}{offload}"),
        Term("activations", activations(i, stage) / GIB, f"{in_flight(i, stage):g} micro-batch(es) in flight × "
             f"{lay.stage_layers[stage]} layers × {micro_batch_tokens(i):.0f} tokens; TP {lay.tp}"
             + (" with SP" if lay.sp else "") + f", CP {lay.cp}; {recompute} (Korthikanti et al. 2022)"),
        Term("logits", logits(i, stage) / GIB, "last stage: micro-batch tokens × vocab ÷ TP: GRPO 8 B (bf16 "
             "log-softmax), cross entropy 6 B (fp32 softmax)"),
        Term("pipeline buffers", pipeline_buffers(i, stage) / GIB, "received activations / sent gradients per "
             "micro-batch in flight"),
        Term("vision tower", (vision_activations(i) * in_flight(i, stage) if stage == 0 else 0.0) / GIB,
             "first stage: ViT patches of each micro-batch in flight"),
        Term("Megatron-Core rank overhead", RANK_OVERHEAD_GIB, "fitted on published Megatron runs: workspaces, "
             "process-group buffers, allocator slack (not measured apart)"),
        Term("reference/reward models", reference / GIB, "reference model of full tuning, laid out like the policy "
             "(LoRA: the adapter is disabled instead)")]


def step_terms(ms: dict, training: list[Term]) -> list[Term]:
    """The optimizer step: the states and every gradient, no activations; the distributed optimizer steps on views
    of the grad buffer and writes the 16-bit parameters back in place, so it allocates nothing of note."""
    dynamic = ("activations", "logits", "pipeline buffers", "vision tower")
    return [t for t in training if t.name not in dynamic] + [
        Term("optimizer-step temporaries", 0.0, "none: in-place on views of the grad and param buffers")]


def rollout_terms(i: Inputs, ms: dict, reference: float) -> list[Term]:
    """What training leaves on the GPU while vLLM generates: offload_model moves the parameters (and the reference
    model) to the CPU and frees the grad buffer; offload_optimizer moves the main parameters and moments; the
    weight sync's bucket unless offload_bridge."""
    lay = _layout(i)
    return [Term("weights", 0.0 if i.offload_model else ms["weights"] / GIB, "policy weights (0 with offload_model)"),
            Term("gradients", 0.0 if i.offload_model else ms["grads"] / GIB, "fp32 grad buffer (freed with "
                 "offload_model)"),
            Term("optimizer states", 0.0 if i.offload_optimizer else ms["optimizer"] / GIB,
                 "kept unless offload_optimizer"),
            Term("reference/reward models", 0.0 if i.offload_model else reference / GIB,
                 "reference model (0 with offload_model)"),
            Term("weight-sync bucket", 0.0 if lay.offload_bridge or i.vllm == "none" else SYNC_BUCKET_GIB,
                 "HF-format export bucket of the sync (CPU with offload_bridge)"),
            Term("Megatron-Core rank overhead", RANK_OVERHEAD_GIB, "as in training")]


def host_ram_per_process(i: Inputs, ms: dict, reference: float) -> float:
    """Host RAM one training process needs (bytes): its optimizer_cpu_offload share (states and an fp32 copy of the
    gradients), what offload_model / offload_optimizer move during rollout."""
    lay = _layout(i)
    out = ms["cpu_optimizer"] + ms["trainable"] * 4 * lay.cpu_offload_fraction / lay.optimizer_shards
    if i.offload_model:
        out += ms["weights"] + reference
    if i.offload_optimizer:
        out += ms["optimizer"]
    return out


def assumptions(i: Inputs, stage: int) -> list[str]:
    lay = _layout(i)
    return [f"Megatron-Core: TP {lay.tp}, PP {lay.pp}, CP {lay.cp}, EP {lay.ep}, ETP {lay.etp}"
            + (", sequence parallel" if lay.sp else "") + f", DP {lay.dp} over {lay.world} GPUs; "
            f"{lay.micro_batches} micro-batch(es) of {i.micro_batch} per step",
            f"the peak is on {stage_name(i, stage)}",
            f"sequence = prompt {i.prompt_len} + completion {i.completion_len} tokens, packed (padding_free)",
            "distributed optimizer" if lay.distributed_optimizer else "no distributed optimizer"]
