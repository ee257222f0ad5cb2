"""The trainer's side of a megatron rlhf round (seconds per round): the log-prob forwards and the training steps
through Megatron-Core's parallel layout, and the weights' way to vLLM. Pure functions over ``TimeInputs`` whose
memory inputs carry a Megatron ``Layout`` (memory/layout.py); the rollout is timed as for every job (rollout.py).

Compute as training.py counts it (2 FLOPs per active matmul parameter and token forward, twice that backward, LoRA's
backward once, attention's 4·layers·context·heads·head_dim), split over the GPUs of one model replica: each GPU of a
pipeline stage does 1/(TP·CP) of its layers' work (experts: the tokens it holds × k routed copies), each stage 1/PP
of the layers. Recomputation adds a forward (full) or core attention's forward (selective). The work runs at the share
of the peak Megatron-Core reaches (efficiency.MEGATRON_MFU) and an MoE's routed experts at a share of that
(efficiency.MEGATRON_EXPERT_EFFICIENCY), both set from ms-swift's published megatron sft step times. On top, what
Megatron-Core moves and does not hide by default (ms-swift 4.6 leaves tp_comm_overlap and overlap_grad_reduce off):

- tensor parallelism: per layer and micro-batch two all-reduces of the micro-batch's hidden states forward (with
  sequence parallelism a reduce-scatter and an all-gather, the same bytes) and two backward, two more with full
  recomputation, over the TP group's link (NVLink inside a node);
- expert parallelism: per MoE layer and micro-batch an all-to-all to dispatch each token's k copies and one to
  combine them, forward and backward, (EP−1)/EP of the bytes leaving each GPU;
- context parallelism: the ring exchange of K and V chunks per layer (forward; K, V and their gradients backward),
  overlapped with attention by Transformer Engine: only what attention does not cover adds;
- pipeline: the 1F1B schedule's bubble, (PP−1) micro-batch slots idle out of (micro-batches + PP − 1) (÷ VPP
  interleaved: Narayanan et al. 2021), and the activations / gradients sent between stages;
- data parallelism: once per optimizer step the distributed optimizer's reduce-scatter of the fp32 gradients and
  all-gather of the updated 16-bit parameters over the data-parallel group (ZeRO-1's traffic);
- the optimizer: Adam on this GPU's shard (memory-bound), or on the CPU for optimizer_cpu_offload's share
  (efficiency.MEGATRON_CPU_ADAM_PARAMS_S, from ms-swift's published offload figures).
"""

from __future__ import annotations

import math

from grpo_ui.memory.layout import Layout
from grpo_ui.memory.megatron import main_param_bytes, model_states, reference_bytes
from grpo_ui.timing import efficiency
from grpo_ui.timing.inputs import TimeInputs
from grpo_ui.timing.links import GB, all_gather_s, all_reduce_s, host_copy_s, intra_node_gbs, memory_read_s
from grpo_ui.timing.training import attention_flops_per_token, expert_matmul_params, matmul_params
from grpo_ui.timing.transfer import sync_s as send_to_vllm

ACT_BYTES = 2


def _layout(t: TimeInputs) -> Layout:
    assert t.mem.megatron is not None, "Megatron timing needs TimeInputs.mem.megatron"
    return t.mem.megatron


def _group(t: TimeInputs, size: int) -> tuple[int, int]:
    """(GPUs per node, nodes) a process group of ``size`` consecutive ranks spans: inside one node while it fits."""
    per_node = min(size, t.gpus_per_node)
    return per_node, max(1, math.ceil(size / per_node))


def micro_batch_tokens(t: TimeInputs) -> float:
    """Tokens of one micro-batch (micro_batch_size packed sequences of prompt + mean completion)."""
    return t.mem.micro_batch * (t.prompt_tokens + t.completion_tokens)


def _flops(t: TimeInputs, tokens: float, backward: bool) -> tuple[float, float]:
    """A micro-batch's FLOPs over the whole model, forward (and backward with recomputation when training): (outside
    the routed experts, in them)."""
    i, lay, arch = t.mem, _layout(t), t.mem.arch
    context = t.prompt_tokens + t.completion_tokens
    passes, attention = 1, 1
    if backward:
        passes += 2 if i.full else 1
        attention += 2
        if lay.recompute == "full":
            passes, attention = passes + 1, attention + 1
        elif lay.recompute == "selective":
            attention += 1
    experts = tokens * 2 * passes * expert_matmul_params(arch)
    total = tokens * (2 * passes * matmul_params(arch, active=True)
                      + attention * attention_flops_per_token(arch, context / 2))
    return total - experts, experts


