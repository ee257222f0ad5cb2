"""Per-GPU memory estimate for a GRPO job: every term, both phases (training step, rollout), and a verdict.

Pure functions, no I/O. GiB = 2**30 bytes. Each term's docstring or comment gives its formula and source:
- model states: ZeRO paper (Rajbhandari et al. 2020) §3 and DeepSpeed's estimate_zero{2,3}_model_states_mem_needs;
- activations: Korthikanti et al. 2022 ("Reducing Activation Recomputation") adapted to gated MLPs and flash attention;
- vLLM: its gpu_memory_utilization budget (vLLM docs, "engine arguments") and the KV-cache size per token;
- GRPO specifics (reference model, logits of completions, sleep levels): ms-swift GRPO docs and rollout_mixin.py;
- optimizer step: PyTorch's foreach AdamW and DeepSpeed's fp32 gradient partition (see step_temporaries);
- DeepSpeed/DDP buffers and dtypes: DeepSpeed's engine.py, stage_1_and_2.py, stage3.py and
  partitioned_param_coordinator.py (v0.16), ms-swift's zero3.json, transformers' 'auto' fill-in, torch's DDP Reducer.
Checked against published measurements: bench/memory_accuracy.py, tests/data/memory_measurements.jsonl.

Known gaps (not yet checked against a measurement): the rollout phase keeps the reference model resident, but
ms-swift's offload_context offloads it with offload_model (grpo_trainer.py from 3.6 on), and under ZeRO-3 offload_model
moves nothing before 4.0 (param.data is empty; rollout_mixin.py moves ds_tensor from 4.0 on); vLLM memory outside its
cuMem pool (CUDA graphs) stays while it sleeps and is not counted; GRPO rows are few (3), one held-out row is 15 % under.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path

from grpo_ui.catalog import Gpu, ModelArch, find_gpu, find_model, from_hf_config
from grpo_ui.spec import JobSpec

GIB = 2 ** 30
CUDA_CONTEXT_GIB = 0.5      # CUDA context + kernels per process (typ. 0.3–0.6 GiB with lazy module loading)
NCCL_GIB = 0.5              # NCCL communicator buffers when world > 1 (channels × NCCL_BUFFSIZE 4 MiB, plus streams)
FRAGMENTATION = 0.08        # caching-allocator fragmentation, fraction of dynamic (activation/logit) memory
VLLM_OVERHEAD_GIB = 0.5     # vLLM profile activations and sampler buffers beyond weights and KV cache
LORA_LINEARS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


@dataclass(frozen=True)
class Term:
    name: str
    gib: float
    formula: str


@dataclass
class Phase:
    name: str  # "training" (forward/backward), "optimizer step" or "rollout"
    terms: list[Term]

    @property
    def total(self) -> float:
        return sum(t.gib for t in self.terms)


@dataclass
class RoleReport:
    """One GPU role (trainer GPU, or rollout-server GPU in server mode)."""

    role: str
    gpu: str | None
    capacity_gib: float | None
    phases: list[Phase]
    notes: list[str] = field(default_factory=list)

    @property
    def peak_gib(self) -> float:
        return max(p.total for p in self.phases)

    @property
    def peak_phase(self) -> str:
        return max(self.phases, key=lambda p: p.total).name

    @property
    def headroom_gib(self) -> float | None:
        return None if self.capacity_gib is None else self.capacity_gib - self.peak_gib

    @property
    def verdict(self) -> str:
        """fits (≤ 90 % of the card), tight (≤ 100 %), oom, or unknown without a GPU model."""
        if self.capacity_gib is None:
            return "unknown"
        if self.peak_gib <= 0.9 * self.capacity_gib:
            return "fits"
        return "tight" if self.peak_gib <= self.capacity_gib else "oom"

    @property
    def wasteful(self) -> bool:
        return self.capacity_gib is not None and self.peak_gib < 0.6 * self.capacity_gib


@dataclass
class MemoryReport:
    model: str
    params_b: float
    roles: list[RoleReport]
    host_ram_gib: dict[str, float]
    assumptions: list[str]

    @property
    def trainer(self) -> RoleReport:
        return self.roles[0]

    @property
    def verdict(self) -> str:
        order = ["oom", "unknown", "tight", "fits"]
        return min((r.verdict for r in self.roles), key=order.index)

    def to_dict(self) -> dict:
        return {"model": self.model, "params_b": round(self.params_b, 3), "verdict": self.verdict,
                "roles": [{"role": r.role, "gpu": r.gpu, "capacity_gib": r.capacity_gib,
                           "peak_gib": round(r.peak_gib, 2), "peak_phase": r.peak_phase, "verdict": r.verdict,
                           "headroom_gib": None if r.headroom_gib is None else round(r.headroom_gib, 2),
                           "notes": r.notes,
                           "phases": [{"name": p.name, "total_gib": round(p.total, 2),
                                       "terms": [dict(asdict(t), gib=round(t.gib, 3)) for t in p.terms]}
                                      for p in r.phases]} for r in self.roles],
                "host_ram_gib": {k: round(v, 1) for k, v in self.host_ram_gib.items()},
                "assumptions": self.assumptions}


class UnknownModel(ValueError):
    """The model's architecture is not known: name it from the catalogue or give its config.json."""


