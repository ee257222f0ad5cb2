"""Dynamic memory per GPU (bytes): activations, logits, the vision tower, dequantisation and step temporaries,
extra models."""

from __future__ import annotations

import math
from dataclasses import replace

from grpo_ui.memory.inputs import ExtraModel, Inputs
from grpo_ui.memory.states import fsdp_upcasts, model_states

# Activations are 16-bit under mixed precision even when the weights are fp32: ms-swift trains fp32 weights under fp16
# autocast (ModelArguments._init_mixed_precision), TRL under bf16 (GRPOConfig bf16 defaults to True).
ACT_BYTES = 2
# Gradient checkpointing: one layer is recomputed and back-propagated at a time; its saved activations plus the
# gradients its backward creates peak at 1.15 (full tuning) to 1.4 (LoRA under autocast) × the layer's saved
# activations (measured on CPU with transformers 5 and PEFT: tests/test_memory_physics.py).
CKPT_RECOMPUTE = 1.3


# Dynamic memory (bytes): activations, logits, vision tower

def tokens(i: Inputs) -> float:
    """Tokens one GPU holds per micro-step: micro-batch × (prompt + completion), split by sequence parallelism."""
    return i.micro_batch * (i.prompt_len + i.completion_len) / i.sequence_parallel


# What autograd keeps for backward, in bytes per token, read from transformers' decoder layers and PEFT's LoRA layer
# and checked against the tensors PyTorch actually saves (tests/test_memory_physics.py runs them on the CPU). Rules:
# a linear keeps its input only if its weight trains (autograd saves what the gradients it must compute need); an
# RMSNorm keeps an fp32 copy of its input and, when its weight trains, its normalised output; under autocast every
# linear casts its input to 16-bit on its own (no cache for activations), so linears sharing an fp32 input keep one
# copy each; the attention kernel (flash or sdpa) keeps q, k, v and its output.

def _norm(i: Inputs, dim: int) -> float:
    """An RMSNorm's saved tensors: its input upcast to fp32, plus the normalised output in the residual dtype when the
    norm's weight trains (full tuning)."""
    return 4 * dim + (i.compute_bytes * dim if i.full else 0)


def _linear_inputs(i: Inputs, dim: int, users: int) -> float:
    """The input ``users`` trained linears share: one 16-bit tensor, or one cast copy each when fp32 weights run
    under autocast; nothing when the linears are frozen (LoRA: see _lora_inputs)."""
    if not i.full:
        return 0.0
    return ACT_BYTES * dim * (users if i.compute_bytes > ACT_BYTES else 1)


def _lora_inputs(i: Inputs, linear_attention: bool) -> float:
    """What LoRA adds to a frozen layer: lora_A keeps its (dropped-out) input and lora_B its r-wide input.

    PEFT casts the input to the adapters' dtype; with fp32 adapters under autocast lora_A then keeps a 16-bit cast
    copy per adapted linear; with adapters in the model dtype (DeepSpeed, TRL >= 1.0 QLoRA, FSDP2's all-gather in the
    compute dtype) it keeps the input itself,
    which q/k/v (and gate/up) share and which the attention kernel already keeps for o_proj. lora_dropout > 0 makes a
    new tensor per adapted linear plus its 1-byte mask (CUDA's fused dropout)."""
    if i.full:
        return 0.0
    a = i.arch
    attn = {"in_proj_qkvz", "in_proj_ba", "out_proj"} if linear_attention else {"q_proj", "k_proj", "v_proj", "o_proj"}
    adapted = [(name, fan_in) for name, fan_in, _, _ in a.linears()
               if name in i.lora_targets and name in attn | {"gate_proj", "up_proj", "down_proj"}]
    routed = {"gate_proj", "up_proj", "down_proj"} if a.num_experts else set()
    per = {name: (a.num_experts_per_tok if name in routed else 1) for name, _ in adapted}
    lora_b = sum(ACT_BYTES * i.lora_rank * per[name] for name, _ in adapted)
    if i.lora_dropout > 0 or i.adapter_compute_bytes > ACT_BYTES:
        copy = ACT_BYTES + (1 if i.lora_dropout > 0 else 0)
        return lora_b + sum(copy * fan_in * per[name] for name, fan_in in adapted)
    names = {name for name, _ in adapted}
    shared = (a.hidden_size if names & {"q_proj", "k_proj", "v_proj", "in_proj_qkvz", "in_proj_ba"} else 0) + (
        a.hidden_size if names & {"gate_proj", "up_proj"} else 0)
    down = (a.moe_intermediate_size if a.num_experts else a.intermediate_size) * (a.num_experts_per_tok or 1)
    return lora_b + ACT_BYTES * (shared + (down if "down_proj" in names else 0))


