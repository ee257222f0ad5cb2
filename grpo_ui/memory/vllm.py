"""vLLM's memory on a GPU (bytes): its weights per tensor-parallel rank, its KV cache, ZeRO-3's gather for
generation, and what stays while it sleeps."""

from __future__ import annotations

from dataclasses import replace

from grpo_ui.memory.inputs import Inputs
from grpo_ui.memory.states import base_weight_bytes

VLLM_OVERHEAD_GIB = 0.5     # vLLM profile activations and sampler buffers beyond weights and KV cache


# vLLM

def vllm_weight_bytes(i: Inputs, tp: int) -> float:
    """vLLM's copy of the weights per GPU: a pre-quantised checkpoint (GPTQ/AWQ/FP8) loads packed, a bitsandbytes
    job's vLLM loads the original 16-bit checkpoint; ÷ TP."""
    packed = i.quant and not i.quant.startswith("bnb")
    per = replace(i, quant=i.quant if packed else "", compute_bytes=max(i.compute_bytes, 2.0) if not packed else
                  i.compute_bytes, kbit_fp32=False)
    return base_weight_bytes(per) / tp


def vllm_kv(i: Inputs, tp: int, seqs: int, max_len: int) -> float:
    """KV cache for seqs × max_len tokens (2 × full-attention layers × kv_heads × head_dim × 2 B per token, heads
    split over TP) plus each sequence's linear-attention state (hybrid models)."""
    return seqs * (max_len * i.arch.kv_bytes_per_token() + i.arch.linear_state_bytes()) / tp


def zero3_generation_gather(i: Inputs) -> float:
    """ZeRO-3 without vLLM: generation runs the training model with every parameter gathered (ms-swift's and TRL's
    ds3_gather_for_generation, default True: unwrap_model_for_generation(gather_deepspeed3_params=True)), so the
    whole model sits on each GPU beside its partition while it generates (bytes beyond the partition)."""
    if i.stage != 3 or i.weights_offloaded:
        return 0.0
    return base_weight_bytes(i) * (1 - 1 / i.world)


def vllm_asleep(i: Inputs, reserve: float) -> float:
    """GPU memory a colocated vLLM keeps while the trainer trains (bytes): its whole reservation at sleep_level 0,
    nothing of its weights or KV cache at sleep levels 1 and 2.

    With enable_sleep_mode vLLM allocates its weights and KV cache through CuMemAllocator (vllm/device_allocator/
    cumem.py, tags "weights" and "kv_cache"); the worker's sleep(level) unmaps every tagged allocation, copying the
    "weights" ones to CPU first at level 1 (vLLM docs, 'Sleep Mode'). What vLLM allocated outside the pool (CUDA
    graphs, a few hundred MiB) is not counted.
    """
    return reserve if i.sleep_level == 0 else 0.0
