"""Validation: ms-swift's own GRPO checks (argument parsing and trainer init) done up front, plus field advisories.

Each rule is a small function ``(spec, eff) -> findings`` (``eff``: the job's effective values, grpo_ui.spec.resolve);
RULES lists every finding id with the ms-swift check (reference §3 V#/R#) or field report it stands for.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator

from grpo_ui.core.findings import Finding, finding
from grpo_ui.knowledge.catalog import find_model, params_from_name
from grpo_ui.spec.model import JobSpec
from grpo_ui.spec.resolve import Resolved, resolve
from grpo_ui.spec.swift_args import BUILTIN_REWARDS

# id → (what it checks, the ms-swift check or field report it covers)
RULES: dict[str, tuple[str, str]] = {
    "SPEC-MODEL-MISSING": ("a model is given", "swift arg parsing"),
    "MODEL-BARE-NAME": ("a catalogue model is given as its Hub id (owner/name), not its bare name", "download"),
    "SPEC-DATASET-MISSING": ("a training dataset is given", "V2"),
    "IMPORT-UNRESOLVED": ("no value is left to the imported script's shell", "import"),
    "TRUNCATION-STRATEGY": ("GRPO allows only left or delete truncation", "V4"),
    "REF-MODEL-LORA": ("no ref_model with LoRA", "V5"),
    "SOFT-OVERLONG-CACHE": ("soft_overlong needs soft_cache_length < soft_max_length", "V6"),
    "WARMUP-BOTH": ("warmup_ratio and warmup_steps are exclusive", "V7"),
    "VLLM-MODE-WITHOUT-VLLM": ("vllm_mode only with use_vllm", "V8"),
    "VLLM-MODE-REQUIRED": ("vllm_mode required with use_vllm (3.12+)", "V8"),
    "VLLM-SERVER-NO-HOST": ("server mode needs servers", "V9"),
    "ASYNC-NEEDS-SERVER": ("async_generate needs server mode", "V10"),
    "ASYNC-MULTI-TURN": ("async_generate does not support multi-turn", "V11"),
    "TRAINER-GPU-COUNT": ("every trainer node uses the same number of GPUs (NPROC_PER_NODE)", "V12"),
    "VLLM-SERVER-PORTS": ("one port (and group port) per server host", "V13"),
    "VLLM-SERVER-MAX-LEN": ("vllm_max_model_len is ignored in server mode", "V14"),
    "VLLM-TP-WITHOUT-VLLM": ("TP is reset to 1 without vLLM", "V15"),
    "VLLM-TP-WORLD": ("colocate TP divides the world size and fits within a node", "V16"),
    "FSDP-DEEPSPEED": ("FSDP2 and DeepSpeed are exclusive", "V18"),
    "GRPO-GEN-BATCH-DIV": ("generation_batch_size divisible by the global batch", "V21"),
    "GRPO-GEN-BATCH-MISMATCH": ("generation_batch_size == per_device × world × steps_per_generation", "V22"),
    "GRPO-STEPS-PER-GEN": ("steps_per_generation > 0", "V23"),
    "GRPO-BATCH-DIV": ("generation batch divisible by num_generations", "V24"),
    "GRPO-EVAL-BATCH-DIV": ("eval batch divisible by num_generations_eval", "V25"),
    "GRPO-NUM-GEN-MIN": ("num_generations ≥ 2", "V26"),
    "REWARD-MISSING": ("some reward function or model", "V28"),
    "REWARD-UNKNOWN": ("reward names are built in or come from external_plugins", "V29"),
    "REWARD-WEIGHTS-COUNT": ("one weight per reward source", "V30"),
    "REWARD-PLUGIN-COUNT": ("one reward_model_plugin per reward model", "V30"),
    "LOSS-REAL-SCALE": ("loss_type real forces scale_rewards none", "V32"),
    "LIGER-INCOMPATIBLE": ("Liger kernel incompatibilities", "V33"),
    "PADDING-FREE-ATTN": ("padding_free needs flash attention", "V34"),
    "VLLM-LORA": ("vllm_enable_lora needs LoRA; server max_lora_rank ≥ lora_rank", "V20 / rollout args"),
    "SLEEP-LEVEL-IGNORED": ("sleep_level is forced to 0 without colocated vLLM", "rlhf_args.py:346"),
    "SLEEP-LEVEL-GAS": ("3.2.1–3.3 force gradient_accumulation_steps 1 with sleep_level", "issue #3943"),
    "OFFLOAD-IGNORED": ("offload_model/offload_optimizer act only in colocate mode", "rollout_mixin"),
    "VERSION-GEN-AND-STEPS": ("4.0–4.3 reject generation_batch_size and steps_per_generation together", "V22"),
    "VERSION-FLAG-UNSUPPORTED": ("a set field the target version lacks (reported by swift_cli)", "V1"),
    "VERSION-MULTI-SERVER": ("one rollout server before 3.7 (reported by swift_cli)", "V13"),
    "ROLLOUT-GPUS": ("TP × DP fits the rollout node's GPUs", "R4"),
    "CLUSTER-NO-TRAINER": ("at least one trainer node", "launch"),
    "CLUSTER-ROLLOUT-UNUSED": ("rollout nodes only in server mode", "launch"),
    "CLUSTER-GPU-OVERLAP": ("no two nodes on one host share a GPU", "launch / seed 000"),
    "MASTER-LOOPBACK": ("MASTER_ADDR is routable when NNODES > 1", "seed 003, issue #2485"),
    "PORT-CLASH": ("rendezvous, server and group ports differ", "launch"),
    "PATH-RELATIVE-NO-WORKDIR": ("relative model/dataset paths need a workdir to be read from", "hub_utils.py"),
    "SEED-ZERO3-KL0": ("ZeRO-3, per-device batch 1 and accumulation: parameters not updating", "seed 001"),
    "SEED-OFFLOAD-STALL": ("offload on a large model stalls between rollout and training", "seed 000"),
    "SEED-VLLM-UTIL-LOW": ("vLLM share too small for the model's weights and KV cache", "seeds 000, 004"),
    "SEED-TP-SPANS-NODE": ("colocated TP over every GPU with async/offload on them", "seed 000"),
    "SEED-OFFLOAD-SMALL": ("offload on a small model leaves GPUs idle", "seed 002"),
    "SEED-DATALOADER-WORKERS": ("too few dataloader workers starve the GPUs", "seed 002"),
    "SEED-NODE-DIFFER": ("per-node settings differ in more than NODE_RANK", "seed 003"),
    "SEED-REF-MODEL": ("beta > 0 with full tuning loads a second full model", "Qwen2_5_32B_full.sh"),
    "ENV-SECRET-MOVED": ("token-like names in env become secret_env names, their values dropped", "SECURITY.md"),
}

Rule = Callable[[JobSpec, Resolved], Iterator[Finding]]
_RULES: list[Rule] = []


def rule(fn: Rule) -> Rule:
    _RULES.append(fn)
    return fn


def validate(job: JobSpec | Resolved) -> list[Finding]:
    """Every finding for the job (a spec, or its Resolved values), in rule order."""
    eff = resolve(job)
    return [f for check in _RULES for f in check(eff.spec, eff)]


# ---------------------------------------------------------------------------------------------------------------
# What the rules say about the model (its effective values come from grpo_ui.spec.resolve)

def model_size_b(eff: Resolved) -> float | None:
    """Billions of parameters: the model's architecture, else its name."""
    return eff.arch.total_params() / 1e9 if eff.arch else params_from_name(eff.spec.train.model or "")