def layer_activation_bytes(i: Inputs, linear_attention: bool = False) -> float:
    """Bytes one decoder layer keeps for backward per token (16-bit activations, residual in the weights' dtype):

    - attention: the input norm, q/k/v's input, q/k norms, q, k, v and the kernel's output (o_proj's input), the
      output gate; eager attention adds its scores and probabilities (heads × s × (2·2 + 1) B: Korthikanti's 5·a·s);
    - Gated DeltaNet: the norm, the projections' input, the projections (2·k + 2·v), the convolved q/k/v (2·k + v),
      the core output and its gated norm (2·v), the decay/beta gates (2·Hv) and the chunked scan's per-chunk
      matrices (64 per value head);
    - gated MLP: the norm, gate/up's input, gate, act(gate) and up (3·i) and down's input (i) when it trains; MoE:
      each token's top-k routed copies, the router logits in fp32 (4·E B), a shared expert;
    - LoRA's adapter inputs (_lora_inputs)."""
    a, b = i.arch, ACT_BYTES
    h, q, kv = a.hidden_size, a.num_attention_heads * a.hd, a.num_key_value_heads * a.hd
    if linear_attention:
        k = a.linear_num_key_heads * a.linear_key_head_dim
        v = a.linear_num_value_heads * a.linear_value_head_dim
        hv = a.linear_num_value_heads
        attn = _norm(i, h) + _linear_inputs(i, h, 2) + b * ((2 * k + 2 * v) + (2 * k + v) + 2 * v + 2 * hv + 64 * hv)
    else:
        attn = _norm(i, h) + _linear_inputs(i, h, 3) + b * (2 * q + 2 * kv) + (b * q if a.attn_output_gate else 0)
        if a.qk_norm:
            attn += _norm(i, q) - (i.compute_bytes - b) * q * i.full + _norm(i, kv) - (i.compute_bytes - b) * kv * i.full
        if i.attn == "eager":
            attn += a.num_attention_heads * (i.prompt_len + i.completion_len) * (2 * b + 1)
    if a.num_experts:
        expert = _linear_inputs(i, h, 2) + b * 3 * a.moe_intermediate_size + (b * a.moe_intermediate_size * i.full)
        mlp = _norm(i, h) + _linear_inputs(i, h, 1) + 4 * a.num_experts + a.num_experts_per_tok * expert
        if a.shared_expert_intermediate_size:
            s_i = a.shared_expert_intermediate_size
            mlp += _linear_inputs(i, h, 2) + b * 3 * s_i + b * s_i * i.full
    else:
        mlp = _norm(i, h) + _linear_inputs(i, h, 2) + b * 3 * a.intermediate_size + b * a.intermediate_size * i.full
    return attn + mlp + _lora_inputs(i, linear_attention)


def _layers(i: Inputs) -> tuple[float, float]:
    """(all layers' saved bytes, the largest layer's) per token."""
    a = i.arch
    full = layer_activation_bytes(i)
    linear = layer_activation_bytes(i, linear_attention=True) if a.linear_attention_layers else 0.0
    return a.full_attention_layers * full + a.linear_attention_layers * linear, max(full, linear)


def activations(i: Inputs) -> float:
    """Saved activations of one micro-batch at the training peak (bytes).

    Without checkpointing every layer keeps what layer_activation_bytes lists until its backward runs, and the peak
    comes as the loss's backward starts (the logits' term on top). With gradient checkpointing each layer keeps only
    its input (the residual stream: h in the weights' dtype) and one layer at a time is recomputed and back-propagated
    (CKPT_RECOMPUTE × its saved bytes); the logits are freed before any layer is recomputed, so only the recomputed
    layer's excess over the logits' peak adds. The final norm adds _norm(h) per token."""
    a = i.arch
    stored, largest = _layers(i)
    edges = tokens(i) * _norm(i, a.hidden_size)
    if i.grad_ckpt:
        inputs = a.num_hidden_layers * tokens(i) * a.hidden_size * i.compute_bytes
        return inputs + edges + max(0.0, CKPT_RECOMPUTE * largest * tokens(i) - logits(i))
    return stored * tokens(i) + edges


