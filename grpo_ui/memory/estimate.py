"""Per-GPU memory estimate for a GRPO job: every term, each phase (forward/backward, optimizer step, rollout), and a
verdict against the GPU's capacity.

Pure functions over ``Inputs`` (inputs.py; ``inputs_from_spec`` is the one adapter from a job). GiB = 2**30 bytes.
Each term's docstring (states.py, dynamic.py, vllm.py, and the overheads here) gives its formula and source:
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

from dataclasses import replace

from grpo_ui.knowledge.catalog import (
    ModelArch,
)
from grpo_ui.memory import megatron
from grpo_ui.memory.dynamic import (
    activations,
    autocast_cache,
    dequant_buffers,
    extra_model_bytes,
    logits,
    step_temporaries,
    vision_activations,
)
from grpo_ui.memory.inputs import Inputs, inputs_from_spec
from grpo_ui.memory.report import GIB, MemoryReport, Phase, RoleReport, Term, VllmShare
from grpo_ui.memory.states import base_weight_bytes, live_gradients, model_states, sharding_buffers
from grpo_ui.memory.vllm import VLLM_OVERHEAD_GIB, vllm_asleep, vllm_kv, vllm_weight_bytes, zero3_generation_gather
from grpo_ui.spec.model import JobSpec
from grpo_ui.spec.resolve import Resolved

CUDA_CONTEXT_GIB = 0.5      # CUDA context + kernels per process (typ. 0.3–0.6 GiB with lazy module loading)
NCCL_GIB = 0.5              # NCCL communicator buffers when world > 1 (channels × NCCL_BUFFSIZE 4 MiB, plus streams)
# The caching allocator keeps freed blocks reserved and gives them back only when an allocation would otherwise fail
# (c10/cuda/CUDACachingAllocator.cpp: release_cached_blocks on a failed cudaMalloc, then one retry), so what it holds
# above the allocated peak is never what makes a job run out of memory. Without expandable segments (ms-swift sets
# none: rlhf_trainers/utils.set_expandable_segments only toggles them around vLLM's wake-up when the user's
# PYTORCH_CUDA_ALLOC_CONF already names them) every cudaMalloc is its own segment, and a block freed in one segment
# cannot merge with one in another. Two workloads leave such blocks, each with its own reserve above the peak:
# - shapes that change from step to step (sequence lengths): a step longer than every step before needs blocks the
#   cached ones are too small for. Layer activations are many tensors of one layer's size, allocated and freed in
#   stack order, whose freed blocks coalesce and serve the next step; the logits' path allocates the step's largest
#   single tensors (fp32 copies of the logits and their gradients, each hundreds of MB to GBs), which need new
#   segments whenever a longer step comes. ALLOCATOR_RESERVE × the logits term, fitted on the fit set's rows
#   (bench/memory_accuracy.py: the reserve in proportion to the logits fits them better than in proportion to all
#   dynamic memory, which overshoots the rows without gradient checkpointing); none when every step has the same
#   shapes. Bounded by what such blocks can be: freed blocks of earlier, shorter steps that set a new length record,
#   each no larger than this phase's dynamic memory (activations, logits and the rest that lives only inside a
#   micro-step). Lengths capped at max_completion_length set few records before one reaches the cap, after which the
#   cap-sized blocks serve every step: at most CACHED_STEPS such steps are taken to stay cached (on the fit rows the
#   bound changes no median and moves the p90 by 1 point). So the reserve follows the job's own tensors and never
#   becomes the card's free memory by itself;
# - transformers' generate(): DynamicCache grows each layer's keys and values by torch.cat at every decoding step
#   (cache_utils.py DynamicLayer.update), a tensor one token longer beside the old one, so the freed copies are always
#   a little too small for the next ones. CoursIA's probe runs (fit set: reserved and allocated of the same TRL runs,
#   training shapes fixed) keep 1.2-1.6 × the final KV cache above the allocated peak; GENERATE_RESERVE is their median.
# With expandable segments (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True) one segment per stream grows by mapping
# pages and its freed blocks merge, so a longer step reuses them: no reserve beyond page rounding.
ALLOCATOR_RESERVE = 2.5
CACHED_STEPS = 2
GENERATE_RESERVE = 1.4
TRAINING_PHASE = "training"


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


def _vllm_share(i: Inputs, util: float, tp: int, max_len: int, sequences: int) -> VllmShare:
    """vLLM's share of a GPU: its weights ÷ TP, the KV cache of one max_len sequence, the sequences a rollout wants."""
    return VllmShare(util, tp, i.capacity_gib, vllm_weight_bytes(i, tp) / GIB, VLLM_OVERHEAD_GIB,
                     vllm_kv(i, tp, 1, max_len) / GIB, sequences)