def size_label(eff: Resolved) -> str:
    """'32B' for Qwen2.5-32B (the size its name gives, not the 32.8 counted), else two significant digits."""
    named = params_from_name(eff.spec.train.model or "")
    size = named or model_size_b(eff) or 0
    return f"{size:g}B" if named else f"{float(f'{size:.2g}'):g}B"


def is_multimodal(eff: Resolved) -> bool:
    """A vision(-language) policy: its architecture has a vision tower, or its name says VL/vision/omni."""
    return bool(eff.arch and eff.arch.vision) or bool(re.search(
        r"(?i)(\bvl\b|-vl|vl-|vision|omni|llava|internvl|qvq)", eff.spec.train.model or ""))


def _near(values, current, k=2) -> list[int]:
    """Up to k values on each side of current, nearest first."""
    below = sorted((v for v in values if v < current), reverse=True)[:k]
    above = sorted(v for v in values if v > current)[:k]
    return sorted(below + above, key=lambda v: (abs(v - current), v))


# ---------------------------------------------------------------------------------------------------------------
# Required inputs

@rule
def required_inputs(spec, eff):
    t = spec.train
    if not (t.model or "").strip():
        yield finding("SPEC-MODEL-MISSING", "error", "train.model", "No model is set.",
                      "Set train.model to a hub id (e.g. Qwen/Qwen2.5-7B-Instruct) or a local path on every node.")
    elif "/" not in t.model and not t.model.startswith(("~", ".")) and (known := find_model(t.model)) and known.hub:
        yield finding("MODEL-BARE-NAME", "warning", "train.model", f"`{t.model}` is neither a Hub id (owner/name) "
                      "nor a path: unless the working directory holds a folder of that name, the download fails.",
                      f"Use the Hub id, e.g. {known.hub[0]}.", {"train.model": known.hub[0]})
    if not t.dataset:
        yield finding("SPEC-DATASET-MISSING", "error", "train.dataset", "No training dataset is set.",
                      "Add a dataset: a hub id, optionally with #N samples, or a local .jsonl path.")


@rule
def unresolved(spec, eff):
    for path, text in spec.unresolved.items():
        yield finding("IMPORT-UNRESOLVED", "error", path, f"{path} is `{text}` in the imported script: a value only "
                      "the shell that ran it knew (a variable it never set, $(…), ~ or a script argument).",
                      f"Fill in {path} with the value it has when the script runs.")


@rule
def truncation(spec, eff):
    ts = spec.train.truncation_strategy
    if ts not in (None, "left", "delete"):
        yield finding("TRUNCATION-STRATEGY", "error", "train.truncation_strategy",
                      f"GRPO requires truncation_strategy 'left' or 'delete'; it is {ts!r}.",
                      "Set truncation_strategy to left (keep the end of long prompts) or delete (drop them).",
                      {"train.truncation_strategy": "left"})


@rule
def ref_model_lora(spec, eff):
    if spec.train.ref_model and spec.train.tuner_type != "full" and eff.beta != 0:
        yield finding("REF-MODEL-LORA", "error", ("train.ref_model", "train.tuner_type"),
                      "LoRA training does not take a ref_model: the frozen base model is the reference.",
                      "Clear train.ref_model.", {"train.ref_model": None})


