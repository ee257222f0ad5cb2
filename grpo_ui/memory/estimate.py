"""Per-GPU memory estimate for a GRPO job: every term, each phase (forward/backward, optimizer step, rollout), and a
verdict against the GPU's capacity.

Pure functions over ``Inputs``; ``inputs_from_spec`` is the one adapter from a JobSpec. GiB = 2**30 bytes. Each term's
docstring gives its formula and source:
- model states: ZeRO paper (Rajbhandari et al. 2020) §3, DeepSpeed's stage_1_and_2.py / stage3.py / bf16_optimizer.py,
  PyTorch FSDP2 (fully_shard) with accelerate's fp32 upcast (fsdp2_prepare_model), PEFT's adapter dtypes;
- activations: what autograd saves in transformers' decoder layers and PEFT's LoRA layer (Korthikanti et al. 2022's
  accounting, redone per tensor: frozen linears keep no input, RMSNorm's fp32 copies, autocast's per-linear casts),
  flash/sdpa/eager attention, MoE, Gated DeltaNet layers, gradient checkpointing; checked on the CPU against the real
  libraries (tests/test_memory_physics.py);
- logits: TRL's selective_log_softmax (ms-swift and TRL GRPO) in fp32 under accelerate's native AMP or 16-bit under
  DeepSpeed, the causal-LM cross entropy (12 B per logit, wherever the upcast happens: Soup#610 and the CPU probe),
  Liger's chunked losses (liger_kernel's fused_linear_cross_entropy.py);
- vLLM: its gpu_memory_utilization budget (vllm#10511), KV cache per token, sleep levels (vllm cumem.py);
- the caching allocator's reserve (what torch's memory_reserved and nvidia-smi show above what is allocated), by
  cause: steps of varying length (in proportion to the logits' large tensors) and generate()'s growing KV cache.
Checked against published measurements: bench/memory_accuracy.py, tests/data/memory_measurements.jsonl.

Known gaps: the two reserve factors are fitted on the fit set, not derived (a simulation of the caching allocator
over allocation traces recorded from the real libraries would derive them); fixed-shape runs get no reserve, and the
fixed-length 'peak' rows of the Qwen1 README run 1-4 GiB low at most lengths (Qwen-72B ZeRO-3: 7-12 GiB); the ms-swift
ZeRO-3 LoRA and DDP LoRA example headers (3.0 development snapshots of 2024-11-25) and the Qwen3-8B ZeRO-3 packing
header run 35-43 % low, unexplained; bitsandbytes linears return their input's dtype, so an fp32 model's quantised
layers keep fp32 outputs (counted as 16-bit); teacher and value models are modelled (ExtraModel) but the JobSpec has no field for them yet; an omni
model's audio tower counts as weights only; vLLM memory outside its cuMem pool (CUDA graphs) stays while it sleeps
and is not counted.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, replace

from grpo_ui.knowledge.catalog import (
    QUANT_BYTES,
    ModelArch,
    closest_models,
    find_gpu,
    parse_hf_config,
    quant_from_hf_config,
    quant_of,
    resolve_gpu,
)
from grpo_ui.knowledge.engines import FsdpConfig, ZeroConfig, fsdp_config, zero_config
from grpo_ui.spec.model import JobSpec
from grpo_ui.spec.resolve import Resolved, model_arch, resolve

GIB = 2 ** 30
CUDA_CONTEXT_GIB = 0.5      # CUDA context + kernels per process (typ. 0.3–0.6 GiB with lazy module loading)
NCCL_GIB = 0.5              # NCCL communicator buffers when world > 1 (channels × NCCL_BUFFSIZE 4 MiB, plus streams)
VLLM_OVERHEAD_GIB = 0.5     # vLLM profile activations and sampler buffers beyond weights and KV cache
# The caching allocator keeps freed blocks reserved and gives them back only when an allocation would otherwise fail
# (c10/cuda/CUDACachingAllocator.cpp: release_cached_blocks on a failed cudaMalloc). Two workloads leave blocks it
# cannot reuse, each with its own reserve above the allocated peak:
# - shapes that change from step to step (sequence lengths): a step longer than every step before needs blocks the
#   cached ones are too small for. Layer activations are many tensors of one layer's size, allocated and freed in
#   stack order, whose freed blocks coalesce and serve the next step; the logits' path allocates the step's largest
#   single tensors (fp32 copies of the logits and their gradients, each hundreds of MB to GBs), which need new
#   segments whenever a longer step comes. ALLOCATOR_RESERVE × the logits term, fitted on the fit set's rows
#   (bench/memory_accuracy.py: the reserve in proportion to the logits fits them better than in proportion to all
#   dynamic memory, which overshoots the rows without gradient checkpointing); none when every step has the same
#   shapes;
# - transformers' generate(): DynamicCache grows each layer's keys and values by torch.cat at every decoding step
#   (cache_utils.py DynamicLayer.update), a tensor one token longer beside the old one, so the freed copies are always
#   a little too small for the next ones. CoursIA's probe runs (fit set: reserved and allocated of the same TRL runs,
#   training shapes fixed) keep 1.2-1.6 × the final KV cache above the allocated peak; GENERATE_RESERVE is their median.
ALLOCATOR_RESERVE = 2.5
GENERATE_RESERVE = 1.4
# Activations are 16-bit under mixed precision even when the weights are fp32: ms-swift trains fp32 weights under fp16
# autocast (ModelArguments._init_mixed_precision), TRL under bf16 (GRPOConfig bf16 defaults to True).
ACT_BYTES = 2
# Gradient checkpointing: one layer is recomputed and back-propagated at a time; its saved activations plus the
# gradients its backward creates peak at 1.15 (full tuning) to 1.4 (LoRA under autocast) × the layer's saved
# activations (measured on CPU with transformers 5 and PEFT: tests/test_memory_physics.py).
CKPT_RECOMPUTE = 1.3
TRAINING_PHASE = "training"
# The estimate's own error, measured: on 9 in 10 of the calibration set's fit rows (bench/calibration.py) the
# measured peak was at most the estimate plus this share of what the estimate models (everything but vLLM's
# reservation, which vLLM sizes itself to util × capacity). A job fits when its peak plus this margin fits the card;
# within the card without the margin it is tight. bench/memory_accuracy.py prints the figure and how many held-out
# rows it covers; tests/test_memory.py keeps it equal to what the fit rows give.
ESTIMATE_MARGIN = 0.32


class EstimateError(ValueError):
    """The estimate cannot be made; the message names the field and what to do."""


class UnknownModel(EstimateError):
    """The model's architecture is not known: name it from the catalogue or give its config.json."""