def _vllm_colocate(i: Inputs, ms: dict, extras: float, training: list[Term], rollout: list[Term],
                   notes: list[str]) -> VllmShare:
    """Adds vLLM's terms to both phases and its notes; returns its share. vLLM's budget is its own share on top of
    what training holds: its memory profiling counts only what the instance adds to a baseline snapshot
    (vllm-project/vllm#10511, v0.6.5+)."""
    share = _vllm_share(i, i.vllm_util, i.vllm_tp, i.vllm_max_len, i.vllm_max_num_seqs)
    w = share.weights_gib * GIB
    cap = i.capacity_gib
    if cap is None:
        reserve = (share.weights_gib + share.overhead_gib + share.sequence_gib * share.sequences_wanted) * GIB
        notes.append("No GPU model chosen: vLLM counted at what it needs, not its reservation.")
    else:
        reserve = max(share.budget_gib, share.start_gib) * GIB
        if not share.starts:
            notes.append(share.cannot_start())
        elif share.short:
            notes.append(f"vLLM's KV cache holds ~{share.sequences_held} of the {share.sequences_wanted} sequences a "
                         "rollout wants at once: generation runs in more waves (slower, not an error).")
        resident = ms["weights"] + extras + CUDA_CONTEXT_GIB * GIB
        if resident + share.budget_gib * GIB > cap * GIB:
            notes.append(f"vLLM checks at start that util × capacity ({i.vllm_util * cap:.1f} GiB) is free, but "
                         f"training already holds {resident / GIB:.1f} GiB.")
    rollout += [Term("vLLM weights", w / GIB, "weights / TP"),
                Term("vLLM KV cache + overhead", (reserve - w) / GIB,
                     "reservation (util × capacity) beyond the weights: KV cache, CUDA graphs")]
    training.append(Term(f"vLLM while training (sleep_level {i.sleep_level})", vllm_asleep(i, reserve) / GIB,
                         "0: weights + KV kept; 1: weights to CPU RAM, KV freed; 2: both freed"))
    return share


UNBOUNDED_CACHE = ("Torch's cache above the peak (what nvidia-smi shows beyond it) is bounded by the card: it is "
                   "estimated once a GPU model is chosen.")


def _allocator_reserve(i: Inputs, phase: Phase, generate_kv: float) -> list[Term]:
    """The caching allocator's reserve above what the training phase allocates, by cause (ALLOCATOR_RESERVE,
    GENERATE_RESERVE): steps of varying shapes, in proportion to the logits' tensors and at most the phase's dynamic
    memory (none when every step has the same shapes: packing, padding to the maximum length; GRPO's completion
    lengths are taken to vary), and the KV cache generate() grew during the rollout (``generate_kv`` GiB). None with
    expandable segments. Each bounded by what it can physically hold, and together by
    what the card has left (torch frees its cache before it would fail an allocation; ms-swift empties it before
    vLLM wakes, so it belongs to the training phase): none without a GPU model, whose card would bound it."""
    if i.expandable_segments:
        shapes = growth = 0.0
    else:
        dynamic = sum(t.gib for t in phase.terms if t.name in DYNAMIC)
        logits_gib = sum(t.gib for t in phase.terms if t.name == "logits")
        shapes = 0.0 if i.fixed_shapes else min(ALLOCATOR_RESERVE * logits_gib, CACHED_STEPS * dynamic)
        growth = GENERATE_RESERVE * generate_kv
    room = 0.0 if i.capacity_gib is None else max(0.0, i.capacity_gib - phase.needed)
    shapes = min(shapes, room)
    return [Term("allocator cache: varying shapes", shapes, f"{ALLOCATOR_RESERVE:.0%} of the logits' memory, at most "
                 f"{CACHED_STEPS} steps' dynamic memory; none with expandable segments (reclaimable)", reclaimable=True),
            Term("allocator cache: generate()", min(growth, room - shapes), f"{GENERATE_RESERVE:.0%} of the KV cache "
                 "generate() grew token by token (reclaimable)", reclaimable=True)]