def _achieved_flops(t: TimeInputs) -> float:
    """FLOPs per second one GPU reaches under Megatron-Core (efficiency.MEGATRON_MFU of its dense bf16 peak)."""
    return t.gpu.tflops_bf16 * 1e12 * efficiency.MEGATRON_MFU


def _stage_compute_s(t: TimeInputs, backward: bool) -> float:
    """One micro-batch through one pipeline stage on one GPU: its share of the FLOPs at the share of the peak
    Megatron-Core reaches, the routed experts' at efficiency.MEGATRON_EXPERT_EFFICIENCY of that; at least reading the
    stage's weights once per pass."""
    lay = _layout(t)
    dense, experts = _flops(t, micro_batch_tokens(t), backward)
    work = (dense + experts / efficiency.MEGATRON_EXPERT_EFFICIENCY) / (lay.tp * lay.cp * lay.pp)
    weights = model_states(t.mem, 0)["weights"]
    reads = (3 if lay.recompute == "full" else 2) if backward else 1
    return max(work / _achieved_flops(t), memory_read_s(reads * weights, t.gpu))


def _collectives_s(t: TimeInputs, backward: bool) -> float:
    """One micro-batch's TP, EP and CP traffic through one pipeline stage (module docstring)."""
    lay, arch = _layout(t), t.mem.arch
    layers = arch.num_hidden_layers / lay.pp
    tokens = micro_batch_tokens(t) / lay.cp
    rounds = (1 + (2 if lay.recompute == "full" else 1)) if backward else 1  # forward, backward, recomputed forward
    total = 0.0
    if lay.tp > 1:
        per_node, nodes = _group(t, lay.tp)
        hidden = tokens * arch.hidden_size * ACT_BYTES
        mlp = 0 if arch.num_experts else 1  # an MoE layer's MLP exchanges tokens over EP instead
        count = rounds * (1 + mlp) * layers
        total += count * (all_reduce_s(hidden, t.gpu, per_node, nodes, t.internode_gbs)
                          + efficiency.ALLREDUCE_LATENCY_S)
    if arch.num_experts and lay.ep > 1:
        per_node, nodes = _group(t, lay.ep * lay.tp)
        routed = tokens / lay.tp * arch.num_experts_per_tok * arch.hidden_size * ACT_BYTES
        link = intra_node_gbs(t.gpu) if nodes == 1 else t.internode_gbs
        total += rounds * 2 * layers * routed * (lay.ep - 1) / lay.ep / (link * GB)
    if lay.cp > 1:
        per_node, nodes = _group(t, lay.tp * lay.cp)
        link = intra_node_gbs(t.gpu) if nodes == 1 else t.internode_gbs
        kv = tokens * 2 * arch.num_key_value_heads * arch.hd * ACT_BYTES / lay.tp
        ring = layers * (lay.cp - 1) * kv * (3 if backward else 1) / (link * GB)
        attention = (micro_batch_tokens(t) * attention_flops_per_token(arch, t.prompt_tokens + t.completion_tokens)
                     * (3 if backward else 1) / (lay.tp * lay.cp * lay.pp) / _achieved_flops(t))
        total += max(0.0, ring - attention)
    return total


def _p2p_s(t: TimeInputs, backward: bool) -> float:
    """Activations to the next stage (and gradients back): the micro-batch's hidden states (÷ TP with sequence
    parallelism), over NVLink inside a node or the network between nodes."""
    lay = _layout(t)
    if lay.pp == 1:
        return 0.0
    nbytes = micro_batch_tokens(t) / lay.cp * t.mem.arch.hidden_size * ACT_BYTES / (lay.tp if lay.sp else 1)
    crosses_nodes = lay.tp * lay.cp * lay.pp > t.gpus_per_node
    link = t.internode_gbs if crosses_nodes else intra_node_gbs(t.gpu)
    return nbytes * (2 if backward else 1) / (link * GB)


def pipeline_s(t: TimeInputs, micro_batches: int, backward: bool) -> float:
    """``micro_batches`` micro-batches through the pipeline: (m + PP − 1) slots of one stage's work (1F1B; the
    bubble ÷ VPP when interleaved)."""
    lay = _layout(t)
    stage = _stage_compute_s(t, backward) + _collectives_s(t, backward) + _p2p_s(t, backward)
    return (micro_batches + (lay.pp - 1) / lay.vpp) * stage


def bubble_share(t: TimeInputs) -> float:
    """The share of a training step the pipeline idles: (PP−1)/VPP slots of (micro-batches + (PP−1)/VPP)."""
    lay = _layout(t)
    idle = (lay.pp - 1) / lay.vpp
    return idle / (lay.micro_batches + idle)