@dataclass(frozen=True)
class Term:
    name: str
    gib: float
    formula: str
    reclaimable: bool = False  # held by torch's cache, freed before an OOM: not counted against the capacity


@dataclass
class Phase:
    name: str  # "training" (forward/backward), "optimizer step" or "rollout"
    terms: list[Term]

    @property
    def total(self) -> float:
        """Everything on the GPU, the allocator's reserve included (what nvidia-smi shows)."""
        return sum(t.gib for t in self.terms)

    @property
    def needed(self) -> float:
        """What the phase must have to run (the reserve left out)."""
        return sum(t.gib for t in self.terms if not t.reclaimable)

    @property
    def modelled(self) -> float:
        """What the estimate models of the phase: the reserve and vLLM's self-sized reservation left out."""
        return sum(t.gib for t in self.terms if not t.reclaimable and not t.name.startswith("vLLM"))

    @property
    def with_margin(self) -> float:
        """What the phase needs with the estimate's measured error margin (ESTIMATE_MARGIN) on what it models."""
        return self.needed + ESTIMATE_MARGIN * self.modelled


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
        return max(p.needed for p in self.phases)

    @property
    def peak_phase(self) -> str:
        return max(self.phases, key=lambda p: p.needed).name

    @property
    def expected_gib(self) -> float:
        """What nvidia-smi is expected to show at the peak, the allocator's reserve included."""
        return max(p.total for p in self.phases)

    @property
    def headroom_gib(self) -> float | None:
        return None if self.capacity_gib is None else self.capacity_gib - self.peak_gib

    @property
    def margin_peak_gib(self) -> float:
        """The peak with the estimate's measured error margin (Phase.with_margin)."""
        return max(p.with_margin for p in self.phases)

    @property
    def verdict(self) -> str:
        """fits (with the estimate's error margin), tight (within the card, not with the margin), oom, or unknown
        without a GPU model."""
        if self.capacity_gib is None:
            return "unknown"
        if self.margin_peak_gib <= self.capacity_gib:
            return "fits"
        return "tight" if self.peak_gib <= self.capacity_gib else "oom"


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
                           "peak_gib": round(r.peak_gib, 2),
                           "margin_peak_gib": round(r.margin_peak_gib, 2), "expected_gib": round(r.expected_gib, 2),
                           "peak_phase": r.peak_phase, "verdict": r.verdict,
                           "headroom_gib": None if r.headroom_gib is None else round(r.headroom_gib, 2),
                           "notes": r.notes,
                           "phases": [{"name": p.name, "total_gib": round(p.total, 2),
                                       "terms": [dict(asdict(t), gib=round(t.gib, 3)) for t in p.terms]}
                                      for p in r.phases]} for r in self.roles],
                "host_ram_gib": {k: round(v, 1) for k, v in self.host_ram_gib.items()},
                "assumptions": self.assumptions}


