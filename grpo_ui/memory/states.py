"""Model states per GPU (bytes): weights, gradients, optimizer states and the buffers of ZeRO and FSDP sharding."""

from __future__ import annotations

from dataclasses import replace

from grpo_ui.memory.inputs import Inputs

# Model states (bytes)

def lora_params(i: Inputs) -> int:
    """r × (in + out) per adapted linear (A: in×r, B: r×out), once per layer and per MoE expert it appears in."""
    return sum(i.lora_rank * (fan_in + fan_out) * count for name, fan_in, fan_out, count in i.arch.linears()
               if name in i.lora_targets)


def base_weight_bytes(i: Inputs) -> float:
    """The base model's weights. Quantisation packs only the decoder's linear layers (bitsandbytes replaces nn.Linear
    and keeps lm_head: transformers' get_keys_to_not_convert; GPTQ/AWQ checkpoints quantise the decoder linears);
    embeddings, norms, lm_head and the vision tower stay in the model dtype, or fp32 after PEFT's
    prepare_model_for_kbit_training (which TRL calls for quantised models: it upcasts every non-int8 parameter)."""
    p = i.arch.total_params()
    if not i.quant:
        return p * i.compute_bytes
    linears = sum(fan_in * fan_out * count for _, fan_in, fan_out, count in i.arch.linears())
    rest = 4.0 if i.kbit_fp32 else i.compute_bytes
    return linears * i.param_bytes + (p - linears) * rest


def fsdp_upcasts(i: Inputs) -> bool:
    """Whether FSDP2 keeps 16-bit parameters in fp32. ms-swift's FSDP runs through accelerate, whose fsdp2_prepare_model
    upcasts parameters to fp32 when mixed precision is on ("according to deepspeed's implementation"): the whole model
    from FSDP2 support (accelerate 1.6) to 1.12, only parameters that require grad from 1.13 (accelerate#3848,
    2025-11-26). The shards stay fp32; MixedPrecisionPolicy all-gathers them in the compute dtype."""
    return bool(i.fsdp) and i.compute_bytes < 4


def model_states(i: Inputs) -> dict[str, float]:
    """Weights, gradients and optimizer states per GPU (bytes).

    Full tuning, plain DDP (HF Trainer): params, grads and AdamW's two states in the param dtype: 2 + 2 + 4 B (fp32:
    4 + 4 + 8). FSDP2 shards them over the world with the parameters upcast to fp32 (fsdp_upcasts): 4 + 4 + 8 B.
    DeepSpeed with bf16 keeps an fp32 master copy and AdamW states
    in the optimizer (12 B): ZeRO-1 shards them, ZeRO-2 the 2 B gradients too, ZeRO-3 the weights as well; ZeRO-0
    runs DeepSpeed's BF16_Optimizer, which also accumulates fp32 gradients (bf16_optimizer.py
    fp32_groups_gradients): 2 + 2 + 4 + 12 B, unsharded.
    LoRA: the frozen base keeps its weights (sharded by ZeRO-3/FSDP; fp32 under FSDP2 before accelerate 1.13). PEFT
    keeps adapters in fp32 (fp32 grads, 8 B AdamW); DeepSpeed casts the whole module, adapters included, to bf16
    (engine.py _configure_distributed_model) with the fp32 master in its optimizer: 2 + 2 + 12 B per adapter parameter.
    """
    w = i.world
    shard = w if i.shards_weights else 1
    upcast = fsdp_upcasts(i) and not i.quant and (i.full or i.fsdp_fp32_frozen)
    stored = replace(i, compute_bytes=4.0) if upcast else i
    weights = 0.0 if i.weights_offloaded else base_weight_bytes(stored) / shard
    offload_opt = bool(i.zero and i.zero.offload_optimizer) or bool(i.fsdp and i.fsdp.offload)
    if i.full:
        trainable = i.arch.total_params()
        b = stored.compute_bytes
        if i.deepspeed:
            grad_b, opt_b = (b + 4.0 if i.stage == 0 else b), (12.0 if b == 2 else 8.0)
        else:
            grad_b, opt_b = b, 2 * b
    else:
        trainable = lora_params(i)
        adapter_b = i.adapter_bytes
        weights += trainable * adapter_b / shard
        grad_b, opt_b = adapter_b, (12.0 if i.deepspeed else 2 * adapter_b)
    grad_shard = w if (i.stage >= 2 or i.fsdp) else 1
    opt_shard = w if (i.stage >= 1 or i.fsdp) else 1
    grads = 0.0 if (i.fsdp and i.fsdp.offload) else trainable * grad_b / grad_shard
    optim = 0.0 if offload_opt else trainable * opt_b / opt_shard
    return {"weights": weights, "grads": grads, "optimizer": optim, "trainable": trainable}