@dataclass(frozen=True)
class Inputs:
    """Everything the estimate needs, as plain numbers (derived from a JobSpec by ``inputs_from_spec``)."""

    arch: ModelArch
    param_bytes: float          # bytes per base weight (2 bf16/fp16, 4 fp32, ~0.56 4-bit, ~1.06 8-bit)
    compute_bytes: float        # bytes per weight of the compute dtype (what quantization leaves unquantized)
    full: bool                  # full tuning (else LoRA-style adapters)
    lora_rank: int
    lora_targets: tuple[str, ...]
    zero_stage: int             # 0 = plain DDP (no DeepSpeed)
    offload_optimizer_ds: bool  # DeepSpeed offload_optimizer (zero*_offload)
    offload_param_ds: bool      # DeepSpeed offload_param (zero3_offload)
    world: int
    nproc: int
    micro_batch: int            # completions per device per micro-step
    prompt_len: int
    completion_len: int
    grad_ckpt: bool
    flash_attn: bool
    liger: bool
    ref_model: bool
    vllm: str                   # "none", "colocate" or "server"
    vllm_util: float
    vllm_tp: int
    vllm_max_len: int
    vllm_max_num_seqs: int
    sleep_level: int
    offload_model: bool
    offload_optimizer: bool
    gpu: Gpu | None
    server_util: float
    server_tp: int
    server_max_len: int
    zero3_prefetch: float = 0.0  # stage3_prefetch_bucket_size (elements): ms-swift GRPO sets 0, HF 'auto' is 0.9·h²


def _zero(deepspeed: str | None) -> tuple[int, bool, bool]:
    """(stage, offload optimizer, offload params) from a preset name or an inline JSON config."""
    if not deepspeed:
        return 0, False, False
    ds = deepspeed.strip()
    if ds.startswith("zero") and ds[4:5].isdigit():
        stage = int(ds[4])
        return stage, ds.endswith("_offload"), ds == "zero3_offload"
    import json
    try:
        cfg = json.loads(ds) if ds.startswith("{") else json.loads(Path(ds).read_text())
        z = cfg.get("zero_optimization", {})
        dev = lambda k: (z.get(k) or {}).get("device", "none") not in ("none", None)  # noqa: E731
        return int(z.get("stage", 0)), dev("offload_optimizer"), dev("offload_param")
    except (OSError, ValueError, AttributeError):
        return 2, False, False  # an unreadable custom config: assume ZeRO-2 and say so in the assumptions


def find_arch(model: str) -> ModelArch:
    arch = find_model(model)
    if arch:
        return arch
    p = Path(model).expanduser()
    if (p / "config.json").is_file():
        return from_hf_config(p, name=p.name)
    raise UnknownModel(f"unknown architecture for {model!r}: pick a catalogue model or import its config.json")


