"""Generation time of one round: vLLM (colocated on the training GPUs, or on rollout servers) or transformers'
generate() when vLLM is off.

Each engine (a tensor-parallel group of GPUs) generates its share of the round's completions. Prefill is
compute-bound: 2 · active params · prompt tokens (plus attention) at the GPUs' achievable peak, each prompt once for
its num_generations completions with prefix caching, and under chunked prefill only what the memory-bound decoding
steps cannot absorb. Decoding is one step per token, memory-bound at small batches (every step reads the engine's weights ÷ TP, for an MoE the experts its tokens
route to, and the KV cache of every live sequence) and compute-bound at large ones, plus a fixed cost per step (vLLM's
scheduler and sampling, measured by vLLM; kernel launches without CUDA graphs; generate()'s every kernel from Python). vLLM runs at most ``max_num_seqs`` sequences at once and no
more than its KV budget holds (util × capacity − its weights), so a large round runs in waves; continuous batching
refills a finished sequence's slot at once, so the decoding steps are the round's tokens ÷ that concurrency, plus the
tail of the longest completion, which the round waits for (max_completion_length unless the user gives a mean).
transformers' generate() decodes its whole batch until the longest sequence ends, finished sequences included.
Multi-turn jobs wait for the environment between turns: estimate.env_seconds_per_turn × train.max_turns per round.
"""

from __future__ import annotations

from dataclasses import dataclass

from grpo_ui.knowledge.catalog import ModelArch
from grpo_ui.memory.report import GIB
from grpo_ui.memory.states import base_weight_bytes
from grpo_ui.memory.vllm import VLLM_OVERHEAD_GIB, vllm_weight_bytes
from grpo_ui.timing import efficiency
from grpo_ui.timing.inputs import TimeInputs, longest_of
from grpo_ui.timing.links import all_gather_s, memory_read_s
from grpo_ui.timing.training import attention_flops_per_token, matmul_params


@dataclass(frozen=True)
class Rollout:
    """One round's generation on one engine (they run in parallel): seconds, and how it was reached."""

    seconds: float
    prefill_s: float
    decode_s: float
    per_engine: float        # completions each engine generates
    concurrency: float       # sequences decoding at once
    decode_steps: float
    step_s: float            # one decoding step at the round's mean batch
    longest: float           # tokens of the longest completion the round waits for
    gather_s: float = 0.0    # ZeRO-3: the whole model gathered for generate()
    env_s: float = 0.0       # multi-turn: the environment's turns the round waits for

    @property
    def waves(self) -> float:
        return max(self.per_engine / self.concurrency, 1.0)


def expert_read_share_of_experts(arch: ModelArch, batch: float) -> float:
    """The share of an MoE layer's experts ``batch`` tokens route to: each picks k of E, so 1 − (1 − k/E)^batch of
    them are hit (uniform routing)."""
    return 1 - (1 - arch.num_experts_per_tok / arch.num_experts) ** max(batch, 1.0)


def expert_read_share(t: TimeInputs, batch: float) -> float:
    """The share of an MoE's weights one decoding step reads: the shared part plus the experts its tokens route to;
    1 for a dense model."""
    arch = t.mem.arch
    if not arch.num_experts:
        return 1.0
    experts = arch.num_hidden_layers * arch.num_experts * 3 * arch.hidden_size * arch.moe_intermediate_size
    total = arch.total_params()
    return (total - experts + experts * expert_read_share_of_experts(arch, batch)) / total


def decode_parts(t: TimeInputs, weight_bytes: float, batch: float, context: float, tp: int) -> tuple[float, float]:
    """(read, compute) seconds of one decoding step of ``batch`` sequences of mean ``context`` tokens on a TP group:
    reading the weights ÷ TP this batch needs and its KV cache ÷ TP; computing 2 · active params + attention per
    token, ÷ TP."""
    arch, gpu = t.mem.arch, t.rollout_gpu
    read = weight_bytes * expert_read_share(t, batch) + batch * context * arch.kv_bytes_per_token() / tp
    flops = batch * (2 * matmul_params(arch, active=True) + attention_flops_per_token(arch, context)) / tp
    return memory_read_s(read, gpu), flops / (gpu.tflops_bf16 * 1e12 * efficiency.INFERENCE_MFU)