@rule
def soft_overlong(spec, eff):
    t = spec.train
    if "soft_overlong" not in t.reward_funcs:
        return
    if t.soft_cache_length is None:
        yield finding("SOFT-OVERLONG-CACHE", "error", "train.soft_cache_length",
                      "The soft_overlong reward needs soft_cache_length.",
                      "Set soft_cache_length (the penalty-free margin) below soft_max_length.")
    elif t.soft_max_length is not None and t.soft_cache_length >= t.soft_max_length:
        yield finding("SOFT-OVERLONG-CACHE", "error", ("train.soft_cache_length", "train.soft_max_length"),
                      f"soft_cache_length ({t.soft_cache_length}) must be < soft_max_length ({t.soft_max_length}).",
                      "Lower soft_cache_length or raise soft_max_length.")


@rule
def warmup(spec, eff):
    if spec.train.warmup_ratio and spec.train.warmup_steps:
        yield finding("WARMUP-BOTH", "error", ("train.warmup_ratio", "train.warmup_steps"),
                      f"warmup_ratio ({spec.train.warmup_ratio}) and warmup_steps ({spec.train.warmup_steps}) "
                      "cannot be set at the same time.", "Keep one of them; set the other to 0.",
                      {"train.warmup_steps": 0})


# ---------------------------------------------------------------------------------------------------------------
# Rollout mode

@rule
def vllm_mode(spec, eff):
    r = spec.rollout
    if not r.use_vllm and r.vllm_mode is not None:
        yield finding("VLLM-MODE-WITHOUT-VLLM", "error", ("rollout.vllm_mode", "rollout.use_vllm"),
                      "vllm_mode is not supported when use_vllm is false.",
                      "Turn use_vllm on, or clear vllm_mode.", {"rollout.vllm_mode": None})
    if r.use_vllm and r.vllm_mode is None and eff.version >= (3, 5, 0):
        required = eff.version >= (3, 12, 0)
        yield finding("VLLM-MODE-REQUIRED", "error" if required else "info", "rollout.vllm_mode",
                      "vllm_mode is required when use_vllm is true (since ms-swift 3.12)." if required else
                      f"ms-swift {spec.swift_version} defaults vllm_mode to colocate; 3.12+ requires it.",
                      "Choose colocate (vLLM on the training GPUs) or server (swift rollout nodes).",
                      {"rollout.vllm_mode": "colocate"})
    if r.vllm_tensor_parallel_size != 1 and not r.use_vllm:
        yield finding("VLLM-TP-WITHOUT-VLLM", "warning", "rollout.vllm_tensor_parallel_size",
                      f"vllm_tensor_parallel_size is {r.vllm_tensor_parallel_size} but use_vllm is false; "
                      "ms-swift resets it to 1.", "Set it to 1 or turn use_vllm on.",
                      {"rollout.vllm_tensor_parallel_size": 1})


def _async_needs_own_gpus(spec, eff) -> Finding:
    """async_generate rolls out while training: vLLM must not share the training GPUs. From 3.5 that means server
    mode; 3.2–3.4 had no vllm_mode and ran it on GPUs of its own (NPROC_PER_NODE + num_infer_workers = GPUs) or a
    server (vllm_server_host, from 3.3.1)."""
    if eff.version >= (3, 5, 0):
        return finding("ASYNC-NEEDS-SERVER", "error", ("rollout.async_generate", "rollout.vllm_mode"),
                       "async_generate requires vllm_mode server.",
                       "Use server mode with swift rollout nodes, or turn async_generate off.",
                       {"rollout.async_generate": False})
    return finding("ASYNC-NEEDS-SERVER", "error", ("rollout.async_generate", "rollout.num_infer_workers"),
                   f"In ms-swift {spec.swift_version} async_generate needs vLLM on GPUs of its own, but it shares "
                   "all the training GPUs (num_infer_workers is the GPU count).",
                   "Set num_infer_workers below the GPU count (training uses the rest), use a rollout server "
                   "(vllm_server_host, 3.3.1+), or turn async_generate off.", {"rollout.async_generate": False})


@rule
def server_mode(spec, eff):
    r = spec.rollout
    own_gpus = eff.version < (3, 5, 0) and (eff.spare_rollout_gpus or r.vllm_server_host)
    if r.async_generate and not eff.server and not own_gpus:
        yield _async_needs_own_gpus(spec, eff)
    if r.async_generate and spec.train.multi_turn_scheduler:
        yield finding("ASYNC-MULTI-TURN", "error", ("rollout.async_generate", "train.multi_turn_scheduler"),
                      "async_generate is not supported with multi-turn rollouts.", "Turn async_generate off.",
                      {"rollout.async_generate": False})
    if not eff.server:
        return
    if not eff.server_endpoints:
        yield finding("VLLM-SERVER-NO-HOST", "error", ("rollout.vllm_server_host", "cluster.nodes"),
                      "Server mode needs rollout servers: no rollout node and no vllm_server_host is set.",
                      "Add a node with role rollout on the Cluster page, or set rollout.vllm_server_host.")
    hosts, ports, groups = r.vllm_server_host or [], r.vllm_server_port, r.vllm_server_group_port or []
    if hosts and len(ports) != len(hosts):
        yield finding("VLLM-SERVER-PORTS", "error", ("rollout.vllm_server_host", "rollout.vllm_server_port"),
                      f"{len(hosts)} server host(s) but {len(ports)} port(s): the lists must have the same length.",
                      "Give one port per host.", {"rollout.vllm_server_port": [ports[0]] * len(hosts)})
    n = len(eff.server_endpoints)
    if groups and len(groups) != n:  # ms-swift's VLLMClient: "group_port must be int or list of length num_servers"
        yield finding("VLLM-SERVER-PORTS", "error", "rollout.vllm_server_group_port",
                      f"{len(groups)} group port(s) for {n} server(s): ms-swift takes one per server and fails at "
                      "start-up otherwise.",
                      "Clear vllm_server_group_port to use 51216 + i.", {"rollout.vllm_server_group_port": None})
    if r.vllm_max_model_len is not None:
        yield finding("VLLM-SERVER-MAX-LEN", "warning", "rollout.vllm_max_model_len",
                      "vllm_max_model_len on the trainer is ignored in server mode.",
                      "Set server.vllm_max_model_len (swift rollout) instead.",
                      {"rollout.vllm_max_model_len": None, "server.vllm_max_model_len": r.vllm_max_model_len})


