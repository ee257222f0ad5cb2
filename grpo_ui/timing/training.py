"""The trainer's work on one round's completions (seconds per round): the old policy's and the reference's
log-probs, reward models, forward/backward and the optimizer, with the collectives of the sharding engine.

Compute (Kaplan et al. 2020, Narayanan et al. 2021's accounting): a forward costs 2 FLOPs per matmul parameter and
token (active parameters for an MoE) plus attention's 4 · layers · context · heads · head_dim; a full backward twice
the forward; LoRA's backward only the gradient of the activations through the frozen weights (once the forward; the
adapters' own are negligible); gradient checkpointing one more forward. At the share of their peak transformers'
modules reach in training (efficiency.TRANSFORMERS_MFU, set from ms-swift's published swift sft step times), but never
faster than reading the weights once per pass (small micro-batches are memory-bound).
Sequences are padded to the longest in their micro-batch unless padding_free.
Collectives (links.py): ZeRO-3 / FSDP gather the weights for every forward and backward and reduce-scatter the
gradients each micro-step, so their cost is per micro-batch, whatever its size (the micro-batch effect: fewer, fuller
micro-batches gather fewer times). ZeRO-3 overlaps its gathers with compute only when it prefetches
(stage3_prefetch_bucket_size > 0: swift sft's 'auto'); ms-swift's GRPO sets the bucket to 0
(rlhf_trainers/arguments.py), so there they add to compute. FSDP2 prefetches the next layer, so its gathers overlap;
ZeRO-1/2 reduce-scatter each micro-step under the backward; DDP all-reduces once per optimizer step, overlapping the
last backward.
"""

from __future__ import annotations

from grpo_ui.knowledge.catalog import ModelArch
from grpo_ui.memory.states import base_weight_bytes, model_states, zero3_prefetch_elements
from grpo_ui.timing import efficiency
from grpo_ui.timing.inputs import TimeInputs, longest_of
from grpo_ui.timing.links import all_gather_s, all_reduce_s, host_copy_s, memory_read_s, reduce_scatter_s


def matmul_params(arch: ModelArch, active: bool = False) -> int:
    """Parameters a token multiplies by: all but the input embedding (a lookup; a tied one is also the output layer,
    so it stays)."""
    embedding = 0 if arch.tie_word_embeddings else arch.vocab_size * arch.hidden_size
    return arch.total_params(active) - embedding


def expert_matmul_params(arch: ModelArch) -> int:
    """The routed-expert parameters a token multiplies by: k experts' gate, up and down projections (3·h·I_moe) in
    every layer; 0 for a dense model."""
    if not arch.num_experts:
        return 0
    return arch.num_hidden_layers * arch.num_experts_per_tok * 3 * arch.hidden_size * arch.moe_intermediate_size


def attention_flops_per_token(arch: ModelArch, context: float) -> float:
    """A forward's attention FLOPs for one token that attends to ``context`` tokens: QKᵀ and AV, 2 · 2 · context ·
    heads · head_dim in every full-attention layer."""
    return 4 * arch.full_attention_layers * context * arch.num_attention_heads * arch.hd


def sequence_tokens(t: TimeInputs, batch: int) -> float:
    """Tokens per sequence of a ``batch``-sequence micro-batch: the prompt plus the mean completion (padding_free, or
    one sequence) or the micro-batch's longest completion (padded)."""
    if batch <= 1 or t.padding_free:
        return t.prompt_tokens + t.completion_tokens
    longest = longest_of(batch, t.completion_tokens, t.max_completion) if t.completion_given else t.max_completion
    return t.prompt_tokens + longest


def _gpu_seconds(t: TimeInputs, flops: float, weight_reads: float) -> float:
    """One micro-batch's passes: compute at the achievable peak, at least the time to read the weights."""
    return max(flops / (t.gpu.tflops_bf16 * 1e12 * efficiency.TRANSFORMERS_MFU), memory_read_s(weight_reads, t.gpu))


def _gather_s(t: TimeInputs, arch: ModelArch) -> float:
    """One all-gather of a sharded model's 16-bit weights (ZeRO-3, FSDP; from host memory first when offloaded)."""
    i = t.mem
    if not i.shards_weights:
        return 0.0
    nbytes = arch.total_params() * i.compute_bytes
    host = host_copy_s(nbytes / i.world, t.gpu) if i.weights_offloaded else 0.0
    return host + all_gather_s(nbytes, t.gpu, t.gpus_per_node, t.nodes, t.internode_gbs)