def live_gradients(i: Inputs, grads: float) -> float:
    """The gradients alive at the training phase's peak (bytes). HF Trainer zeroes them after every optimizer step
    with set_to_none (torch's default), so with one micro-step per step they are None when the loss's backward starts
    and its peak comes (the optimizer-step phase holds them all); gradient accumulation keeps them from the first
    micro-step on, and DeepSpeed keeps its gradient partition allocated."""
    return grads if (i.deepspeed or i.grad_accum > 1) else 0.0


def sharding_buffers(i: Inputs, trainable: int) -> float:
    """Communication and gather buffers (bytes).

    - Plain DDP on more than one GPU: the Reducer's flat gradient buckets copy every trainable gradient (torch
      reducer.cpp initialize_buckets; HF Trainer leaves gradient_as_bucket_view off): trainable × grad bytes.
    - DeepSpeed ZeRO-0/1/2: the reduce bucket (doubled by overlap_comm, stage_1_and_2.py ipg_buffer) and the
      allgather bucket, in bf16, each at most the trainable count.
    - ZeRO-3: zero3_buffers.
    - FSDP2: the current layer gathered unsharded plus the next one prefetched (2 layers), and the current layer's
      unsharded gradients before reduce-scatter when it trains.
    """
    b = i.compute_bytes
    if i.fsdp:
        layer = i.arch.layer_params() * b
        return 2 * layer + (layer if i.full else 0)
    if i.stage == 3:
        return zero3_buffers(i)
    if i.deepspeed:
        reduce = min(i.zero.reduce_bucket_size or 2e8, trainable) * (2 if i.zero.overlap_comm else 1)
        gather = min(i.zero.allgather_bucket_size or 2e8, trainable) if i.stage else 0
        return (reduce + gather) * 2
    if i.world > 1:
        return trainable * (i.compute_bytes if i.full else i.adapter_bytes)
    return 0.0


def zero3_prefetch_elements(i: Inputs) -> float:
    """ZeRO-3's stage3_prefetch_bucket_size (elements): the DeepSpeed config's, else the job's default (ms-swift's
    GRPO config sets 0, swift sft keeps transformers' 'auto', 0.9·h²); 0 without ZeRO-3."""
    if i.stage != 3:
        return 0.0
    return i.zero.prefetch_bucket_size if i.zero.prefetch_bucket_size is not None else i.zero3_prefetch


def zero3_buffers(i: Inputs) -> float:
    """ZeRO-3 memory beyond the partitions at the logits peak (bytes, model dtype), from DeepSpeed's stage 3:

    - gathered parameters: the lm_head (V·h) is all-gathered for its forward and, its next use being its own backward,
      kept until then (partitioned_param_coordinator.py __params_to_release: parameters reused within
      stage3_max_reuse_distance, 1e9 in ms-swift's zero3.json, are not released); a decoder layer recomputed for
      backward is kept the same way while within that distance, so at most max(V·h, one layer);
    - prefetch (fetch_sub_module): whole parameters of the next modules until stage3_prefetch_bucket_size elements,
      capped by stage3_max_live_parameters, the last one overshooting by at most one linear weight;
    - reduce bucket (stage3.py __init__, contiguous_gradients): reduce_bucket_size, 'auto' = h²;
    - full tuning: a gradient larger than the bucket is reduced from its own full-size tensor (__add_grad_to_ipg_bucket),
      the lm_head's V·h at the logits peak.
    """
    a = i.arch
    lm_head = a.vocab_size * a.hidden_size
    prefetch = zero3_prefetch_elements(i)
    prefetch = min(prefetch, i.zero.max_live_parameters) + a.largest_linear() if prefetch else 0.0
    bucket = i.zero.reduce_bucket_size or a.hidden_size ** 2
    elements = max(lm_head, a.layer_params()) + prefetch + bucket + (lm_head if i.full else 0)
    return elements * i.compute_bytes