@rule
def sleep_and_offload(spec, eff):
    r = spec.rollout
    if r.sleep_level and not eff.colocate:
        yield finding("SLEEP-LEVEL-IGNORED", "warning", "rollout.sleep_level",
                      f"sleep_level {r.sleep_level} only acts with colocated vLLM; ms-swift forces it to 0 here.",
                      "Set sleep_level to 0.", {"rollout.sleep_level": 0})
    if (r.offload_model or r.offload_optimizer) and not eff.colocate:
        yield finding("OFFLOAD-IGNORED", "warning", ("rollout.offload_model", "rollout.offload_optimizer"),
                      "offload_model / offload_optimizer free GPU memory for colocated vLLM only.",
                      "Turn them off.", {"rollout.offload_model": False, "rollout.offload_optimizer": False})
    if r.sleep_level and eff.colocate and (3, 2, 1) <= eff.version < (3, 4, 0) and eff.grad_accum != 1:
        yield finding("SLEEP-LEVEL-GAS", "info", ("rollout.sleep_level", "train.gradient_accumulation_steps"),
                      f"ms-swift {spec.swift_version} forces gradient_accumulation_steps to 1 when sleep_level > 0.",
                      "Expect GAS 1, or use ms-swift ≥ 3.4.")


@rule
def tensor_parallel(spec, eff):
    tp, world, nproc = spec.rollout.vllm_tensor_parallel_size, eff.world_size, eff.nproc_per_node
    if not eff.colocate or tp == 1 or not world:
        return
    if world % tp:
        yield finding("VLLM-TP-WORLD", "error", "rollout.vllm_tensor_parallel_size",
                      f"vllm_tensor_parallel_size ({tp}) must divide the world size ({world}) evenly.",
                      f"Use a TP size that divides {world}: {[d for d in range(1, nproc + 1) if world % d == 0]}.")
    elif nproc % tp:
        yield finding("VLLM-TP-WORLD", "error", "rollout.vllm_tensor_parallel_size",
                      f"TP groups are consecutive ranks: TP {tp} must divide the GPUs per node ({nproc}) so a group "
                      "never spans two nodes.", f"Use a TP size that divides {nproc}.")


@rule
def fsdp_deepspeed(spec, eff):
    if spec.train.fsdp and spec.train.deepspeed:
        yield finding("FSDP-DEEPSPEED", "error", ("train.fsdp", "train.deepspeed"),
                      "FSDP2 is not compatible with DeepSpeed.", "Clear one of train.fsdp and train.deepspeed.",
                      {"train.fsdp": None})


# ---------------------------------------------------------------------------------------------------------------
# Batch arithmetic

def _accumulation_knob(spec, eff) -> str | None:
    """The field that multiplies the checked batch in this version (none before 3.4, nor when
    generation_batch_size fixes the batch)."""
    v = eff.version
    if v < (3, 4, 0) or (v >= (3, 5, 0) and spec.train.generation_batch_size is not None
                         and spec.train.steps_per_generation is None):
        return None
    if v < (3, 5, 0) or not spec.train.steps_per_generation:
        return "train.gradient_accumulation_steps"
    return "train.steps_per_generation"


def _valid_batch_knobs(spec, eff) -> dict[str, list[int]]:
    """Nearest values of each knob that make the checked batch divisible by num_generations."""
    t, world = spec.train, eff.world_size
    pd, ng, nproc = t.per_device_train_batch_size, t.num_generations, max(eff.nproc_per_node, 1)
    acc_key = _accumulation_knob(spec, eff)
    factor = eff.generation_batch // (pd * world)
    out = {
        "train.per_device_train_batch_size": _near([p for p in range(1, 4 * ng + 1) if p * world * factor % ng == 0],
                                                   pd),
        "train.num_generations": _near([g for g in range(2, pd * world * factor + 1) if pd * world * factor % g == 0],
                                       ng),
        "GPUs in total": _near([w for w in range(nproc, 64 * nproc + 1, nproc) if pd * w * factor % ng == 0], world),
    }
    if acc_key:
        out[acc_key] = _near([s for s in range(1, 4 * ng + 1) if pd * world * s % ng == 0], factor)
    return out