def decode_step_s(t: TimeInputs, weight_bytes: float, batch: float, context: float, tp: int, fixed: float) -> float:
    """One decoding step: the larger of reading and computing (decode_parts), plus ``fixed`` seconds and, with TP > 1,
    two all-reduces per layer at NCCL's small-message latency."""
    read, compute = decode_parts(t, weight_bytes, batch, context, tp)
    latency = 2 * t.mem.arch.num_hidden_layers * efficiency.ALLREDUCE_LATENCY_S if tp > 1 else 0.0
    return max(read, compute) + fixed + latency


def prefill_s(t: TimeInputs, sequences: float, tp: int, shared: bool = False) -> float:
    """Prompt tokens of ``sequences`` through the model, compute-bound: (2 · active params + attention) per token.
    ``shared``: vLLM's prefix caching (ms-swift's default, vllm_enable_prefix_caching) lets a prompt's num_generations
    completions share its KV blocks, so each prompt is computed once and the others hit the cache."""
    arch = t.mem.arch
    prompts = sequences / t.num_generations if shared else sequences
    flops = prompts * t.prompt_tokens * (2 * matmul_params(arch, active=True)
                                         + attention_flops_per_token(arch, t.prompt_tokens / 2))
    return flops / tp / (t.rollout_gpu.tflops_bf16 * 1e12 * efficiency.INFERENCE_MFU)


def kv_budget_bytes(t: TimeInputs, weight_bytes: float) -> float:
    """What one GPU of an engine keeps for the KV cache: util × capacity − its weights − vLLM's overhead (memory
    estimate's vllm terms); nothing when that is negative (the memory estimate reports vLLM cannot start)."""
    util = t.mem.server_util if t.mem.vllm == "server" else t.mem.vllm_util
    capacity = t.rollout_gpu.memory_gib if t.mem.vllm == "server" else (t.mem.capacity_gib or t.gpu.memory_gib)
    return max(util * capacity * GIB - weight_bytes - VLLM_OVERHEAD_GIB * GIB, 0.0)


def chunked_prefill_s(t: TimeInputs, prefill: float, steps: float, step_read: float, step_compute: float) -> float:
    """What prefill adds to a round under vLLM's chunked prefill (on by default in its V1 engine): prompt chunks ride
    in the decoding steps' batches, so their compute fills what a memory-bound step leaves idle (its read time less
    its compute) and only the rest is added."""
    slack = steps * max(0.0, step_read - step_compute)
    return max(0.0, prefill - slack)


def vllm_rollout(t: TimeInputs) -> Rollout:
    """A round on vLLM: every engine generates generation_batch ÷ engines completions (module docstring). The KV
    cache holds a prompt once per group of num_generations completions when prefix caching shares it."""
    arch, tp = t.mem.arch, t.rollout_tp
    weights = vllm_weight_bytes(t.mem, tp)
    per_engine = t.generation_batch / t.replicas
    mean = t.completion_tokens
    # the round waits for every engine: its longest completion is the longest of all generation_batch of them
    longest = longest_of(t.generation_batch, mean, t.max_completion) if t.completion_given else float(
        t.max_completion)
    prompt_kv = t.prompt_tokens / (t.num_generations if t.prefix_caching else 1)
    per_sequence = arch.kv_bytes_per_token() * (prompt_kv + mean) + arch.linear_state_bytes()
    fits = kv_budget_bytes(t, weights) * tp / per_sequence
    if fits < 1:  # vLLM cannot start (the memory check says so): timed as if its budget held the round
        fits = per_engine
    concurrency = max(1.0, min(per_engine, t.max_num_seqs, fits))
    steps = max(per_engine / concurrency, 1.0) * mean + (longest - mean)
    batch = per_engine * mean / steps
    fixed = efficiency.DECODE_STEP_S + (arch.num_hidden_layers * efficiency.EAGER_LAYER_S if t.eager else 0.0)
    context = t.prompt_tokens + mean / 2
    step = decode_step_s(t, weights, batch, context, tp, fixed)
    read, compute = decode_parts(t, weights, batch, context, tp)
    prefill = chunked_prefill_s(t, prefill_s(t, per_engine, tp, t.prefix_caching), steps, read, compute)
    env = t.turns * t.env_s_per_turn
    return Rollout(prefill + steps * step + env, prefill, steps * step, per_engine, concurrency, steps, step, longest,
                   env_s=env)