def vision_activations(i: Inputs) -> float:
    """The vision tower's activations for the micro-batch's images (bytes): (vision tokens × merge²) patches per
    sequence, each ViT layer saving like a dense layer (7·h + 4·i elements per patch, 16-bit). A frozen tower
    (ms-swift's freeze_vit default) runs without saving anything: one layer's forward is live at a time, twice for its
    output; a trained one saves every layer, or only layer inputs under vit_gradient_checkpointing."""
    v = i.arch.vision
    if not v or not i.image_tokens:
        return 0.0
    patches = i.micro_batch * i.image_tokens * v.spatial_merge_size ** 2
    layer = patches * (7 * v.hidden_size + 4 * v.intermediate_size) * ACT_BYTES
    if not i.vit_trainable:
        return 2 * layer
    if i.vit_ckpt:
        return v.depth * patches * v.hidden_size * ACT_BYTES + CKPT_RECOMPUTE * layer
    return (v.depth + 1) * layer


def logits(i: Inputs) -> float:
    """Logits and what the loss keeps of them at their peak (bytes), over E = micro-batch × scored tokens × vocab
    (÷ SP).

    - GRPO (ms-swift and TRL: logits[:, -(C+1):-1], the sampling temperature, TRL's selective_log_softmax one
      sequence at a time). Without DeepSpeed, accelerate's native AMP wraps the model's forward in
      convert_outputs_to_fp32, so the logits reach the loss in fp32, where selective_log_softmax gathers and keeps
      each row for its logsumexp: 16 B per logit at the backward's peak. Under DeepSpeed they stay 16-bit: the logits
      and their temperature-scaled copy, then every row's log-softmax kept for backward, 2 × 2 B; ms-swift >= 4.2 and
      TRL >= 1.0 divide in place (logits.div_), and autograd then rebuilds the gradient of the whole logits tensor
      through CopySlices besides the rows' gradients, 4 × 2 B. (All measured on CPU, tests/test_memory_physics.py.)
    - SFT cross entropy: 12 B per logit, whether the loss upcasts the 16-bit logits (transformers 5's
      ForCausalLMLoss) or the head does (transformers < 4.45: ``logits = logits.float()``, then a shifted contiguous
      copy): three fp32 tensors of the logits' size at the peak, the returned logits being dropped before backward
      (Soup#610; measured on CPU, tests/test_memory_physics.py). transformers 4.46-4.49 upcast inside the loss
      function while the model still holds its 16-bit logits: 14 B at the forward's end, not modelled.
    - Liger's fused linear losses work in chunks and never materialise them: one sequence's fp32 logits and their
      gradient (GRPO), liger_cross_entropy (SFT).
    """
    v = i.arch.vocab_size
    scored = i.micro_batch * (i.completion_len + (1 if i.loss == "grpo" else 0)) / i.sequence_parallel
    if i.liger and i.loss == "grpo":
        return min(scored, i.completion_len + 1) * v * 4 * 2
    if i.liger:
        return liger_cross_entropy(i, scored)
    if i.loss == "grpo":
        per_logit = (4 if i.logits_inplace else 2) * ACT_BYTES if i.deepspeed else 16
        return per_logit * scored * v
    return 3 * 4 * scored * v


def liger_cross_entropy(i: Inputs, tokens: float) -> float:
    """Liger's fused linear cross entropy (liger_kernel/ops/fused_linear_cross_entropy.py) computes the loss and its
    gradients inside the forward, one chunk of tokens at a time: chunk = the power of two at or above
    BT / ceil(V / h) tokens, so one chunk's 16-bit logits are about the size of the hidden states. It keeps for the
    backward the hidden states' gradient (BT × h, 16-bit), the per-token loss (fp32) and, when lm_head trains, its
    gradient (V × h, the weights' dtype). Bytes at the backward's start, the chunk included."""
    a = i.arch
    chunk = 2 ** math.ceil(math.log2(max(1.0, math.ceil(tokens / math.ceil(a.vocab_size / a.hidden_size)))))
    kept = tokens * (a.hidden_size * ACT_BYTES + 4) + (a.vocab_size * a.hidden_size * i.compute_bytes if i.full else 0)
    return min(chunk, tokens) * a.vocab_size * ACT_BYTES + kept