@rule
def batch_arithmetic(spec, eff):
    t, world = spec.train, eff.world_size
    if not world:
        return
    g = t.per_device_train_batch_size * world
    v = eff.version
    if t.steps_per_generation is not None and t.steps_per_generation <= 0:
        yield finding("GRPO-STEPS-PER-GEN", "error", "train.steps_per_generation",
                      f"steps_per_generation must be > 0, got {t.steps_per_generation}.", "Set it to 1 or more.",
                      {"train.steps_per_generation": 1})
        return
    if t.generation_batch_size is not None and v >= (3, 5, 0):
        if t.steps_per_generation is not None:
            if (4, 0, 0) <= v < (4, 4, 0):
                yield finding("VERSION-GEN-AND-STEPS", "error",
                              ("train.generation_batch_size", "train.steps_per_generation"),
                              f"ms-swift {spec.swift_version} (TRL's GRPOConfig) rejects generation_batch_size and "
                              "steps_per_generation together.", "Set only one of them.",
                              {"train.generation_batch_size": None})
            expected = g * t.steps_per_generation
            if t.generation_batch_size != expected:
                yield finding("GRPO-GEN-BATCH-MISMATCH", "error",
                              ("train.generation_batch_size", "train.steps_per_generation"),
                              f"generation_batch_size ({t.generation_batch_size}) must equal per_device_train_batch_"
                              f"size × world_size × steps_per_generation = {t.per_device_train_batch_size} × {world} "
                              f"× {t.steps_per_generation} = {expected}.",
                              f"Set generation_batch_size to {expected} or clear it.",
                              {"train.generation_batch_size": expected})
                return
        elif t.generation_batch_size % g:
            near = _near([m * g for m in range(1, t.generation_batch_size // g + 3)], t.generation_batch_size)
            yield finding("GRPO-GEN-BATCH-DIV", "error", "train.generation_batch_size",
                          f"generation_batch_size ({t.generation_batch_size}) must be divisible by the global batch "
                          f"size {t.per_device_train_batch_size} × {world} = {g}.",
                          f"Use a multiple of {g}: {near}.", {"train.generation_batch_size": near[0]})
            return
    if t.num_generations < 2:
        yield finding("GRPO-NUM-GEN-MIN", "error", "train.num_generations",
                      f"num_generations is {t.num_generations}: GRPO needs at least 2 completions per prompt to "
                      "compute advantages (with one, every advantage is 0 and the policy never updates).",
                      "Set num_generations to 2 or more (8 is typical).", {"train.num_generations": 8})
        return
    gen = eff.generation_batch
    if gen % t.num_generations:
        knobs = _valid_batch_knobs(spec, eff)
        what = ("the global train batch per_device × world" if v < (3, 4, 0) else
                "the effective train batch per_device × world × gradient_accumulation_steps" if v < (3, 5, 0) else
                "generation_batch_size = per_device × world × steps_per_generation")
        options = "; ".join(f"{k}: {vals}" for k, vals in knobs.items() if vals)
        first = next(((k, vals[0]) for k, vals in knobs.items() if vals and k.startswith("train.")), None)
        yield finding("GRPO-BATCH-DIV", "error",
                      ("train.num_generations", "train.per_device_train_batch_size",
                       "train.gradient_accumulation_steps"),
                      f"{what} = {gen} is not divisible by num_generations ({t.num_generations}).",
                      f"Nearest valid values — {options}.", dict([first]) if first else {})


@rule
def eval_batch(spec, eff):
    t, world = spec.train, eff.world_size
    # ms-swift: eval_strategy defaults to save_strategy, and evaluation is off without an eval set.
    eval_on = (t.eval_strategy or t.save_strategy) != "no" and (t.split_dataset_ratio > 0 or bool(t.val_dataset))
    ng = t.num_generations_eval or t.num_generations
    if not eval_on or not world or ng < 2:
        return
    total = t.per_device_eval_batch_size * world
    if total % ng:
        valid = _near([b for b in range(1, 4 * ng + 1) if b * world % ng == 0], t.per_device_eval_batch_size)
        yield finding("GRPO-EVAL-BATCH-DIV", "error", ("train.per_device_eval_batch_size", "train.num_generations"),
                      f"The global eval batch size ({world} x {t.per_device_eval_batch_size}) must be evenly "
                      f"divisible by num_generations_eval ({ng}).",
                      f"Set per_device_eval_batch_size to one of {valid}, or turn evaluation off.",
                      {"train.per_device_eval_batch_size": valid[0]} if valid else {})


# ---------------------------------------------------------------------------------------------------------------
# Rewards and algorithm

@rule
def rewards(spec, eff):
    t = spec.train
    sources = len(t.reward_funcs) + len(t.reward_model or [])
    if not sources and not t.multi_turn_scheduler:
        yield finding("REWARD-MISSING", "error", "train.reward_funcs", "No reward_funcs and no reward_model: GRPO "
                      "has nothing to optimise.", "Add a reward function (e.g. accuracy, format) or a reward model.",
                      {"train.reward_funcs": ["format"]})
    unknown = [r for r in t.reward_funcs if r not in BUILTIN_REWARDS]
    if unknown and not t.external_plugins:
        yield finding("REWARD-UNKNOWN", "error", ("train.reward_funcs", "train.external_plugins"),
                      f"Reward function(s) {unknown} are not built in ({', '.join(BUILTIN_REWARDS)}) and no "
                      "external_plugins file is given to register them.",
                      "Add the plugin file that registers them to external_plugins, or fix the names.")
    if t.reward_weights is not None and len(t.reward_weights) != sources:
        yield finding("REWARD-WEIGHTS-COUNT", "error", ("train.reward_weights", "train.reward_funcs"),
                      f"Number of reward weights ({len(t.reward_weights)}) must match the number of reward "
                      f"functions and models ({sources}).", f"Give {sources} weights, or clear reward_weights.",
                      {"train.reward_weights": None})
    if t.reward_model_plugin and len(t.reward_model_plugin) != len(t.reward_model or []):
        yield finding("REWARD-PLUGIN-COUNT", "error", ("train.reward_model_plugin", "train.reward_model"),
                      f"{len(t.reward_model_plugin)} reward_model_plugin(s) for {len(t.reward_model or [])} reward "
                      "model(s).", "Give one plugin per reward model.")
    if t.loss_type == "real" and t.scale_rewards not in (None, "none"):
        yield finding("LOSS-REAL-SCALE", "warning", ("train.loss_type", "train.scale_rewards"),
                      f"loss_type real forces scale_rewards to none (it is {t.scale_rewards}).",
                      "Set scale_rewards to none.", {"train.scale_rewards": "none"})


@rule
def liger(spec, eff):
    t = spec.train
    if not t.use_liger_kernel:
        return
    conflicts = [(t.delta is not None, "train.delta", "two-sided GRPO (delta)"),
                 (t.sequence_parallel_size > 1, "train.sequence_parallel_size", "sequence parallelism"),
                 (t.padding_free, "train.padding_free", "padding_free"),
                 (t.top_entropy_quantile < 1, "train.top_entropy_quantile", "top_entropy_quantile < 1"),
                 (t.log_entropy, "train.log_entropy", "log_entropy"),
                 (t.importance_sampling_level not in ("token", "sequence"), "train.importance_sampling_level",
                  "importance_sampling_level sequence_token"),
                 (t.advantage_estimator != "grpo", "train.advantage_estimator", "advantage_estimator other than grpo")]
    for bad, path, what in conflicts:
        if bad:
            yield finding("LIGER-INCOMPATIBLE", "error", ("train.use_liger_kernel", path),
                          f"The Liger GRPO loss does not support {what}.", f"Turn use_liger_kernel off or reset {path}.",
                          {"train.use_liger_kernel": False})


@rule
def padding_free(spec, eff):
    attn = spec.train.attn_impl or ""
    if spec.train.padding_free and "flash" not in attn:
        yield finding("PADDING-FREE-ATTN", "error", ("train.padding_free", "train.attn_impl"),
                      f"padding_free needs a flash-attention attn_impl (it is {attn or 'unset'}).",
                      "Set attn_impl to flash_attn, or turn padding_free off.", {"train.attn_impl": "flash_attn"})


@rule
def vllm_lora(spec, eff):
    t, r = spec.train, spec.rollout
    lora = t.tuner_type in ("lora", "lora_llm", "longlora", "adalora")
    if r.vllm_enable_lora and not lora:
        yield finding("VLLM-LORA", "error", ("rollout.vllm_enable_lora", "train.tuner_type"),
                      f"vllm_enable_lora syncs LoRA adapters, but tuner_type is {t.tuner_type}.",
                      "Turn vllm_enable_lora off.", {"rollout.vllm_enable_lora": False})
    if eff.server and spec.server.vllm_enable_lora and lora and spec.server.vllm_max_lora_rank < t.lora_rank:
        yield finding("VLLM-LORA", "error", ("server.vllm_max_lora_rank", "train.lora_rank"),
                      f"The rollout server accepts LoRA rank ≤ {spec.server.vllm_max_lora_rank} but lora_rank is "
                      f"{t.lora_rank}.", f"Set server.vllm_max_lora_rank to {t.lora_rank} or more.",
                      {"server.vllm_max_lora_rank": t.lora_rank})


# ---------------------------------------------------------------------------------------------------------------
# Cluster

@rule
def cluster(spec, eff):
    trainers, rollouts = spec.trainer_nodes(), spec.rollout_nodes()
    if not trainers:
        yield finding("CLUSTER-NO-TRAINER", "error", "cluster.nodes", "No node has the trainer role.",
                      "Add at least one trainer node.")
        return
    counts = {len(n.gpus) for n in trainers}
    if len(counts) > 1:
        detail = ", ".join(f"{n.host}: {len(n.gpus)}" for n in trainers)
        yield finding("TRAINER-GPU-COUNT", "error", "cluster.nodes",
                      f"Trainer nodes use different GPU counts ({detail}); NPROC_PER_NODE must be the same on every "
                      "node and equal to the visible GPUs.", "Give every trainer node the same number of GPUs.")
    if rollouts and not eff.server:
        yield finding("CLUSTER-ROLLOUT-UNUSED", "warning", "rollout.vllm_mode",
                      f"{len(rollouts)} rollout node(s) are set but vllm_mode is not server; they would sit idle.",
                      "Switch to server mode, or remove the rollout nodes.", {"rollout.vllm_mode": "server"})
    if eff.server:
        tp, dp = spec.server.vllm_tensor_parallel_size, spec.server.vllm_data_parallel_size
        for i, n in enumerate(spec.cluster.nodes):
            if n.role == "rollout" and len(n.gpus) < tp * dp:
                yield finding("ROLLOUT-GPUS", "error", f"cluster.nodes[{i}].gpus",
                              f"Rollout node {n.host} has {len(n.gpus)} GPU(s) but TP {tp} × DP {dp} = {tp * dp}.",
                              f"Give it {tp * dp} GPUs or lower server TP/DP.")
            elif n.role == "rollout" and len(n.gpus) > tp * dp:
                yield finding("ROLLOUT-GPUS", "warning", f"cluster.nodes[{i}].gpus",
                              f"Rollout node {n.host} has {len(n.gpus)} GPUs but TP × DP uses {tp * dp}.",
                              f"Raise server.vllm_data_parallel_size to {len(n.gpus) // tp}.",
                              {"server.vllm_data_parallel_size": len(n.gpus) // tp})
    ssh = spec.cluster.backend == "ssh"  # on Slurm the nodes' hosts are not used: Slurm picks the machines
    seen: dict[str, tuple[int, set[int]]] = {}
    for i, n in enumerate(spec.cluster.nodes if ssh else []):
        key = n.routable
        if key in seen and seen[key][1] & set(n.gpus):
            overlap = sorted(seen[key][1] & set(n.gpus))
            yield finding("CLUSTER-GPU-OVERLAP", "error", (f"cluster.nodes[{seen[key][0]}].gpus",
                                                           f"cluster.nodes[{i}].gpus"),
                          f"Nodes {seen[key][0]} and {i} both use GPU(s) {overlap} on {key}: the processes would "
                          "oversubscribe them (out of memory or a stall, field report 000).",
                          "Give each node on the same machine its own GPU ids.")
        seen.setdefault(key, (i, set()))[1].update(n.gpus)
    master = eff.master_addr
    if ssh and len(trainers) > 1 and (master in ("127.0.0.1", "localhost", "::1") or any(n.is_local for n in trainers)):
        yield finding("MASTER-LOOPBACK", "error", ("cluster.master_addr", "cluster.nodes[0].host"),
                      f"NNODES is {len(trainers)} but MASTER_ADDR is {master} (or a trainer is localhost): the other "
                      "nodes cannot reach a loopback address and would hang at rendezvous.",
                      "Use node 0's routable IP or hostname (set cluster.master_addr or node 0's address).")
    relative = [v for v in (spec.train.model or "", *spec.train.dataset) if v.startswith(".")]
    homeless = [n.host for n in trainers if not (n.workdir or spec.cluster.workdir)]
    if relative and homeless:
        yield finding("PATH-RELATIVE-NO-WORKDIR", "error", ("cluster.workdir", "train.model", "train.dataset"),
                      f"{', '.join(relative)} is relative, but no workdir is set for {', '.join(homeless)}: swift "
                      "would run in the job's run directory, which holds only its scripts, and look there.",
                      "Set cluster.workdir to the directory these paths are relative to, or make them absolute.")
    ports = {"cluster.master_port": eff.master_port}
    if eff.server:
        ports["server.port"] = spec.server.port
    if len(set(ports.values())) < len(ports):
        yield finding("PORT-CLASH", "error", tuple(ports), f"The rendezvous port and the rollout server port are both "
                      f"{eff.master_port}.", "Use different ports (e.g. 29500 and 8000).")


# ---------------------------------------------------------------------------------------------------------------
# Field experience (shared/seeds)

@rule
def seed_zero3_kl0(spec, eff):
    t = spec.train
    if (t.deepspeed or "").startswith("zero3") and t.per_device_train_batch_size == 1 and eff.grad_accum > 1:
        yield finding("SEED-ZERO3-KL0", "warning", ("train.deepspeed", "train.per_device_train_batch_size",
                                                    "train.gradient_accumulation_steps"),
                      f"ZeRO-3 with per-device batch 1 and gradient accumulation {eff.grad_accum}: users saw "
                      "parameters never update and KL stay 0 (field report 001).",
                      "Use ZeRO-2, or raise per_device_train_batch_size and lower gradient_accumulation_steps; "
                      "watch kl in the first steps.", {"train.deepspeed": "zero2"})


@rule
def seed_offload_large(spec, eff):
    size = model_size_b(eff)
    t, r = spec.train, spec.rollout
    offloading = (r.offload_model and eff.colocate) or (t.deepspeed or "").endswith("offload")
    if size and size >= 30 and offloading:
        yield finding("SEED-OFFLOAD-STALL", "warning", ("rollout.offload_model", "train.deepspeed"),
                      f"A {size_label(eff)} model with offload_model / ZeRO offload: moving the weights "
                      "between CPU and GPU around every rollout stalled training without an error (field report 000).",
                      "Prefer a separate rollout node (server mode), or ZeRO-3 without offload and move_model_batches "
                      "8–12 if memory allows; watch for a hang alert.", {"rollout.offload_model": False})


def _vllm_share(spec, eff):
    """(section, memory utilisation, TP, GPU memory in GiB or None) of the GPUs vLLM runs on: the trainers' when
    colocated, the rollout nodes' in server mode; None without vLLM."""
    if eff.colocate:
        r = spec.rollout
        return "rollout", r.vllm_gpu_memory_utilization, r.vllm_tensor_parallel_size, eff.trainer.gib
    if eff.server:
        s = spec.server
        return "server", s.vllm_gpu_memory_utilization, s.vllm_tensor_parallel_size, eff.rollout.gib
    return None


@rule
def seed_vllm_share(spec, eff):
    size, share = model_size_b(eff), _vllm_share(spec, eff)
    if not (size and share):
        return
    section, util, tp, gib = share
    fields = (f"{section}.vllm_gpu_memory_utilization", f"{section}.vllm_tensor_parallel_size")
    weights = size * 2 / tp  # bf16 GB ≈ GiB×1.07; kept simple on purpose
    if gib is None:
        if size >= 30 and util <= 0.5:  # field report 000: 0.5 on a 32B model, GPUs unknown to us
            yield finding("SEED-VLLM-UTIL-LOW", "info", fields,
                          f"vLLM may use {util} of each GPU for ≈{weights:.0f} GB of {size_label(eff)} weights per GPU "
                          f"(TP {tp}) plus the KV cache of every rollout; field report 000 found 0.5 too small for a "
                          "32B model.", "Set the GPUs' model on the Cluster page so the estimate can check it; 0.6–0.7 "
                          "is where that report landed.")
        return
    if util * gib < weights * 1.25:
        need = min(0.95, round(weights * 1.25 / gib + 0.05, 2))
        yield finding("SEED-VLLM-UTIL-LOW", "warning", fields,
                      f"vLLM may use {util} × {gib:.0f} GiB = {util * gib:.1f} GiB per GPU, but the weights alone take "
                      f"≈{weights:.1f} GiB (TP {tp}), leaving little or no KV cache: rollouts crawl or fail (field "
                      "reports 000, 004).", f"Raise vllm_gpu_memory_utilization to ≈{need} (check the memory estimate) "
                      "or raise vllm_tensor_parallel_size.", {fields[0]: need})


@rule
def seed_tp_spans_node(spec, eff):
    """Field report 000: TP 8 with 8 inference workers on the 8 training GPUs, with async generation and offload."""
    r, nproc = spec.rollout, eff.nproc_per_node
    tp = r.vllm_tensor_parallel_size
    busy = [what for what, on in (("async_generate", r.async_generate), ("offload_model", r.offload_model),
                                  ("ZeRO offload", (spec.train.deepspeed or "").endswith("offload"))) if on]
    if eff.colocate and tp >= 4 and tp == nproc and busy:
        workers = f" with num_infer_workers {r.num_infer_workers}" if r.num_infer_workers else ""
        yield finding("SEED-TP-SPANS-NODE", "warning", ("rollout.vllm_tensor_parallel_size", "rollout.async_generate",
                                                        "rollout.offload_model"),
                      f"vLLM TP {tp}{workers} spans all {nproc} training GPUs of the node while {', '.join(busy)} "
                      "moves work on the same GPUs: every rollout waits for all of them; field report 000 stalled "
                      "this way without an error.", "Use a smaller TP (more, smaller engines) or move rollouts to a "
                      "rollout server node; keep async_generate and offload off on shared GPUs.")


@rule
def seed_offload_small(spec, eff):
    size = model_size_b(eff)
    t, r = spec.train, spec.rollout
    if size is None or size > 8:
        return
    what = [p for p, on in (("rollout.offload_model", r.offload_model), ("rollout.offload_optimizer",
                                                                          r.offload_optimizer),
                            ("train.deepspeed", (t.deepspeed or "").endswith("offload")),
                            ("rollout.move_model_batches", bool(r.move_model_batches))) if on]
    if what:
        yield finding("SEED-OFFLOAD-SMALL", "warning", tuple(what),
                      f"Offloading on a {size_label(eff)} model ({', '.join(what)}): GPUs wait on host copies, utilisation "
                      "swings 0–90% and training ran over 2× slower (field report 002).",
                      "Use ZeRO-3 (or ZeRO-2) without offload, offload_* false, no move_model_batches.",
                      {"rollout.offload_model": False, "rollout.offload_optimizer": False,
                       "rollout.move_model_batches": None,
                       **({"train.deepspeed": t.deepspeed.removesuffix("_offload")} if t.deepspeed else {})})


@rule
def seed_dataloader(spec, eff):
    workers = spec.train.dataloader_num_workers
    if is_multimodal(eff) and (workers is None or workers < 2):
        yield finding("SEED-DATALOADER-WORKERS", "info", "train.dataloader_num_workers",
                      f"dataloader_num_workers is {workers if workers is not None else 'unset (1)'} for a vision-language "
                      "model: decoding and resizing images can leave the GPUs idle between steps (field report 002).",
                      "Set dataloader_num_workers to 4–16 (fewer than the CPU cores per GPU).",
                      {"train.dataloader_num_workers": 4})


@rule
def seed_node_differ(spec, eff):
    trainers = [(i, n) for i, n in enumerate(spec.cluster.nodes) if n.role == "trainer"]
    if len(trainers) < 2:
        return
    i0, n0 = trainers[0]
    for i, n in trainers[1:]:
        for attr in ("env", "python_env", "workdir"):
            if getattr(n, attr) != getattr(n0, attr):
                yield finding("SEED-NODE-DIFFER", "warning", f"cluster.nodes[{i}].{attr}",
                              f"Node {i} ({n.host}) has {attr} {getattr(n, attr)!r}, node {i0} has "
                              f"{getattr(n0, attr)!r}: nodes that differ in more than NODE_RANK are the usual cause "
                              "of multi-node hangs (field report 003).",
                              "Keep it only if the machines really differ (e.g. another install path); preflight "
                              "compares the versions found there.")


@rule
def seed_ref_model(spec, eff):
    size = model_size_b(eff)
    if spec.train.tuner_type == "full" and eff.beta > 0:
        what = f" (≈{size * 2:.0f} GB more in bf16)" if size else ""
        yield finding("SEED-REF-MODEL", "info", ("train.beta", "train.tuner_type"),
                      f"beta {eff.beta} with full tuning loads a frozen reference copy of the model{what}.",
                      "If memory is short, set beta 0 (no KL term, no reference model) as ms-swift's 32B example "
                      "does.", {"train.beta": 0.0})


@rule
def env_secret_moved(spec, eff):
    if spec.moved_secrets:
        names = ", ".join(spec.moved_secrets)
        yield finding("ENV-SECRET-MOVED", "warning", "secret_env",
                      f"{names} in env looked like secret(s): moved to secret_env, and the value(s) dropped so they "
                      "never reach a script, the YAML or the job database.",
                      "Enter the value(s) on the Launch page (or export them for `python -m grpo_ui launch`); they "
                      "travel in a 0600 file that is removed once the job has started.")