def inputs_from_spec(spec: JobSpec, gpu: str | None = None, arch: ModelArch | None = None) -> Inputs:
    t, r, s = spec.train, spec.rollout, spec.server
    arch = arch or find_arch(t.model or "")
    compute = {"float32": 4.0, "float16": 2.0, "bfloat16": 2.0, None: 2.0}[t.torch_dtype]
    dtype = {4: 0.5625, 8: 1.0625}[t.quant_bits] if t.quant_bits else compute  # packed weights + group scales
    stage, off_opt, off_par = _zero(t.deepspeed)
    nodes = spec.trainer_nodes()
    gpu_name = gpu or (nodes[0].gpu_model if nodes else None)
    spare = spec.spare_rollout_gpus() > 0  # ms-swift 3.2–3.4: vLLM alone on the node's last GPU(s)
    vllm = "none" if not r.use_vllm else ("server" if r.vllm_mode == "server" or spare else "colocate")
    prompt = t.max_length or 1024
    max_len = r.vllm_max_model_len or prompt + t.max_completion_length
    # the GPU vLLM has to itself: a swift rollout server's settings, or the trainer's vLLM flags on a spare GPU
    own_gpu = (r.vllm_gpu_memory_utilization, 1, max_len) if spare else (
        s.vllm_gpu_memory_utilization, s.vllm_tensor_parallel_size, s.vllm_max_model_len or prompt + t.max_completion_length)
    spg = t.steps_per_generation or t.gradient_accumulation_steps or 1
    targets = tuple(LORA_LINEARS) if "all-linear" in t.target_modules else tuple(
        m for m in t.target_modules if m in LORA_LINEARS)
    return Inputs(
        arch=arch, param_bytes=dtype, compute_bytes=compute, full=t.tuner_type == "full", lora_rank=t.lora_rank,
        lora_targets=targets,
        zero_stage=stage, offload_optimizer_ds=off_opt, offload_param_ds=off_par,
        world=max(spec.world_size(), 1), nproc=max(spec.nproc_per_node(), 1),
        micro_batch=t.per_device_train_batch_size, prompt_len=prompt, completion_len=t.max_completion_length,
        grad_ckpt=t.gradient_checkpointing, flash_attn="flash" in (t.attn_impl or "flash_attn") or
        t.attn_impl == "sdpa", liger=t.use_liger_kernel,
        ref_model=t.tuner_type == "full" and (0.04 if t.beta is None else t.beta) > 0,
        vllm=vllm, vllm_util=r.vllm_gpu_memory_utilization, vllm_tp=r.vllm_tensor_parallel_size,
        vllm_max_len=max_len,
        vllm_max_num_seqs=r.vllm_max_num_seqs or t.per_device_train_batch_size * r.vllm_tensor_parallel_size * spg,
        sleep_level=r.sleep_level if vllm == "colocate" else 0, offload_model=r.offload_model and vllm == "colocate",
        offload_optimizer=r.offload_optimizer and vllm == "colocate",
        gpu=find_gpu(gpu_name), server_util=own_gpu[0], server_tp=own_gpu[1], server_max_len=own_gpu[2])


# ---------------------------------------------------------------------------------------------------------------
# Terms (bytes)

def lora_params(i: Inputs) -> int:
    """r × (in + out) per adapted linear, per layer (A: in×r, B: r×out); MoE experts each get their own adapters."""
    shapes = i.arch.linear_shapes()
    per_layer = 0
    for name in i.lora_targets:
        fan_in, fan_out = shapes[name]
        copies = i.arch.num_experts if i.arch.num_experts and name in ("gate_proj", "up_proj", "down_proj") else 1
        per_layer += copies * i.lora_rank * (fan_in + fan_out)
    return per_layer * i.arch.num_hidden_layers


def base_weight_bytes(i: Inputs) -> float:
    """Bytes of the base model's weights. Quantization (QLoRA) packs only the decoder's linear layers: bitsandbytes
    replaces nn.Linear modules and keeps lm_head in the compute dtype (transformers' get_keys_to_not_convert), GPTQ
    checkpoints quantize the decoder linears; embeddings, lm_head and a vision tower stay at compute_bytes."""
    p = i.arch.total_params()
    if i.param_bytes == i.compute_bytes:
        return p * i.param_bytes
    layers = i.arch.num_hidden_layers * i.arch.layer_params()
    return layers * i.param_bytes + (p - layers) * i.compute_bytes


def model_states(i: Inputs) -> dict[str, float]:
    """Weights, gradients and optimizer states per GPU (bytes), following ZeRO's partitioning.

    Full tuning under DeepSpeed (mixed precision): 2 B weights + 2 B grads + 12 B fp32 master, momentum, variance
    = 16 B/param before sharding; stage 1 shards the 12 B, stage 2 also the grads, stage 3 also the weights.
    Without DeepSpeed, HF/ms-swift keep bf16 params with AdamW states in the param dtype: 2 + 2 + 4 B/param.
    LoRA: the frozen base keeps only its weights (sharded by ZeRO-3). Without DeepSpeed the adapters are fp32 (PEFT
    casts them) with fp32 grads and 8 B Adam states. DeepSpeed casts the whole module, adapters included, to the
    compute dtype (engine.py _configure_distributed_model: module.bfloat16()/half()) and accumulates gradients in it
    under ZeRO (engine.py get_data_types), the fp32 master copy living in the optimizer: 2 + 2 + 12 B per adapter.
    """
    p = i.arch.total_params()
    w = i.world
    weights = base_weight_bytes(i)
    if i.zero_stage == 3:
        weights = 0.0 if i.offload_param_ds else weights / w
    if i.full:
        trainable, grad_b = p, i.param_bytes
        opt_b = 12.0 if i.zero_stage or i.param_bytes == 4 else 2 * i.param_bytes
        if i.param_bytes == 4 and not i.zero_stage:
            opt_b = 8.0
    else:
        trainable = lora_params(i)
        adapter_b = i.compute_bytes if i.zero_stage else 4.0
        weights += trainable * adapter_b / (w if i.zero_stage == 3 else 1)
        grad_b, opt_b = adapter_b, (12.0 if i.zero_stage else 8.0)
    grads = trainable * grad_b / (w if i.zero_stage >= 2 else 1)
    optim = 0.0 if i.offload_optimizer_ds else trainable * opt_b / (w if i.zero_stage >= 1 else 1)
    return {"weights": weights, "grads": grads, "optimizer": optim, "trainable": trainable}