# Kernels transformers' eager decoder launches for one token in one layer, counted in its Llama/Qwen2 modeling code
# with sdpa attention: two RMSNorms (pow, mean, rsqrt, mul, weight: 5 each), q/k/v/o projections (4), rotary
# embedding on q and k (8), the KV cache's two torch.cat (2), sdpa (3), gate/up/down (3), SiLU and the product (2),
# two residual adds (2). A PEFT LoRA linear adds dropout, A, B, the scale and the add (5) to each adapted linear; a
# bitsandbytes 4-bit linear dequantises its weight first (1). An MoE layer runs its router (4) and, per expert its
# tokens route to, the indexing, gate/up/down, activation, product, weighting and index_add (9).
KERNELS_PER_LAYER = 34
KERNELS_PER_LORA_LINEAR = 5
KERNELS_PER_EXPERT = 9
KERNELS_ROUTER = 4
LINEARS_PER_LAYER = 7


def generate_kernels(t: TimeInputs, batch: float) -> float:
    """Kernels one decoding step of generate() launches (see KERNELS_PER_LAYER)."""
    i, arch = t.mem, t.mem.arch
    per_layer = KERNELS_PER_LAYER + (LINEARS_PER_LAYER if i.quant else 0)
    if not i.full:
        per_layer += LINEARS_PER_LAYER * KERNELS_PER_LORA_LINEAR
    if arch.num_experts:
        per_layer += KERNELS_ROUTER + KERNELS_PER_EXPERT * arch.num_experts * expert_read_share_of_experts(arch, batch)
    return arch.num_hidden_layers * per_layer


def dequantised_bytes(t: TimeInputs, batch: float) -> float:
    """Bytes a decoding step of generate() moves beyond the packed weights when the linears are quantised
    (bitsandbytes): each linear it uses is dequantised into a 16-bit copy (written) that the matmul then reads."""
    i = t.mem
    if not i.quant:
        return 0.0
    linears = sum(fan_in * fan_out * count for _, fan_in, fan_out, count in i.arch.linears())
    return 2 * 2 * linears * expert_read_share(t, batch)


def generate_rollout(t: TimeInputs) -> Rollout:
    """A round on transformers' generate(): each GPU decodes its micro-batch × steps_per_generation completions in one
    batch until the longest ends (finished ones stay in the batch), reading its whole model every step; under ZeRO-3
    the whole model is gathered first (ds3_gather_for_generation). Per token it launches every kernel of the module
    tree from Python (generate_kernels × GENERATE_KERNEL_S, no CUDA graphs) and, for a quantised model, moves each
    dequantised weight (dequantised_bytes)."""
    i = t.mem
    batch = float(i.generation_batch)
    # every GPU waits for the slowest: the longest of the round's completions on all of them
    longest = longest_of(batch * t.world, t.completion_tokens, t.max_completion) if t.completion_given else float(
        t.max_completion)
    fixed = generate_kernels(t, batch) * efficiency.GENERATE_KERNEL_S + memory_read_s(dequantised_bytes(t, batch),
                                                                                     t.rollout_gpu)
    step = decode_step_s(t, base_weight_bytes(i), batch, t.prompt_tokens + longest / 2, 1, fixed)
    gather = all_gather_s(i.arch.total_params() * i.compute_bytes, t.gpu, t.gpus_per_node, t.nodes,
                          t.internode_gbs) if i.stage == 3 else 0.0
    prefill = prefill_s(t, batch, 1)
    env = t.turns * t.env_s_per_turn
    return Rollout(gather + prefill + longest * step + env, prefill, longest * step, batch, batch, longest, step,
                   longest, gather, env)


def rollout(t: TimeInputs) -> Rollout:
    return generate_rollout(t) if t.mem.vllm == "none" else vllm_rollout(t)