def estimate(i: Inputs) -> MemoryReport:
    if i.megatron:
        return _estimate_megatron(i)
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
    share = None
    if i.vllm == "colocate":
        share = _vllm_colocate(i, ms, extras, training, rollout, notes)
        phases.append(Phase("rollout", rollout))
    elif i.vllm == "none":
        rollout.append(Term("generate() KV cache", kv / GIB, "transformers generation: micro-batch × steps per "
                            "generation sequences"))
        rollout.append(Term("ZeRO-3 gathered weights", zero3_generation_gather(i) / GIB,
                            "ds3_gather_for_generation: the whole model gathered beside its shard"))
        phases.append(Phase("rollout", rollout))
    phases.insert(1, optimizer_step_phase(i, ms, training))
    phases[0].terms += _allocator_reserve(i, phases[0], kv / GIB)
    notes += [UNBOUNDED_CACHE] if i.capacity_gib is None else []
    roles = [RoleReport("trainer", i.gpu_name, i.capacity_gib, phases, notes, share)]
    if i.vllm == "server":
        roles.append(_server_role(i))
    return MemoryReport(i.arch.name, i.arch.total_params() / 1e9, roles, host_ram(i, ms), _assumptions(i))


def _estimate_megatron(i: Inputs) -> MemoryReport:
    """A megatron rlhf job (memory/megatron.py's terms) in the same phases as the DeepSpeed path: training (for the
    pipeline stage that needs the most), the optimizer step, and the rollout with vLLM colocated or on its own
    GPUs."""
    stage = megatron.peak_stage(i)
    ms = megatron.model_states(i, stage)
    reference = megatron.reference_bytes(i, stage)
    training = [*megatron.training_terms(i, ms, reference, stage), *_base_terms(i)]
    rollout = [*megatron.rollout_terms(i, ms, reference), *_base_terms(i)]
    notes: list[str] = []
    share = _vllm_colocate(i, ms, reference, training, rollout, notes) if i.vllm == "colocate" else None
    phases = [Phase(TRAINING_PHASE, training), Phase("optimizer step", megatron.step_terms(ms, training)),
              Phase("rollout", rollout)]
    phases[0].terms += _allocator_reserve(i, phases[0], 0.0)
    notes += [UNBOUNDED_CACHE] if i.capacity_gib is None else []
    roles = [RoleReport("trainer", i.gpu_name, i.capacity_gib, phases, notes, share)]
    if i.vllm == "server":
        roles.append(_server_role(i))
    host = megatron.host_ram_per_process(i, ms, reference)
    if i.vllm == "colocate" and i.sleep_level == 1:  # vLLM's CPU backup of its weights (vllm_asleep)
        host += vllm_weight_bytes(i, i.vllm_tp)
    load = base_weight_bytes(i) * 1.5 / i.megatron.tp / i.megatron.pp
    return MemoryReport(i.arch.name, i.arch.total_params() / 1e9, roles,
                        {"per_trainer_node": (host + load) * i.nproc / GIB + 4.0}, megatron.assumptions(i, stage))


def _server_role(i: Inputs) -> RoleReport:
    share = _vllm_share(i, i.server_util, i.server_tp, i.server_max_len, 1)
    reserve = max(share.budget_gib or 0.0, share.start_gib)  # at least one sequence
    srv = Phase("rollout", [Term("vLLM weights", share.weights_gib, "weights / TP"),
                            Term("vLLM KV cache + overhead", reserve - share.weights_gib,
                                 "util × capacity beyond the weights (≥ one max_model_len sequence)"),
                            Term("CUDA context", CUDA_CONTEXT_GIB, "per process")])
    return RoleReport("rollout", i.gpu_name, i.capacity_gib, [srv], vllm=share)


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