def zero_buffers(i: Inputs, trainable: int) -> float:
    """Communication buffers (bytes): DeepSpeed's per stage, or DDP's gradient buckets without DeepSpeed.

    ZeRO-1/2: reduce + allgather buckets of 2e8 elements each in bf16 (ms-swift zero2.json), doubled by
    overlap_comm, capped by the trainable parameter count. ZeRO-3: see zero3_buffers. Plain DDP on more than one GPU:
    the Reducer copies every trainable gradient into flat bucket tensors (torch reducer.cpp initialize_buckets) that
    do not alias .grad unless gradient_as_bucket_view (off in HF Trainer): trainable × grad bytes.
    """
    if i.zero_stage in (1, 2):
        return 3 * min(2e8, trainable) * 2
    if i.zero_stage == 3:
        return zero3_buffers(i)
    if i.world > 1:
        return trainable * (i.param_bytes if i.full else 4.0)  # LoRA adapters and their grads are fp32
    return 0.0


def zero3_buffers(i: Inputs) -> float:
    """ZeRO-3 memory beyond the partitions at the logits peak (bytes, compute dtype), from DeepSpeed's stage 3:

    - gathered parameters: the lm_head (V·h) is all-gathered for its forward and, its next use being its own backward,
      kept until then (partitioned_param_coordinator.py __params_to_release: parameters reused within
      stage3_max_reuse_distance, 1e9 in ms-swift's zero3.json, are not released); a decoder layer recomputed for
      backward is kept the same way while within that distance, so at most max(V·h, one layer);
    - prefetch (fetch_sub_module): whole parameters of the next modules in the trace until stage3_prefetch_bucket_size
      elements, capped by stage3_max_live_parameters (1e9), the last one overshooting by at most one linear weight;
    - reduce bucket (stage3.py __init__, contiguous_gradients): torch.empty(reduce_bucket_size) = h² ('auto',
      transformers trainer_config_finalize);
    - full tuning: a gradient larger than the bucket is reduced from its own full-size tensor
      (__add_grad_to_ipg_bucket), the lm_head's V·h at the logits peak.
    """
    a = i.arch
    lm_head = a.vocab_size * a.hidden_size
    largest_linear = max(fan_in * fan_out for fan_in, fan_out in a.linear_shapes().values())
    prefetch = min(i.zero3_prefetch, 1e9) + largest_linear if i.zero3_prefetch else 0.0
    elements = max(lm_head, a.layer_params()) + prefetch + a.hidden_size ** 2 + (lm_head if i.full else 0)
    return elements * i.compute_bytes


def activations(i: Inputs) -> float:
    """Activation memory of one micro-batch (bytes), bf16.

    Per token and layer without checkpointing: attention ≈ 2·(4h + 2·kv) (norm input, q/k/v, output, o_proj input),
    gated MLP 2h + 8i (input, gate, up, act, product), two norms 4h; eager attention adds 5·heads·s bytes per token
    for scores, softmax and dropout (Korthikanti et al. 2022 eq. 2). With gradient checkpointing only each layer's
    input (2h per token) is kept, plus one layer recomputed during backward.
    """
    a = i.arch
    s = i.prompt_len + i.completion_len
    tokens = i.micro_batch * s
    inter = (a.moe_intermediate_size * a.num_experts_per_tok) if a.num_experts else a.intermediate_size
    kv = a.num_key_value_heads * a.hd
    per_layer_token = 2 * (4 * a.hidden_size + 2 * kv) + 2 * a.hidden_size + 8 * inter + 4 * a.hidden_size
    if not i.flash_attn:
        per_layer_token += 5 * a.num_attention_heads * s
    full_layer = tokens * per_layer_token
    if i.grad_ckpt:
        return a.num_hidden_layers * tokens * 2 * a.hidden_size + full_layer
    return a.num_hidden_layers * full_layer