def dequant_buffers(i: Inputs) -> float:
    """Quantised linears are dequantised to the compute dtype for each matmul (bitsandbytes matmul_4bit:
    F.dequantize_4bit, GPTQ/AWQ training kernels): the largest linear's weight, live in the forward and again in the
    backward (bytes)."""
    return 2 * i.arch.largest_linear() * i.compute_bytes if i.quant else 0.0


def largest_trainable_tensor(i: Inputs) -> int:
    """Elements of the largest trainable parameter: the embedding or lm_head (V·h) or a linear weight for full
    tuning, the largest LoRA matrix (r × the wider side of its linear) otherwise."""
    if i.full:
        return max(i.arch.vocab_size * i.arch.hidden_size, i.arch.largest_linear())
    sides = [max(fan_in, fan_out) for name, fan_in, fan_out, _ in i.arch.linears() if name in i.lora_targets]
    return i.lora_rank * max(sides) if sides else 0


def step_temporaries(i: Inputs, trainable: int) -> float:
    """Memory the optimizer step allocates on top of the model states (bytes), while activations are freed.

    Plain torch AdamW (foreach, the default on CUDA) works on whole tensor lists and "uses roughly sizeof(params)
    more peak memory" (PyTorch torch.optim docs, 'Algorithms'): trainable × grad bytes (FSDP: of the fp32 shard).
    DeepSpeed ZeRO-1/2 (stage_1_and_2.py step) builds the fp32 gradient of its partition as
    flatten(averaged_gradients).to(fp32): a bf16 flat copy (2 B) and its fp32 cast (4 B) while the bf16 gradients are
    still held, 6 B × trainable ÷ world; ZeRO-3 does the same per sub-group (sub_group_size 1e9 elements). Before
    that, the gradient norm (get_grad_norm_direct) casts one gradient tensor at a time to fp64: 8 B × the largest
    trainable tensor (or the partition, if smaller; ZeRO-3: its 1/world slice). ZeRO-0's BF16_Optimizer steps on
    its fp32 copies in place (the norm's fp64 copy only).
    """
    largest = largest_trainable_tensor(i)
    if not i.deepspeed:
        grad_b = (4.0 if fsdp_upcasts(i) else i.compute_bytes) if i.full else i.adapter_bytes
        return trainable * grad_b / (i.world if i.fsdp else 1)
    if i.zero.offload_optimizer:
        return 0.0  # the step runs on the CPU
    if i.stage == 0:
        return 8 * largest
    partition = trainable / i.world
    if i.stage == 3:
        return max(6 * min(1e9, partition), 8 * largest / i.world)
    return max(6 * partition, 8 * min(largest, partition))


def autocast_cache(i: Inputs, trainable: int) -> float:
    """16-bit copies of fp32 trainable weights that autocast keeps for the forward and backward (bytes).

    Without DeepSpeed, HF Trainer runs the forward under torch.autocast; autocast caches the cast of every fp32 leaf
    tensor that requires grad (aten/src/ATen/autocast_mode.cpp, cached_cast) and the matmuls save those copies for
    backward: PEFT's fp32 LoRA adapters (trainable × 2 B), or every linear weight of a fully tuned fp32 model (the
    decoder's linears and an untied lm_head). DeepSpeed casts the module itself, FSDP2 all-gathers every parameter in
    the compute dtype; 16-bit weights need no cast.
    """
    if i.deepspeed or i.fsdp:
        return 0.0
    if i.full:
        a = i.arch
        linears = sum(fan_in * fan_out * count for _, fan_in, fan_out, count in a.linears())
        lm_head = 0 if a.tie_word_embeddings else a.vocab_size * a.hidden_size
        return (linears + lm_head) * ACT_BYTES if i.compute_bytes > ACT_BYTES else 0.0
    return trainable * ACT_BYTES if i.adapter_bytes > ACT_BYTES else 0.0


def extra_model_bytes(i: Inputs, model: ExtraModel) -> float:
    """A reference / reward / teacher model in the model dtype, sharded like the policy (ms-swift prepares them with
    the same DeepSpeed config; ZeRO-3 offload and FSDP offload keep them in host RAM); a value model also trains:
    its gradients and AdamW states as for a fully tuned policy."""
    p = model.arch.total_params()
    if i.weights_offloaded:
        return 0.0
    weights = p * i.compute_bytes / (i.world if i.shards_weights else 1)
    if not model.trainable:
        return weights
    states = model_states(replace(i, arch=model.arch, full=True, quant=""))
    return states["weights"] + states["grads"] + states["optimizer"]