@dataclass(frozen=True)
class ExtraModel:
    """Another model the job holds on every trainer GPU (reference, reward, teacher, value), sharded like the
    policy under ZeRO-3 / FSDP; a value model trains (weights, gradients and AdamW states)."""

    role: str
    arch: ModelArch
    trainable: bool = False


@dataclass(frozen=True)
class Inputs:
    """Everything the estimate needs, as plain values (derived from a JobSpec by ``inputs_from_spec``)."""

    arch: ModelArch
    compute_bytes: float        # bytes per weight of the model dtype (2 bf16/fp16, 4 fp32)
    quant: str                  # '' or a catalog.QUANT_BYTES kind: the decoder's linears are packed
    full: bool                  # full tuning (else LoRA-style adapters)
    lora_rank: int
    lora_targets: tuple[str, ...]
    lora_dropout: float
    zero: ZeroConfig | None     # DeepSpeed (stage 0 is DeepSpeed too)
    fsdp: FsdpConfig | None
    world: int
    nproc: int
    micro_batch: int            # sequences per device per micro-step
    grad_accum: int             # micro-steps per optimizer step
    prompt_len: int
    completion_len: int         # tokens whose logits are computed (GRPO: the completion; SFT: the whole sequence)
    grad_ckpt: bool
    attn: str                   # "flash", "sdpa" or "eager"
    liger: bool
    sequence_parallel: int
    image_tokens: int           # vision tokens per sequence (images + video frames)
    vit_trainable: bool
    vit_ckpt: bool
    extra_models: tuple[ExtraModel, ...]
    vllm: str                   # "none", "colocate" or "server"
    vllm_util: float
    vllm_tp: int
    vllm_max_len: int
    vllm_max_num_seqs: int
    sleep_level: int
    offload_model: bool
    offload_optimizer: bool
    generation_batch: int       # sequences one device generates at once without vLLM
    capacity_gib: float | None
    gpu_name: str | None
    server_util: float
    server_tp: int
    server_max_len: int
    loss: str = "grpo"          # "grpo" (per-token log-probs of the completion) or "ce" (SFT cross entropy)
    kbit_fp32: bool = False     # PEFT prepare_model_for_kbit_training: unquantised weights upcast to fp32 (TRL < 0.25)
    lora_bf16: bool = False     # adapters in the model dtype without DeepSpeed (TRL >= 1.0 casts QLoRA adapters to bf16)
    logits_inplace: bool = True  # the temperature divides the logits in place (ms-swift >= 4.2, TRL >= 1.0)
    fixed_shapes: bool = False  # every step has the same tensor shapes (packing, padding to the maximum length)
    zero3_prefetch: float = 0.0  # stage3_prefetch_bucket_size (elements): ms-swift GRPO sets 0, HF 'auto' is 0.9·h²
    fsdp_fp32_frozen: bool = False  # accelerate < 1.13 upcasts frozen parameters to fp32 under FSDP2 too

    @property
    def param_bytes(self) -> float:
        """Bytes per packed decoder weight."""
        return QUANT_BYTES[self.quant] if self.quant else self.compute_bytes

    @property
    def deepspeed(self) -> bool:
        return self.zero is not None

    @property
    def adapter_bytes(self) -> float:
        """LoRA adapters: PEFT upcasts them to fp32 (autocast_adapter_dtype); DeepSpeed casts the whole module to the
        model dtype (engine.py _configure_distributed_model), as TRL >= 1.0 does for QLoRA adapters."""
        return self.compute_bytes if (self.deepspeed or self.lora_bf16) else 4.0

    @property
    def adapter_compute_bytes(self) -> float:
        """The adapters' dtype in their matmuls: FSDP2 all-gathers every parameter in the compute dtype
        (MixedPrecisionPolicy param_dtype), whatever the dtype it keeps them in."""
        return self.compute_bytes if self.fsdp else self.adapter_bytes

    @property
    def stage(self) -> int:
        return self.zero.stage if self.zero else 0

    @property
    def shards_weights(self) -> bool:
        return self.stage == 3 or self.fsdp is not None

    @property
    def weights_offloaded(self) -> bool:
        return bool(self.zero and self.zero.offload_param) or bool(self.fsdp and self.fsdp.offload)