def _trainable_share(t: TimeInputs) -> tuple[float, float]:
    """(trainable parameters on this GPU, of them the optimizer's shard on this GPU)."""
    i = t.mem
    states = model_states(i, 0)
    trainable = states["trainable"]
    return trainable, (states["optimizer"] + states["cpu_optimizer"]) / main_param_bytes(i)


def grad_sync_s(t: TimeInputs) -> float:
    """The distributed optimizer's reduce-scatter of this GPU's fp32 gradients and all-gather of its 16-bit
    parameters over the data-parallel group (×DP·CP ranks), once per optimizer step (ZeRO-1); a whole all-reduce
    without the distributed optimizer."""
    lay, i = _layout(t), t.mem
    group = lay.dp * lay.cp
    if group <= 1:
        return 0.0
    trainable, _ = _trainable_share(t)
    model_parallel = lay.tp * lay.pp * lay.cp
    per_node = max(1, t.gpus_per_node // min(model_parallel, t.gpus_per_node)) if model_parallel < t.gpus_per_node \
        else 1
    per_node = min(per_node, group)
    nodes = max(1, math.ceil(group / per_node))
    grads = trainable * 4.0 * (1 if lay.distributed_optimizer else 2)
    params = trainable * i.compute_bytes if lay.distributed_optimizer else 0.0
    return all_gather_s(grads + params, t.gpu, per_node, nodes, t.internode_gbs)


def optimizer_s(t: TimeInputs) -> float:
    """Adam on this GPU's shard: ~28 bytes read and written per parameter at the memory bandwidth; the
    optimizer_cpu_offload share on the host's CPU Adam with its gradients down and parameters back."""
    lay = _layout(t)
    _, shard = _trainable_share(t)
    on_cpu = shard * lay.cpu_offload_fraction
    cpu = (on_cpu * t.gpus_per_node / efficiency.MEGATRON_CPU_ADAM_PARAMS_S + host_copy_s(on_cpu * 6.0, t.gpu)
           if on_cpu else 0.0)
    return memory_read_s((shard - on_cpu) * 28, t.gpu) + cpu


def train_s(t: TimeInputs) -> float:
    """The round's optimizer steps (steps_per_round of them), each num_microbatches micro-batches through the
    pipeline forward and backward, then the gradient sync and the optimizer."""
    lay = _layout(t)
    step = pipeline_s(t, lay.micro_batches, backward=True) + grad_sync_s(t) + optimizer_s(t)
    return t.steps_per_round * step


def logprobs_s(t: TimeInputs) -> tuple[float, float]:
    """(old policy, reference) log-probs of the round's completions: a forward-only pass of each micro-batch of the
    round through the pipeline, one micro-batch at a time (ms-swift's _maybe_compute_logps, called per micro-batch,
    runs forward_backward_func on a one-batch iterator: no pipelining across them): the old policy's always, the
    reference's when beta ≠ 0 (a model of its own with full tuning, the policy with its adapter off with LoRA)."""
    forward = max(1, t.steps_per_generation) * pipeline_s(t, 1, backward=False)
    return (forward if t.old_logprobs else 0.0), (forward if t.ref else 0.0)


def sync_s(t: TimeInputs) -> float:
    """The weights to vLLM: mcore-bridge gathers each tensor's TP / EP / PP shards into the HF layout across the
    model-parallel ranks (an all-gather of the whole model over them), then vLLM receives and loads it as for any
    job (transfer.sync_s)."""
    lay, i = _layout(t), t.mem
    if i.vllm == "none":
        return 0.0
    parts = lay.tp * lay.pp * max(lay.ep * lay.etp // lay.tp, 1)
    per_node, nodes = _group(t, min(parts, lay.world))
    gather = all_gather_s(i.arch.total_params() * i.compute_bytes, t.gpu, per_node, nodes, t.internode_gbs) \
        if parts > 1 else 0.0
    return gather + send_to_vllm(t)


def offload_s(t: TimeInputs) -> float:
    """offload_model (this GPU's parameters and the reference model's; the grad buffer is freed, not copied) and
    offload_optimizer (main parameters and moments) to host memory before generation and back after."""
    i = t.mem
    if i.vllm != "colocate" or not (i.offload_model or i.offload_optimizer):
        return 0.0
    states = model_states(i, 0)
    nbytes = (states["weights"] + reference_bytes(i, 0) if i.offload_model else 0.0) + (
        states["optimizer"] if i.offload_optimizer else 0.0)
    return 2 * host_copy_s(nbytes, t.gpu)