def forward_s(t: TimeInputs, arch: ModelArch, batches: int) -> float:
    """``batches`` micro-batches forward without gradients (log-probs, a reward model): 2 · params + attention per
    token, one read of the weights, one gather each under ZeRO-3 / FSDP."""
    batch = t.mem.micro_batch
    seq = sequence_tokens(t, batch)
    flops = batch * seq * (2 * matmul_params(arch, active=True) + attention_flops_per_token(arch, seq / 2))
    weights = base_weight_bytes(t.mem) if arch is t.mem.arch else arch.total_params() * t.mem.compute_bytes
    return batches * (_gpu_seconds(t, flops, weights) + _gather_s(t, arch))


def logprobs_s(t: TimeInputs) -> tuple[float, float]:
    """(old policy, reference) log-prob forwards of one round: one forward per micro-batch of the round
    (steps_per_generation of them per rank), with gradient checkpointing off; the reference is a model of its own
    (full tuning, or ref_model) or the policy with its LoRA adapter disabled."""
    old = forward_s(t, t.mem.arch, t.steps_per_generation) if t.old_logprobs else 0.0
    ref = forward_s(t, t.ref_arch or t.mem.arch, t.steps_per_generation) if t.ref else 0.0
    return old, ref


def reward_s(t: TimeInputs) -> float:
    """Reward models score the round's completions data-parallel on the trainer GPUs (one forward each), plus the
    latency the user gives for reward functions that call out (rule-based rewards: ~0)."""
    batches = t.steps_per_generation
    return sum(forward_s(t, m, batches) for m in t.reward_models) + t.reward_latency_s


def micro_step_s(t: TimeInputs) -> tuple[float, float]:
    """(compute, collectives) of one training micro-step (module docstring)."""
    i, arch = t.mem, t.mem.arch
    batch = i.micro_batch
    seq = sequence_tokens(t, batch)
    passes = 1 + (2 if i.full else 1) + (1 if i.grad_ckpt else 0)  # forward, backward, recomputation
    attention_passes = 3 + (1 if i.grad_ckpt else 0)  # attention's backward always needs its inputs' gradients
    flops = batch * seq * (2 * passes * matmul_params(arch, active=True)
                           + attention_passes * attention_flops_per_token(arch, seq / 2))
    reads = 2 + (1 if i.grad_ckpt else 0)  # the weights: forward, backward (activations' gradients), recomputation
    compute = _gpu_seconds(t, flops, reads * base_weight_bytes(i))
    grads = model_states(i)["trainable"] * i.compute_bytes
    comm = 0.0
    if i.shards_weights:
        comm = 2 * _gather_s(t, arch) + reduce_scatter_s(grads, t.gpu, t.gpus_per_node, t.nodes, t.internode_gbs)
    elif i.stage in (1, 2):
        comm = reduce_scatter_s(grads, t.gpu, t.gpus_per_node, t.nodes, t.internode_gbs)
    return compute, comm


def train_s(t: TimeInputs) -> float:
    """Forward/backward of the round's micro-steps (steps_per_generation × num_iterations per rank) and the optimizer
    steps they feed. ZeRO-3's gathers add to compute unless it prefetches; the other engines' collectives hide under
    it where they can (max)."""
    i = t.mem
    micro = t.steps_per_generation * t.iterations
    compute, comm = micro_step_s(t)
    per_micro = compute + comm if i.stage == 3 and not zero3_prefetch_elements(i) else max(compute, comm)
    total = micro * per_micro
    trainable = model_states(i)["trainable"]
    if not i.deepspeed and not i.fsdp and t.world > 1:  # DDP: one all-reduce per optimizer step
        reduce = all_reduce_s(trainable * i.compute_bytes, t.gpu, t.gpus_per_node, t.nodes, t.internode_gbs)
        total += t.steps_per_round * max(0.0, reduce - compute)
    return total + t.steps_per_round * optimizer_s(t, trainable)


def optimizer_s(t: TimeInputs, trainable: float) -> float:
    """One AdamW step on this GPU's share of the trainable parameters: ~28 bytes read and written per parameter (fp32
    weight, two moments, gradient) at the memory bandwidth; with DeepSpeed's optimizer offload, CPU Adam on the
    node's share and the 16-bit gradients down and weights back over the host link. ZeRO-1+ and FSDP shard it."""
    i = t.mem
    sharded = i.stage >= 1 or i.fsdp is not None
    share = trainable / (t.world if sharded else 1)
    if (i.zero and i.zero.offload_optimizer) or (i.fsdp and i.fsdp.offload):
        return share * t.gpus_per_node / efficiency.CPU_ADAM_PARAMS_S + 2 * host_copy_s(share * i.compute_bytes, t.gpu)
    return memory_read_s(share * 28, t.gpu)