def logits(i: Inputs) -> float:
    """Logits of the completion tokens (bytes). ms-swift/TRL compute log-probs for completion_length + 1 positions:
    the bf16 logits stay for backward (2 B per vocab entry) and get a bf16 gradient (2 B), while the fp32
    log-softmax runs one sequence at a time (selective_log_softmax: 8 B × completion × vocab, transient).
    Liger's fused linear + loss works in chunks and never materialises them (≈ 2 chunks of 2048 tokens in fp32)."""
    a = i.arch
    per_seq = (i.completion_len + 1) * a.vocab_size
    if i.liger:
        return min(i.micro_batch * (i.completion_len + 1), 2 * 2048) * a.vocab_size * 4
    return i.micro_batch * per_seq * 4 + per_seq * 8


def largest_trainable_tensor(i: Inputs) -> int:
    """Elements of the largest trainable parameter: the embedding or lm_head (V·h) or a linear weight for full
    tuning, the largest LoRA matrix (r × the wider side of its linear) otherwise."""
    shapes = i.arch.linear_shapes()
    if i.full:
        return max(i.arch.vocab_size * i.arch.hidden_size, *(a * b for a, b in shapes.values()))
    return max(i.lora_rank * max(shapes[name]) for name in i.lora_targets) if i.lora_targets else 0


def step_temporaries(i: Inputs, trainable: int) -> float:
    """Memory the optimizer step allocates on top of the model states (bytes), while activations are freed.

    Plain torch AdamW (foreach, the default on CUDA) works on whole tensor lists and "uses roughly sizeof(params)
    more peak memory" (PyTorch torch.optim docs, 'Algorithms'): trainable × grad bytes. DeepSpeed ZeRO-1/2
    (stage_1_and_2.py step) builds the fp32 gradient of its partition as flatten(averaged_gradients).to(fp32): a bf16
    flat copy (2 B) and its fp32 cast (4 B) exist together while the bf16 gradients are still held, so 6 B ×
    trainable ÷ world; ZeRO-3 does the same per sub-group (_prepare_fp32_grad_for_sub_group, sub_group_size 1e9
    elements). Before that, the gradient norm (get_grad_norm_direct) casts one gradient tensor at a time to fp64:
    8 B × the largest trainable tensor (or the partition, if smaller; ZeRO-3: its 1/world slice); the larger of the
    two moments counts.
    """
    if i.zero_stage == 0:
        return trainable * (i.param_bytes if i.full else 4.0)  # LoRA adapters are fp32
    if i.offload_optimizer_ds:
        return 0.0  # the step runs on the CPU
    partition, largest = trainable / i.world, largest_trainable_tensor(i)
    if i.zero_stage == 3:  # every parameter's gradient is partitioned
        return max(6 * min(1e9, partition), 8 * largest / i.world)
    return max(6 * partition, 8 * min(largest, partition))


def optimizer_step_phase(i: Inputs, trainable: int, training: list[Term]) -> Phase:
    """The optimizer step: everything resident in training except activations and logits, plus the step's
    temporaries. The training peak is the larger of this phase and the forward/backward one."""
    dynamic = ("activations", "logits", "fragmentation", "autocast weight cache")
    kept = [t for t in training if t.name not in dynamic]
    return Phase("optimizer step", kept + [Term("optimizer-step temporaries", step_temporaries(i, trainable) / GIB,
                                                "foreach AdamW: one params-sized list; ZeRO: fp32 grad partition")])


def autocast_cache(i: Inputs, trainable: int) -> float:
    """Low-precision copies of fp32 LoRA adapters that autocast keeps for the forward and backward (bytes).

    Without DeepSpeed, HF Trainer runs the forward under torch.autocast and PEFT keeps adapters in fp32; autocast
    caches the cast of every fp32 leaf tensor that requires grad (aten/src/ATen/autocast_mode.cpp, cached_cast) and
    the matmuls save those copies for backward: trainable × compute bytes. DeepSpeed casts the module itself (no
    autocast copies); full tuning in bf16 has nothing to cast.
    """
    if i.zero_stage or i.full or i.compute_bytes >= 4:
        return 0.0
    return trainable * i.compute_bytes


def reference_model(i: Inputs) -> float:
    """A frozen copy of the policy (full tuning with beta > 0); sharded like the weights under ZeRO-3.
    LoRA uses the base model with adapters disabled, beta = 0 loads none."""
    if not i.ref_model:
        return 0.0
    w = base_weight_bytes(i)
    return 0.0 if (i.zero_stage == 3 and i.offload_param_ds) else w / (i.world if i.zero_stage == 3 else 1)