# ---------------------------------------------------------------------------------------------------------------
# The adapter from a JobSpec

def resolve_arch(model: str, field_name: str = "train.model") -> ModelArch:
    """The architecture of a hub id or local path (resolve.model_arch), or UnknownModel naming the field, the closest
    catalogue names and the fix."""
    arch = model_arch(model)
    if arch:
        return arch
    near = closest_models(model)
    hint = f" Closest catalogue models: {', '.join(near)}." if near else ""
    raise UnknownModel(f"{field_name}: unknown architecture for {model!r}.{hint} Pick a catalogue model, paste its "
                       "config.json on the Configure page, or point at a directory holding it.")


def _env_int(env: dict, key: str) -> int | None:
    try:
        return int(float(env[key])) if env.get(key) else None
    except ValueError:
        return None


def vision_tokens(arch: ModelArch, env: dict, prompt_len: int) -> tuple[int, str | None]:
    """LLM tokens one prompt's images and video take, from the variables ms-swift's templates read (MAX_PIXELS,
    IMAGE_MAX_TOKEN_NUM, VIDEO_MAX_PIXELS, FPS_MAX_FRAMES, VIDEO_MAX_TOKEN_NUM): pixels / (patch × merge)² per
    image, frames merged by the temporal patch; bounded by the prompt. Returns (tokens, an assumption or None)."""
    if not arch.vision:
        return 0, None
    v = arch.vision
    image = _env_int(env, "IMAGE_MAX_TOKEN_NUM") or (
        _env_int(env, "MAX_PIXELS") // v.pixels_per_token if _env_int(env, "MAX_PIXELS") else None)
    video = None
    if _env_int(env, "VIDEO_MAX_PIXELS") or _env_int(env, "VIDEO_MAX_TOKEN_NUM"):
        per_frame = _env_int(env, "VIDEO_MAX_TOKEN_NUM") or _env_int(env, "VIDEO_MAX_PIXELS") // v.pixels_per_token
        video = per_frame * math.ceil((_env_int(env, "FPS_MAX_FRAMES") or 16) / v.temporal_patch_size)
    if image is None and video is None:
        tokens = min(prompt_len, 1024)
        return tokens, f"no MAX_PIXELS / IMAGE_MAX_TOKEN_NUM in the job's environment: {tokens} vision tokens assumed"
    return min(prompt_len, (image or 0) + (video or 0)), None


def _lora_targets(targets: list[str], arch: ModelArch) -> tuple[str, ...]:
    names = [name for name, *_ in arch.linears()]
    if "all-linear" in targets:
        return tuple(names)
    return tuple(n for n in names if any(n == t or n.endswith(t) for t in targets))


def inputs_from_spec(job: JobSpec | Resolved, gpu: str | None = None, arch: ModelArch | None = None,
                     gpu_gib: float | None = None) -> Inputs:
    """The estimate's inputs for a job (its spec or Resolved values). ``gpu`` / ``gpu_gib`` stand for node 0's
    gpu_model / gpu_memory_gib; ``arch`` a config.json the user supplied. Raises EstimateError (UnknownModel,
    UnknownGpu, EngineConfigError)."""
    eff = resolve(job, arch)
    spec = eff.spec
    t, r, s = spec.train, spec.rollout, spec.server
    model = t.model or ""
    arch = eff.arch or resolve_arch(model)
    compute = {"float32": 4.0, "float16": 2.0, "bfloat16": 2.0, None: 2.0}[t.torch_dtype]
    quant = ({4: "bnb4", 8: "bnb8"}[t.quant_bits] if t.quant_bits else quant_of(model)
             or _local_quant(model))
    gpu_name, capacity = _trainer_gpu(eff, gpu, gpu_gib)
    spare = eff.spare_rollout_gpus > 0  # ms-swift 3.2–3.4: vLLM alone on the node's last GPU(s)
    vllm = "server" if eff.server or spare else eff.vllm_mode
    prompt = t.max_length or 1024
    max_len = r.vllm_max_model_len or prompt + t.max_completion_length
    own_gpu = (r.vllm_gpu_memory_utilization, 1, max_len) if spare else (
        s.vllm_gpu_memory_utilization, s.vllm_tensor_parallel_size, s.vllm_max_model_len or prompt + t.max_completion_length)
    spg = eff.steps_per_generation
    nodes = spec.trainer_nodes()
    env = {**spec.env, **(nodes[0].env if nodes else {})}
    images, _ = vision_tokens(arch, env, prompt)
    fsdp = fsdp_config(t.fsdp)
    extra = []
    if eff.beta > 0 and (t.tuner_type == "full" or t.ref_model):
        extra.append(ExtraModel("reference", resolve_arch(t.ref_model, "train.ref_model") if t.ref_model else arch))
    extra += [ExtraModel("reward", resolve_arch(m, f"train.reward_model[{k}]")) for k, m in enumerate(t.reward_model or [])]
    return Inputs(
        arch=arch, compute_bytes=compute, quant=quant, full=t.tuner_type == "full", lora_rank=t.lora_rank,
        lora_targets=_lora_targets(t.target_modules, arch), lora_dropout=t.lora_dropout,
        zero=zero_config(t.deepspeed), fsdp=fsdp, world=max(eff.world_size, 1), nproc=max(eff.nproc_per_node, 1),
        micro_batch=t.per_device_train_batch_size, grad_accum=eff.grad_accum,
        prompt_len=prompt, completion_len=t.max_completion_length,
        grad_ckpt=t.gradient_checkpointing or bool(fsdp and fsdp.activation_checkpointing),
        attn={"flash_attn": "flash", "sdpa": "sdpa", "eager": "eager"}.get(t.attn_impl or "", "flash"),
        liger=t.use_liger_kernel, sequence_parallel=t.sequence_parallel_size, image_tokens=images,
        vit_trainable=False, vit_ckpt=t.gradient_checkpointing, extra_models=tuple(extra),
        vllm=vllm, vllm_util=r.vllm_gpu_memory_utilization, vllm_tp=r.vllm_tensor_parallel_size, vllm_max_len=max_len,
        vllm_max_num_seqs=r.vllm_max_num_seqs or t.per_device_train_batch_size * r.vllm_tensor_parallel_size * spg,
        logits_inplace=eff.version >= (4, 2, 0),
        sleep_level=r.sleep_level if vllm == "colocate" else 0, offload_model=r.offload_model and vllm == "colocate",
        offload_optimizer=r.offload_optimizer and vllm == "colocate",
        generation_batch=t.per_device_train_batch_size * spg, capacity_gib=capacity, gpu_name=gpu_name,
        server_util=own_gpu[0], server_tp=own_gpu[1], server_max_len=own_gpu[2])


def _trainer_gpu(eff: Resolved, gpu: str | None, gpu_gib: float | None) -> tuple[str | None, float | None]:
    """(name, GiB) of a trainer GPU: ``gpu`` / ``gpu_gib`` when given, else trainer node 0's. A GPU named but unknown
    to the catalogue needs its memory given: UnknownGpu otherwise, naming the closest catalogue GPUs."""
    if gpu:
        found = find_gpu(gpu)
        name, capacity = (found.name, found.memory_gib) if found else (gpu, None)
    else:
        name, capacity = eff.trainer.model, eff.trainer.gib
    capacity = gpu_gib or capacity
    if name and capacity is None:
        resolve_gpu(name)  # raises UnknownGpu
    return name, capacity


def _local_quant(model: str) -> str:
    """The quantisation a local checkpoint's config.json declares ('' when there is none or it cannot be read)."""
    try:
        return quant_from_hf_config(parse_hf_config(model))
    except ValueError:
        return ""


# ---------------------------------------------------------------------------------------------------------------
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
    prefetch = i.zero.prefetch_bucket_size if i.zero.prefetch_bucket_size is not None else i.zero3_prefetch
    prefetch = min(prefetch, i.zero.max_live_parameters) + a.largest_linear() if prefetch else 0.0
    bucket = i.zero.reduce_bucket_size or a.hidden_size ** 2
    elements = max(lm_head, a.layer_params()) + prefetch + bucket + (lm_head if i.full else 0)
    return elements * i.compute_bytes


# ---------------------------------------------------------------------------------------------------------------
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


# ---------------------------------------------------------------------------------------------------------------
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


# ---------------------------------------------------------------------------------------------------------------
# The estimate

def _base_terms(i: Inputs) -> list[Term]:
    return [Term("CUDA context", CUDA_CONTEXT_GIB, "per process, measured typical"),
            Term("NCCL buffers", NCCL_GIB if i.world > 1 or i.vllm == "server" else 0.0,
                 "communicator buffers when world > 1")]


def _training_terms(i: Inputs, ms: dict, extras: float) -> list[Term]:
    return [Term("weights", ms["weights"] / GIB, "base weights (quantised linears packed) + adapters; ÷ world when "
                 "sharded (ZeRO-3, FSDP)"),
            Term("gradients", live_gradients(i, ms["grads"]) / GIB, "trainable × grad bytes (÷ world from ZeRO-2, FSDP); "
                 "none yet at the logits' peak when each step is one micro-step without DeepSpeed"),
            Term("optimizer states", ms["optimizer"] / GIB, "AdamW: 12 B/param fp32 under DeepSpeed (÷ world from "
                 "ZeRO-1), else 2 × param dtype"),
            Term("ZeRO/FSDP/DDP buffers", sharding_buffers(i, ms["trainable"]) / GIB,
                 "reduce/allgather buckets, gathered layers (ZeRO-3, FSDP) or DDP buckets"),
            Term("activations", activations(i) / GIB, "micro-batch × sequence tokens × what each layer keeps for "
                 "backward (checkpointing: layer inputs + the recomputed layer beyond the logits)"),
            Term("logits", logits(i) / GIB, "scored tokens × vocab: GRPO log-probs 16 B per logit in fp32 (native AMP), "
                 "4 B (8 B with an in-place temperature) in bf16 under DeepSpeed; SFT 12 B"),
            Term("vision tower", vision_activations(i) / GIB, "ViT patches of the micro-batch's images"),
            Term("dequantisation buffers", dequant_buffers(i) / GIB, "largest linear dequantised, fwd + bwd"),
            Term("autocast weight cache", autocast_cache(i, ms["trainable"]) / GIB,
                 "16-bit copies of fp32 trainable weights under autocast (no DeepSpeed)"),
            Term("reference/reward models", extras / GIB, "frozen models on the trainer GPU, sharded like the policy"),
            *_base_terms(i)]


DYNAMIC = ("activations", "logits", "vision tower", "dequantisation buffers", "autocast weight cache")


def optimizer_step_phase(i: Inputs, ms: dict, training: list[Term]) -> Phase:
    """The optimizer step: everything resident in training except activations and logits, every gradient, plus the
    step's temporaries. The training peak is the larger of this phase and the forward/backward one."""
    kept = [replace(t, gib=ms["grads"] / GIB) if t.name == "gradients" else t for t in training
            if t.name not in DYNAMIC]
    return Phase("optimizer step", kept + [Term("optimizer-step temporaries", step_temporaries(i, ms["trainable"])
                                                / GIB, "foreach AdamW: one params-sized list; ZeRO: fp32 grad "
                                                "partition")])


def _vllm_colocate(i: Inputs, ms: dict, extras: float, training: list[Term], rollout: list[Term],
                   notes: list[str]) -> None:
    """Adds vLLM's terms to both phases and its notes. vLLM's budget is its own share on top of what training holds:
    its memory profiling counts only what the instance adds to a baseline snapshot (vllm-project/vllm#10511, v0.6.5+)."""
    w = vllm_weight_bytes(i, i.vllm_tp)
    kv_want = vllm_kv(i, i.vllm_tp, i.vllm_max_num_seqs, i.vllm_max_len)
    need = w + vllm_kv(i, i.vllm_tp, 1, i.vllm_max_len) + VLLM_OVERHEAD_GIB * GIB  # one full sequence at least
    cap = i.capacity_gib
    if cap is None:
        reserve = w + kv_want + VLLM_OVERHEAD_GIB * GIB
        notes.append("No GPU model chosen: vLLM counted at what it needs, not its reservation.")
    else:
        budget = i.vllm_util * cap * GIB
        reserve = max(budget, need)
        if budget < need:
            notes.append(f"vLLM cannot start: its budget ({budget / GIB:.1f} GiB = util × capacity) is below its "
                         f"weights + one sequence of KV ({need / GIB:.1f} GiB).")
        elif budget - w - VLLM_OVERHEAD_GIB * GIB < kv_want:
            seqs = int((budget - w - VLLM_OVERHEAD_GIB * GIB) / (kv_want / i.vllm_max_num_seqs))
            notes.append(f"vLLM's KV cache holds ~{seqs} of the {i.vllm_max_num_seqs} sequences a rollout wants at "
                         "once: generation runs in more waves (slower, not an error).")
        resident = ms["weights"] + extras + CUDA_CONTEXT_GIB * GIB
        if resident + budget > cap * GIB:
            notes.append(f"vLLM checks at start that util × capacity ({i.vllm_util * cap:.1f} GiB) is free, but "
                         f"training already holds {resident / GIB:.1f} GiB.")
    rollout += [Term("vLLM weights", w / GIB, "weights / TP"),
                Term("vLLM KV cache + overhead", (reserve - w) / GIB,
                     "reservation (util × capacity) beyond the weights: KV cache, CUDA graphs")]
    training.append(Term(f"vLLM while training (sleep_level {i.sleep_level})", vllm_asleep(i, reserve) / GIB,
                         "0: weights + KV kept; 1: weights to CPU RAM, KV freed; 2: both freed"))


def _allocator_reserve(i: Inputs, phase: Phase, generate_kv: float) -> list[Term]:
    """The caching allocator's reserve above what the training phase allocates, by cause (ALLOCATOR_RESERVE,
    GENERATE_RESERVE): steps of varying shapes, in proportion to the logits' tensors (none when every step has the same
    shapes: packing, padding to the maximum length; GRPO's completion lengths are taken to vary), and the KV cache
    generate() grew during the rollout
    (``generate_kv`` GiB). Together bounded by what the card has left (torch frees its cache before it would fail an
    allocation; ms-swift empties it before vLLM wakes, so it belongs to the training phase)."""
    shapes = 0.0 if i.fixed_shapes else ALLOCATOR_RESERVE * sum(t.gib for t in phase.terms if t.name == "logits")
    growth = GENERATE_RESERVE * generate_kv
    room = math.inf if i.capacity_gib is None else max(0.0, i.capacity_gib - phase.needed)
    shapes = min(shapes, room)
    return [Term("allocator cache: varying shapes", shapes, f"{ALLOCATOR_RESERVE:.0%} of the logits' memory, up to "
                 "the free memory (reclaimable)", reclaimable=True),
            Term("allocator cache: generate()", min(growth, room - shapes), f"{GENERATE_RESERVE:.0%} of the KV cache "
                 "generate() grew token by token (reclaimable)", reclaimable=True)]


def estimate(i: Inputs) -> MemoryReport:
    ms = model_states(i)
    extras = sum(extra_model_bytes(i, m) for m in i.extra_models)
    training = _training_terms(i, ms, extras)
    rollout = [Term("weights", 0.0 if i.offload_model else ms["weights"] / GIB, "policy weights (0 with offload_model)"),
               Term("optimizer states", 0.0 if i.offload_optimizer else ms["optimizer"] / GIB,
                    "kept unless offload_optimizer"),
               Term("reference/reward models", extras / GIB, "stay resident"), *_base_terms(i)]
    notes: list[str] = []
    phases = [Phase(TRAINING_PHASE, training)]
    kv = vllm_kv(i, 1, i.generation_batch, i.prompt_len + i.completion_len) if i.vllm == "none" else 0.0
    if i.vllm == "colocate":
        _vllm_colocate(i, ms, extras, training, rollout, notes)
        phases.append(Phase("rollout", rollout))
    elif i.vllm == "none":
        rollout.append(Term("generate() KV cache", kv / GIB, "transformers generation: micro-batch × steps per "
                            "generation sequences"))
        rollout.append(Term("ZeRO-3 gathered weights", zero3_generation_gather(i) / GIB,
                            "ds3_gather_for_generation: the whole model gathered beside its shard"))
        phases.append(Phase("rollout", rollout))
    phases.insert(1, optimizer_step_phase(i, ms, training))
    phases[0].terms += _allocator_reserve(i, phases[0], kv / GIB)
    roles = [RoleReport("trainer", i.gpu_name, i.capacity_gib, phases, notes)]
    if i.vllm == "server":
        roles.append(_server_role(i))
    return MemoryReport(i.arch.name, i.arch.total_params() / 1e9, roles, host_ram(i, ms), _assumptions(i))


def _server_role(i: Inputs) -> RoleReport:
    w = vllm_weight_bytes(i, i.server_tp)
    need = w + vllm_kv(i, i.server_tp, 1, i.server_max_len) + VLLM_OVERHEAD_GIB * GIB  # at least one sequence
    cap = i.capacity_gib
    reserve = max(i.server_util * cap * GIB, need) if cap else need
    srv = Phase("rollout", [Term("vLLM weights", w / GIB, "weights / TP"),
                            Term("vLLM KV cache + overhead", (reserve - w) / GIB,
                                 "util × capacity beyond the weights (≥ one max_model_len sequence)"),
                            Term("CUDA context", CUDA_CONTEXT_GIB, "per process")])
    return RoleReport("rollout", i.gpu_name, cap, [srv])


def host_ram(i: Inputs, ms: dict) -> dict[str, float]:
    """Host RAM per trainer node (GiB): offloaded optimizer states / params (pinned), offloaded policy during
    rollout, vLLM's weights backed up by sleep_level 1, plus ~1.5 × one shard of weights while loading safetensors
    (page cache excluded)."""
    per_proc = 0.0
    if (i.zero and i.zero.offload_optimizer) or (i.fsdp and i.fsdp.offload):
        per_proc += ms["trainable"] * 12 / i.world
    if i.weights_offloaded:
        per_proc += base_weight_bytes(i) / i.world
    if i.offload_model:
        per_proc += ms["weights"]
    if i.offload_optimizer:
        per_proc += ms["optimizer"]
    if i.vllm == "colocate" and i.sleep_level == 1:  # vLLM's CPU backup of its weights (vllm_asleep)
        per_proc += vllm_weight_bytes(i, i.vllm_tp)
    load = base_weight_bytes(i) * 1.5 / (i.world if i.shards_weights else 1)
    return {"per_trainer_node": (per_proc * i.nproc + load * i.nproc) / GIB + 4.0}


def _assumptions(i: Inputs) -> list[str]:
    engine = (f"DeepSpeed ZeRO-{i.stage}" + (" (optimizer offload)" if i.zero.offload_optimizer else "")
              if i.zero else "FSDP2" + (" (offload)" if i.fsdp.offload else "") if i.fsdp else "plain DDP")
    out = [f"sequence = prompt {i.prompt_len} + completion {i.completion_len} tokens, micro-batch {i.micro_batch}",
           f"{engine} over {i.world} GPUs", f"attention kernel {i.attn}" + (", gradient checkpointing" if i.grad_ckpt
                                                                              else "")]
    if i.quant:
        out.append(f"decoder linears quantised ({i.quant})")
    if i.image_tokens:
        out.append(f"{i.image_tokens} vision tokens per sequence")
    out += [f"{m.role} model {m.arch.name} on every trainer GPU" for m in i.extra_models]
    if i.vllm == "colocate":
        out.append(f"vLLM colocate: {i.vllm_max_num_seqs} seqs × {i.vllm_max_len} tokens, TP {i.vllm_tp}, "
                   "vLLM's budget = util × capacity on top of training")
    return out


def estimate_spec(job: JobSpec | Resolved, gpu: str | None = None, arch: ModelArch | None = None,
                  gpu_gib: float | None = None) -> MemoryReport:
    """The estimate for a job, its spec or Resolved values (see inputs_from_spec for the overrides). Raises
    EstimateError."""
    return estimate(inputs_from_spec(job, gpu, arch, gpu_gib))


def format_report(report: MemoryReport) -> str:
    lines = [f"{report.model} ({report.params_b:.2f} B params) — verdict: {report.verdict.upper()}"]
    for r in report.roles:
        cap = f"{r.capacity_gib:.1f} GiB {r.gpu or ''}".rstrip() if r.capacity_gib else "no GPU model chosen"
        margin = (f" (with the estimate's +{ESTIMATE_MARGIN:.0%} error margin {r.margin_peak_gib:.1f} GiB)"
                  if r.verdict == "tight" else "")
        lines.append(f"\n[{r.role} GPU: {cap}] peak {r.peak_gib:.1f} GiB in {r.peak_phase} → {r.verdict}{margin}"
                     + (f", headroom {r.headroom_gib:+.1f} GiB" if r.headroom_gib is not None else "")
                     + f"; nvidia-smi will show about {r.expected_gib:.1f} GiB")
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
