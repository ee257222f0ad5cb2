"""Moving the policy around a round (seconds per round): its weights to vLLM after each update, a colocated vLLM's
sleep and wake-up, and ms-swift's offload of the policy and its optimizer states while vLLM generates.

Weight sync, as ms-swift 4.x runs it (rlhf_trainers/rollout_mixin.py _move_model_to_vllm): full tuning, and LoRA
unless vllm_enable_lora, sends the whole (merged) model in 16 bits; LoRA with vllm_enable_lora only the adapters once
the base is there (_move_adapter_to_vllm). Sharded weights (ZeRO-3, FSDP) are gathered first (GatheredParameters per
parameter group). Colocated, vLLM's load_weights takes them from the same GPU (_load_state_dict_to_vllm). In server
mode rank 0 packs them into buckets of SWIFT_UPDATE_WEIGHTS_BUCKET_SIZE MiB (512; utils._create_parameter_buckets),
each flattened into one tensor (a copy on the GPU) and sent with one request to /update_flattened_params/ and an NCCL
broadcast (vllm_client.update_flattened_params) through the network, or over NVLink (PCIe without it) when the
servers run on the trainer's node; the server unflattens it and runs load_weights. load_weights costs a little per
tensor in Python (LOAD_TENSOR_S) and a copy of its bytes.
Sleep (vLLM's sleep mode, ms-swift's sleep_level): level 1 copies vLLM's weights to host memory and back, level 2
discards them (the sync reloads them); both re-map vLLM's memory pool. offload_model / offload_optimizer copy this
GPU's share of the policy / its optimizer states to host memory before generation and back after.
"""

from __future__ import annotations

from grpo_ui.memory.states import lora_params, model_states
from grpo_ui.memory.vllm import vllm_weight_bytes
from grpo_ui.timing import efficiency
from grpo_ui.timing.inputs import TimeInputs
from grpo_ui.timing.links import GB, all_gather_s, host_copy_s, intra_node_gbs, memory_read_s, network_s

BUCKET_BYTES = 512 * 2 ** 20  # ms-swift's SWIFT_UPDATE_WEIGHTS_BUCKET_SIZE default, MiB


def sync_bytes(t: TimeInputs) -> float:
    """What goes to vLLM per sync: the adapters (vllm_enable_lora) or the whole model, in the model dtype."""
    i = t.mem
    params = lora_params(i) if t.adapter_sync else i.arch.total_params()
    return params * i.compute_bytes


def sync_tensors(t: TimeInputs) -> int:
    """Weight tensors one sync hands to load_weights: per layer its linears' weights (biases with qkv_bias) and two
    norms, for an MoE each expert's three. Adapters alone go as one LoRA request (vLLM's add_lora), not through
    load_weights: none."""
    arch = t.mem.arch
    if t.adapter_sync:
        return 0
    per_layer = 7 + 2 + (3 if arch.qkv_bias else 0) + 3 * (arch.num_experts or 0)
    return arch.num_hidden_layers * per_layer + 3


def sync_s(t: TimeInputs) -> float:
    """Gather (sharded weights), send (server: bucket by bucket, each flattened, one request and a broadcast;
    colocated: nothing crosses a link) and load_weights (a copy of the bytes ÷ TP and LOAD_TENSOR_S per tensor)."""
    i = t.mem
    if i.vllm == "none":
        return 0.0
    nbytes = sync_bytes(t)
    gather = all_gather_s(nbytes, t.gpu, t.gpus_per_node, t.nodes, t.internode_gbs) if i.shards_weights else 0.0
    load = memory_read_s(2 * nbytes / t.rollout_tp, t.rollout_gpu) + sync_tensors(t) * efficiency.LOAD_TENSOR_S
    if i.vllm != "server":
        return gather + load
    buckets = max(1, -(-nbytes // BUCKET_BYTES))
    wire = nbytes / (intra_node_gbs(t.gpu) * GB) if t.server_local else network_s(nbytes, t.internode_gbs)
    flatten = memory_read_s(2 * nbytes, t.gpu)
    return gather + flatten + wire + buckets * efficiency.SYNC_REQUEST_S + load


def sleep_wake_s(t: TimeInputs) -> float:
    """A colocated vLLM put to sleep for training and woken for generation (sleep_level 1 or 2)."""
    i = t.mem
    if i.vllm != "colocate" or i.sleep_level == 0:
        return 0.0
    moved = 2 * host_copy_s(vllm_weight_bytes(i, i.vllm_tp), t.gpu) if i.sleep_level == 1 else 0.0
    return moved + efficiency.SLEEP_WAKE_S


def offload_s(t: TimeInputs) -> float:
    """offload_model and offload_optimizer: this GPU's weights / optimizer states to host memory and back."""
    i = t.mem
    if i.vllm != "colocate" or not (i.offload_model or i.offload_optimizer):
        return 0.0
    states = model_states(i)
    nbytes = (states["weights"] if i.offload_model else 0.0) + (states["optimizer"] if i.offload_optimizer else 0.0)
    return 2 * host_copy_s(nbytes, t.gpu)
