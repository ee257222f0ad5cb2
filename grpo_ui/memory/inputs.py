"""What the memory estimate takes (``Inputs``), and the one adapter from a resolved job (``inputs_from_spec``)."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

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
from grpo_ui.memory.layout import Layout, layout_of
from grpo_ui.memory.report import UnknownModel
from grpo_ui.spec.model import JobSpec
from grpo_ui.spec.resolve import Resolved, model_arch, resolve


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
    expandable_segments: bool = False  # PYTORCH_CUDA_ALLOC_CONF asks torch's allocator for expandable segments
    zero3_prefetch: float = 0.0  # stage3_prefetch_bucket_size (elements): ms-swift GRPO sets 0, HF 'auto' is 0.9·h²
    fsdp_fp32_frozen: bool = False  # accelerate < 1.13 upcasts frozen parameters to fp32 under FSDP2 too
    megatron: Layout | None = None  # megatron rlhf: Megatron-Core's layout (memory/megatron.py), else None

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
    if eff.reference_model:
        extra.append(ExtraModel("reference", resolve_arch(t.ref_model, "train.ref_model") if t.ref_model else arch))
    extra += [ExtraModel("reward", resolve_arch(m, f"train.reward_model[{k}]")) for k, m in enumerate(t.reward_model or [])]
    inputs = Inputs(
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
        expandable_segments="expandable_segments:true" in env.get("PYTORCH_CUDA_ALLOC_CONF", "").replace(" ", "").lower(),
        sleep_level=r.sleep_level if vllm == "colocate" else 0, offload_model=r.offload_model and vllm == "colocate",
        offload_optimizer=r.offload_optimizer and vllm == "colocate",
        generation_batch=t.per_device_train_batch_size * spg, capacity_gib=capacity, gpu_name=gpu_name,
        server_util=own_gpu[0], server_tp=own_gpu[1], server_max_len=own_gpu[2])
    return _megatron_inputs(eff, inputs) if eff.megatron else inputs


def _megatron_inputs(eff: Resolved, i: Inputs) -> Inputs:
    """A megatron rlhf job's inputs: its Layout, its engine's defaults (tuner_type full, LoRA's rank, dropout and
    targets as megatron rlhf takes them), the micro-batch and the step's micro-batches, full recomputation as
    gradient checkpointing, unfused attention as eager; the reference model whenever tuning is full (ms-swift's
    MegatronRLHFTrainer.prepare_model builds it whatever beta is); vLLM's default max_num_seqs per_device
    generation batch × vLLM TP (rollout_mixin.py _prepare_vllm_engine); Ray's separate rollout GPUs are a rollout
    server's, and Ray's sleep_level its placement's."""
    spec, mv = eff.spec, eff.megatron
    value = spec.value_of
    layout = layout_of(mv, i.arch, value("train.decoder_first_pipeline_num_layers"),
                       value("train.decoder_last_pipeline_num_layers"))
    vllm = "server" if eff.vllm_mode == "separate" else i.vllm
    colocate = vllm == "colocate"
    per_device = max(mv.generation_batch // max(mv.world, 1), 1)
    return replace(
        i, megatron=layout, full=mv.full_tuning, lora_rank=value("train.lora_rank"),
        lora_dropout=value("train.lora_dropout"), lora_targets=_lora_targets(value("train.target_modules"), i.arch),
        zero=None, fsdp=None, world=layout.world, micro_batch=mv.micro_batch, grad_accum=layout.micro_batches,
        grad_ckpt=mv.recompute == "full", attn="eager" if value("train.attention_backend") == "unfused" else "flash",
        liger=False, sequence_parallel=1, extra_models=(ExtraModel("reference", i.arch),) if mv.full_tuning else (),
        vllm=vllm, vllm_max_num_seqs=spec.rollout.vllm_max_num_seqs or per_device * i.vllm_tp,
        sleep_level=(eff.ray.sleep_level if eff.ray else i.sleep_level) if colocate else 0,
        offload_model=mv.offload_model and colocate, offload_optimizer=mv.offload_optimizer and colocate,
        generation_batch=per_device)


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