def vllm_need(arch: ModelArch, param_bytes: float, tp: int, seqs: int, max_len: int) -> tuple[float, float]:
    """(weights, KV cache) bytes vLLM needs per GPU: bf16 weights / TP, and seqs × max_len tokens of KV
    (2 × layers × kv_heads × head_dim × 2 B per token, KV heads split over TP; GQA keeps it small)."""
    weights = arch.total_params() * max(param_bytes, 2.0) / tp
    kv = seqs * max_len * arch.kv_bytes_per_token() / tp
    return weights, kv


# ---------------------------------------------------------------------------------------------------------------

def vllm_asleep(i: Inputs, reserve: float) -> float:
    """GPU memory a colocated vLLM keeps while the trainer trains (bytes): its whole reservation at sleep_level 0,
    nothing of its weights or KV cache at sleep levels 1 and 2.

    With enable_sleep_mode vLLM allocates its weights and KV cache through CuMemAllocator (vllm/device_allocator/
    cumem.py, tags "weights" and "kv_cache"); the worker's sleep(level) calls allocator.sleep(offload_tags=("weights",)
    if level == 1 else ()), which unmaps every tagged allocation, copying the "weights" ones to CPU first at level 1
    (vllm/v1/worker/gpu_worker.py; vLLM docs, 'Sleep Mode': "Level 1 sleep will offload the model weights and discard
    the KV cache ... Level 2 sleep will discard both"). Level 1 and 2 differ in host RAM (see host_ram), not on the
    GPU. What vLLM allocated outside the pool (CUDA graphs, a few hundred MiB) is not counted.
    """
    return reserve if i.sleep_level == 0 else 0.0


