"""Generation time of one round: vLLM (colocated on the training GPUs, or on rollout servers) or transformers'
generate() when vLLM is off.

Each engine (a tensor-parallel group of GPUs) generates its share of the round's completions. Prefill is
compute-bound: 2 · active params · prompt tokens (plus attention) at the GPUs' achievable peak. Decoding is one step per
token, memory-bound at small batches (every step reads the engine's weights ÷ TP, for an MoE the experts its tokens
route to, and the KV cache of every live sequence) and compute-bound at large ones, plus a fixed cost per step (the
scheduler, sampling; kernel launches without CUDA graphs). vLLM runs at most ``max_num_seqs`` sequences at once and no
more than its KV budget holds (util × capacity − its weights), so a large round runs in waves; continuous batching
refills a finished sequence's slot at once, so the decoding steps are the round's tokens ÷ that concurrency, plus the
tail of the longest completion, which the round waits for (max_completion_length unless the user gives a mean).
transformers' generate() decodes its whole batch until the longest sequence ends, finished sequences included.
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


def decode_step_s(t: TimeInputs, weight_bytes: float, batch: float, context: float, tp: int, fixed: float) -> float:
    """One decoding step of ``batch`` sequences of mean ``context`` tokens on a TP group: the larger of reading (the
    weights ÷ TP this batch needs, its KV cache ÷ TP) and computing (2 · active params + attention per token, ÷ TP),
    plus ``fixed`` seconds and, with TP > 1, two all-reduces per layer at NCCL's small-message latency."""
    arch, gpu = t.mem.arch, t.rollout_gpu
    read = weight_bytes * expert_read_share(t, batch) + batch * context * arch.kv_bytes_per_token() / tp
    flops = batch * (2 * matmul_params(arch, active=True) + attention_flops_per_token(arch, context)) / tp
    compute = flops / (gpu.tflops_bf16 * 1e12 * efficiency.MFU)
    latency = 2 * arch.num_hidden_layers * efficiency.ALLREDUCE_LATENCY_S if tp > 1 else 0.0
    return max(memory_read_s(read, gpu), compute) + fixed + latency


def prefill_s(t: TimeInputs, sequences: float, tp: int) -> float:
    """Prompt tokens of ``sequences`` through the model, compute-bound: (2 · active params + attention) per token."""
    arch = t.mem.arch
    flops = sequences * t.prompt_tokens * (2 * matmul_params(arch, active=True)
                                           + attention_flops_per_token(arch, t.prompt_tokens / 2))
    return flops / tp / (t.rollout_gpu.tflops_bf16 * 1e12 * efficiency.MFU)


def kv_budget_bytes(t: TimeInputs, weight_bytes: float) -> float:
    """What one GPU of an engine keeps for the KV cache: util × capacity − its weights − vLLM's overhead (memory
    estimate's vllm terms); nothing when that is negative (the memory estimate reports vLLM cannot start)."""
    util = t.mem.server_util if t.mem.vllm == "server" else t.mem.vllm_util
    capacity = t.rollout_gpu.memory_gib if t.mem.vllm == "server" else (t.mem.capacity_gib or t.gpu.memory_gib)
    return max(util * capacity * GIB - weight_bytes - VLLM_OVERHEAD_GIB * GIB, 0.0)


def vllm_rollout(t: TimeInputs) -> Rollout:
    """A round on vLLM: every engine generates generation_batch ÷ engines completions (module docstring)."""
    arch, tp = t.mem.arch, t.rollout_tp
    weights = vllm_weight_bytes(t.mem, tp)
    per_engine = t.generation_batch / t.replicas
    mean = t.completion_tokens
    longest = longest_of(per_engine, mean, t.max_completion) if t.completion_given else float(t.max_completion)
    per_sequence = arch.kv_bytes_per_token() * (t.prompt_tokens + mean) + arch.linear_state_bytes()
    fits = kv_budget_bytes(t, weights) * tp / per_sequence
    if fits < 1:  # vLLM cannot start (the memory check says so): timed as if its budget held the round
        fits = per_engine
    concurrency = max(1.0, min(per_engine, t.max_num_seqs, fits))
    steps = max(per_engine / concurrency, 1.0) * mean + (longest - mean)
    batch = per_engine * mean / steps
    fixed = efficiency.DECODE_STEP_S + (arch.num_hidden_layers * efficiency.EAGER_LAYER_S if t.eager else 0.0)
    step = decode_step_s(t, weights, batch, t.prompt_tokens + mean / 2, tp, fixed)
    prefill = prefill_s(t, per_engine, tp)
    return Rollout(prefill + steps * step, prefill, steps * step, per_engine, concurrency, steps, step, longest)


def generate_rollout(t: TimeInputs) -> Rollout:
    """A round on transformers' generate(): each GPU decodes its micro-batch × steps_per_generation completions in one
    batch until the longest ends (finished ones stay in the batch), reading its whole model every step; under ZeRO-3
    the whole model is gathered first (ds3_gather_for_generation). Each step's Python and launches cost
    GENERATE_LAYER_S per layer, and per routed expert of an MoE layer (transformers' MoE blocks loop over the experts
    their tokens route to)."""
    i = t.mem
    batch = float(i.generation_batch)
    longest = longest_of(batch, t.completion_tokens, t.max_completion) if t.completion_given else float(
        t.max_completion)
    arch = i.arch
    experts = arch.num_experts * expert_read_share_of_experts(arch, batch) if arch.num_experts else 0.0
    fixed = arch.num_hidden_layers * (1 + experts) * efficiency.GENERATE_LAYER_S
    step = decode_step_s(t, base_weight_bytes(i), batch, t.prompt_tokens + longest / 2, 1, fixed)
    gather = all_gather_s(i.arch.total_params() * i.compute_bytes, t.gpu, t.gpus_per_node, t.nodes,
                          t.internode_gbs) if i.stage == 3 else 0.0
    prefill = prefill_s(t, batch, 1)
    return Rollout(gather + prefill + longest * step, prefill, longest * step, batch, batch, longest, step, longest,
                   gather)


def rollout(t: TimeInputs) -> Rollout:
    return generate_rollout(t) if t.mem.vllm == "none" else vllm_rollout(t)