def estimate(i: Inputs) -> MemoryReport:
    ms = model_states(i)
    buffers = zero_buffers(i, ms["trainable"])
    act, lg, ref = activations(i), logits(i), reference_model(i)
    dynamic = act + lg
    base = [Term("CUDA context", CUDA_CONTEXT_GIB, "per process, measured typical"),
            Term("NCCL buffers", NCCL_GIB if i.world > 1 or i.vllm == "server" else 0.0,
                 "communicator buffers when world > 1")]
    cap = i.gpu.memory_gib if i.gpu else None
    notes: list[str] = []
    training = [Term("weights", ms["weights"] / GIB, "P × bytes/param (÷ world under ZeRO-3); LoRA adapters fp32"),
                Term("gradients", ms["grads"] / GIB, "trainable × grad bytes (÷ world from ZeRO-2)"),
                Term("optimizer states", ms["optimizer"] / GIB,
                     "AdamW: 12 B/param fp32 under DeepSpeed (÷ world from ZeRO-1), else 2 × param dtype"),
                Term("ZeRO/DDP buffers", buffers / GIB,
                     "ZeRO-1/2 buckets, ZeRO-3 gathered lm_head/layer + prefetch + reduce bucket, or DDP buckets"),
                Term("activations", act / GIB, "micro-batch × (prompt + completion) tokens, per layer"),
                Term("logits", lg / GIB, "completion tokens × vocab × 4 B + one sequence's fp32 log-softmax"),
                Term("autocast weight cache", autocast_cache(i, ms["trainable"]) / GIB,
                     "bf16 copies of fp32 LoRA adapters under autocast (no DeepSpeed)"),
                Term("reference model", ref / GIB, "frozen policy copy when beta > 0 and full tuning"),
                Term("fragmentation", FRAGMENTATION * dynamic / GIB, f"{FRAGMENTATION:.0%} of dynamic memory"),
                *base]
    rollout = [Term("weights", 0.0 if i.offload_model else ms["weights"] / GIB,
                    "policy weights (0 with offload_model)"),
               Term("optimizer states", 0.0 if i.offload_optimizer else ms["optimizer"] / GIB,
                    "kept unless offload_optimizer"),
               Term("reference model", ref / GIB, "stays resident"), *base]
    phases = [Phase("training", training)]
    if i.vllm == "colocate":
        w, kv_want = vllm_need(i.arch, i.param_bytes, i.vllm_tp, i.vllm_max_num_seqs, i.vllm_max_len)
        kv_min = i.vllm_max_len * i.arch.kv_bytes_per_token() / i.vllm_tp  # vLLM must fit one full sequence
        need = w + kv_min + VLLM_OVERHEAD_GIB * GIB
        resident = ms["weights"] + ref + CUDA_CONTEXT_GIB * GIB  # what training holds when vLLM starts
        if cap is None:
            reserve = w + kv_want + VLLM_OVERHEAD_GIB * GIB
            notes.append("No GPU model chosen: vLLM counted at what it needs, not its reservation.")
        else:
            # vLLM's own share on top of what training holds: its memory profiling counts only what the instance
            # adds to a baseline snapshot (vllm-project/vllm#10511, v0.6.5+; it logs "the current vLLM instance can
            # use total_gpu_memory x gpu_memory_utilization"). Calibration row swift-issue3426 (ms-swift 3.2, util
            # 0.6 on 80 GB, ~70 GiB per card) agrees; a whole-process budget gave 54 GiB.
            budget = i.vllm_util * cap * GIB
            reserve = max(budget, need)
            if budget < need:
                notes.append(f"vLLM cannot start: its budget ({budget / GIB:.1f} GiB"
                             " = util × capacity) is below its weights + one sequence of KV "
                             f"({need / GIB:.1f} GiB).")
            elif budget - w - VLLM_OVERHEAD_GIB * GIB < kv_want:
                seqs = int((budget - w - VLLM_OVERHEAD_GIB * GIB) / (kv_want / i.vllm_max_num_seqs))
                notes.append(f"vLLM's KV cache holds ~{seqs} of the {i.vllm_max_num_seqs} sequences a rollout "
                             "wants at once: generation runs in more waves (slower, not an error).")
            if resident + i.vllm_util * cap * GIB > cap * GIB:
                notes.append(f"vLLM checks at start that util × capacity ({i.vllm_util * cap:.1f} GiB) is "
                             f"free, but training already holds {resident / GIB:.1f} GiB.")
        awake = [Term("vLLM weights", w / GIB, "weights / TP"),
                 Term("vLLM KV cache + overhead", (reserve - w) / GIB,
                      "reservation (util × capacity) beyond the weights: KV cache, CUDA graphs")]
        rollout += awake
        training.append(Term(f"vLLM while training (sleep_level {i.sleep_level})", vllm_asleep(i, reserve) / GIB,
                             "0: weights + KV kept; 1: weights to CPU RAM, KV freed; 2: both freed"))
        phases.append(Phase("rollout", rollout))
    elif i.vllm == "none":
        gen_kv = i.micro_batch * (i.prompt_len + i.completion_len) * i.arch.kv_bytes_per_token()
        rollout.append(Term("generate() KV cache", gen_kv / GIB, "transformers generation for the micro-batch"))
        phases.append(Phase("rollout", rollout))
    phases.insert(1, optimizer_step_phase(i, ms["trainable"], training))
    roles = [RoleReport("trainer", i.gpu.name if i.gpu else None, cap, phases, notes)]
    if i.vllm == "server":
        w, kv = vllm_need(i.arch, i.param_bytes, i.server_tp, 1, i.server_max_len)  # at least one sequence
        need = w + kv + VLLM_OVERHEAD_GIB * GIB
        reserve = max(i.server_util * cap * GIB, need) if cap else need
        srv = Phase("rollout", [Term("vLLM weights", w / GIB, "weights / TP"),
                                Term("vLLM KV cache + overhead", (reserve - w) / GIB,
                                     "util × capacity beyond the weights (≥ one max_model_len sequence)"),
                                Term("CUDA context", CUDA_CONTEXT_GIB, "per process")])
        roles.append(RoleReport("rollout", i.gpu.name if i.gpu else None, cap, [srv]))
    return MemoryReport(i.arch.name, i.arch.total_params() / 1e9, roles, host_ram(i, ms),
                        _assumptions(i))


def host_ram(i: Inputs, ms: dict) -> dict[str, float]:
    """Host RAM per trainer node (GiB): offloaded optimizer states / params (pinned), offloaded policy during
    rollout, vLLM's weights backed up by sleep_level 1, plus ~1.5 × one shard of weights while loading safetensors
    (page cache excluded)."""
    per_proc = 0.0
    if i.offload_optimizer_ds:
        per_proc += ms["trainable"] * 12 / (i.world if i.zero_stage >= 1 else 1)
    if i.offload_param_ds:
        per_proc += i.arch.total_params() * i.param_bytes / i.world
    if i.offload_model:
        per_proc += ms["weights"]
    if i.offload_optimizer:
        per_proc += ms["optimizer"]
    if i.vllm == "colocate" and i.sleep_level == 1:  # vLLM's CPU backup of its weights (vllm_asleep)
        per_proc += vllm_need(i.arch, i.param_bytes, i.vllm_tp, 1, 1)[0]
    load = i.arch.total_params() * i.param_bytes * 1.5 / (i.world if i.zero_stage == 3 else 1)
    return {"per_trainer_node": (per_proc * i.nproc + load * i.nproc) / GIB + 4.0}


def _assumptions(i: Inputs) -> list[str]:
    out = [f"sequence = prompt {i.prompt_len} + completion {i.completion_len} tokens, micro-batch {i.micro_batch}",
           f"ZeRO stage {i.zero_stage} over {i.world} GPUs" if i.zero_stage else "no DeepSpeed (plain DDP)"]
    if i.vllm == "colocate":
        out.append(f"vLLM colocate: {i.vllm_max_num_seqs} seqs × {i.vllm_max_len} tokens, TP {i.vllm_tp}, "
                   "vLLM's budget = util × capacity on top of training")
    return out


def estimate_spec(spec: JobSpec, gpu: str | None = None) -> MemoryReport:
    """The estimate for a spec (``gpu`` overrides node 0's gpu_model). Raises UnknownModel."""
    return estimate(inputs_from_spec(spec, gpu))


def format_report(report: MemoryReport) -> str:
    lines = [f"{report.model} ({report.params_b:.2f} B params) — verdict: {report.verdict.upper()}"]
    for r in report.roles:
        cap = f"{r.capacity_gib:.1f} GiB {r.gpu}" if r.capacity_gib else "no GPU model chosen"
        lines.append(f"\n[{r.role} GPU: {cap}] peak {r.peak_gib:.1f} GiB in {r.peak_phase} → {r.verdict}"
                     + (f", headroom {r.headroom_gib:+.1f} GiB" if r.headroom_gib is not None else ""))
        for p in r.phases:
            lines.append(f"  {p.name} phase: {p.total:.1f} GiB")
            lines += [f"    {t.name:<36} {t.gib:8.2f}  {t.formula}" for t in p.terms if t.gib]
        lines += [f"  note: {n}" for n in r.notes]
    lines.append("\nhost RAM per trainer node: " + ", ".join(f"{v:.0f} GiB" for v in report.host_ram_gib.values()))
    lines += [f"assumes {a}" for a in report.assumptions]
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------------------------
# Baselines users have today (for the accuracy benchmark): weights only, and DeepSpeed's model-states estimators.

def weights_only_gib(params: float, bytes_per_param: float = 2.0) -> float:
    """What `accelerate estimate-memory`-style tools report for inference: parameters × bytes."""
    return params * bytes_per_param / GIB


def deepspeed_zero2_model_states(total_params: int, gpus_per_node: int = 1, nodes: int = 1, cpu_offload: bool = True,
                                 buffer_factor: float = 1.5) -> tuple[int, int]:
    """(cpu bytes, gpu bytes) per DeepSpeed's ZeRO-2 estimator: 4 B/param + 16 B/param ÷ GPUs on the GPU without
    offload (2 B/param with); host: max(4 × GPUs, 16) B/param × 1.5 with offload, else 4 B × GPUs per node × 1.5."""
    gpus = nodes * gpus_per_node
    if cpu_offload:
        return int(total_params * max(4 * gpus, 16) * buffer_factor), int(2 * total_params)
    return int(total_params * 4 * gpus_per_node * buffer_factor), int(4 * total_params + int(16 * total_params / gpus))


def deepspeed_zero3_model_states(total_params: int, largest_layer_params: int, gpus_per_node: int = 1, nodes: int = 1,
                                 cpu_offload: bool = True, cpu_offload_params: bool = True, zero_init: bool = True,
                                 buffer_factor: float = 1.5) -> tuple[int, int]:
    """(cpu bytes, gpu bytes) per DeepSpeed's ZeRO-3 estimator: the largest layer in fp32 (4 B/param) is live on
    the GPU, plus 18 B/param ÷ GPUs without offload (2 B/param ÷ GPUs when only the optimizer is offloaded)."""
    gpus, per_node = nodes * gpus_per_node, 1 / nodes
    largest = 4 * largest_layer_params
    if cpu_offload and cpu_offload_params:
        factor = 18 * per_node if zero_init else max(4 * gpus_per_node, 18 * per_node)
        return int(total_params * factor * buffer_factor), int(largest)
    if cpu_offload:
        factor = 16 * per_node if zero_init else max(4 * gpus_per_node, 16 * per_node)
        return int(total_params * factor * buffer_factor), int(largest + int(2 * total_params / gpus))
    cpu = largest_layer_params * 4 * gpus_per_node if zero_init else total_params * 4 * gpus_per_node
    return int(cpu * buffer_factor), int(largest + int(18 * total_params / gpus))
