"""The rules' registry: every finding id with what it stands for — the ms-swift check (its file and line in ms-swift
4.6.0's source, as released on PyPI, unless a version or an issue is named), the field report (``field report NNN``:
tests/test_rules.py's REPORT_NNN, the user's script and what went wrong), or grpo-ui's own launch and import — the
``@rule`` decorator each rule module registers with, and what the rules say about the model."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator

from grpo_ui.core.findings import Finding
from grpo_ui.knowledge.catalog import params_from_name
from grpo_ui.spec.fields import SWIFT
from grpo_ui.spec.model import JobSpec
from grpo_ui.spec.resolve import Resolved

# id → (what it checks, where the check comes from: ms-swift's file:line, a field report, grpo-ui's own)
RULES: dict[str, tuple[str, str]] = {
    "SPEC-MODEL-MISSING": ("a model is given", "swift/arguments/base_args/model_args.py:221"),
    "MODEL-BARE-NAME": ("a catalogue model is given as its Hub id (owner/name), not its bare name",
                        "swift/utils/hub_utils.py:90 (a local path, else a hub id)"),
    "SPEC-DATASET-MISSING": ("a training dataset is given", "swift/arguments/sft_args.py:222"),
    "IMPORT-UNRESOLVED": ("no value is left to the imported script's shell", "grpo-ui's importer"),
    "IMPORT-PARTIAL": ("a draft kept from a refused import: what it could not read is filled in", "grpo-ui's importer"),
    "TRUNCATION-STRATEGY": ("GRPO allows only left or delete truncation", "swift/arguments/rlhf_args.py:354"),
    "REF-MODEL-LORA": ("no ref_model with LoRA", "swift/arguments/rlhf_args.py:299"),
    "SOFT-OVERLONG-CACHE": ("soft_overlong needs soft_cache_length < soft_max_length",
                            "swift/arguments/rlhf_args.py:365, swift/rewards/orm.py:220"),
    "WARMUP-BOTH": ("warmup_ratio and warmup_steps are exclusive", "swift/trainers/arguments.py:231"),
    "VLLM-MODE-WITHOUT-VLLM": ("vllm_mode only with use_vllm", "swift/arguments/rlhf_args.py:445"),
    "VLLM-MODE-REQUIRED": ("vllm_mode required with use_vllm (3.12+)", "swift/arguments/rlhf_args.py:448"),
    "VLLM-SERVER-NO-HOST": ("server mode needs servers", "swift/arguments/rlhf_args.py:453"),
    "ASYNC-NEEDS-SERVER": ("async_generate needs server mode", "swift/arguments/rlhf_args.py:456"),
    "ASYNC-MULTI-TURN": ("async_generate does not support multi-turn", "swift/arguments/rlhf_args.py:569"),
    "TRAINER-GPU-COUNT": ("every trainer node uses the same number of GPUs (NPROC_PER_NODE)",
                          "swift/arguments/rlhf_args.py:543"),
    "VLLM-SERVER-PORTS": ("one port (and group port) per server host", "swift/rlhf_trainers/vllm_client.py:97"),
    "VLLM-SERVER-MAX-LEN": ("vllm_max_model_len is ignored in server mode", "swift/arguments/rlhf_args.py:706"),
    "VLLM-TP-WITHOUT-VLLM": ("TP is reset to 1 without vLLM", "swift/arguments/rlhf_args.py:463"),
    "VLLM-TP-WORLD": ("colocate TP divides the world size and fits within a node",
                      "swift/rlhf_trainers/rollout_mixin.py:435"),
    "FSDP-DEEPSPEED": ("FSDP2 and DeepSpeed are exclusive", "swift/arguments/sft_args.py:295"),
    "GRPO-GEN-BATCH-DIV": ("generation_batch_size divisible by the global batch",
                           "swift/rlhf_trainers/args_mixin.py:209"),
    "GRPO-GEN-BATCH-MISMATCH": ("generation_batch_size == per_device × world × steps_per_generation",
                                "swift/rlhf_trainers/args_mixin.py:217"),
    "GRPO-STEPS-PER-GEN": ("steps_per_generation > 0", "swift/rlhf_trainers/args_mixin.py:222"),
    "GRPO-BATCH-DIV": ("generation batch divisible by num_generations", "swift/rlhf_trainers/args_mixin.py:225"),
    "GRPO-EVAL-BATCH-DIV": ("eval batch divisible by num_generations_eval", "swift/rlhf_trainers/args_mixin.py:235"),
    "GRPO-NUM-GEN-MIN": ("num_generations ≥ 2", "swift/arguments/rlhf_args.py:410"),
    "REWARD-MISSING": ("some reward function or model", "swift/rlhf_trainers/grpo_trainer.py:121"),
    "REWARD-UNKNOWN": ("reward names are built in or come from external_plugins",
                       "swift/rlhf_trainers/grpo_trainer.py:2228"),
    "REWARD-WEIGHTS-COUNT": ("one weight per reward source", "swift/rlhf_trainers/grpo_trainer.py:2269"),
    "REWARD-PLUGIN-COUNT": ("one reward_model_plugin per reward model", "swift/rlhf_trainers/grpo_trainer.py:2246"),
    "LOSS-REAL-SCALE": ("loss_type real forces scale_rewards none", "swift/arguments/rlhf_args.py:380"),
    "LIGER-INCOMPATIBLE": ("Liger kernel incompatibilities", "swift/arguments/rlhf_args.py:545"),
    "PADDING-FREE-ATTN": ("padding_free needs flash attention", "swift/arguments/sft_args.py:193"),
    "VLLM-LORA": ("vllm_enable_lora needs LoRA; server max_lora_rank ≥ lora_rank",
                  "swift/rlhf_trainers/rollout_mixin.py:475, swift/arguments/deploy_args.py:98"),
    "SLEEP-LEVEL-IGNORED": ("sleep_level is forced to 0 without colocated vLLM", "swift/arguments/rlhf_args.py:347"),
    "SLEEP-LEVEL-GAS": ("3.2.1–3.3 force gradient_accumulation_steps 1 with sleep_level",
                        "ms-swift issue #3943 (3.2.1–3.3)"),
    "OFFLOAD-IGNORED": ("offload_model/offload_optimizer act only in colocate mode",
                        "swift/rlhf_trainers/rollout_mixin.py:443 (the colocated engine's)"),
    "VERSION-GEN-AND-STEPS": ("4.0–4.3 reject generation_batch_size and steps_per_generation together",
                              "4.0–4.3: TRL GRPOConfig's check; since 4.4: swift/rlhf_trainers/args_mixin.py:217"),
    "VERSION-FLAG-UNSUPPORTED": ("a set field the target version lacks (reported by swift_cli)",
                                 "swift/pipelines/base.py:40"),
    "VERSION-MULTI-SERVER": ("one rollout server before 3.7 (reported by swift_cli)",
                             "swift/rlhf_trainers/args_mixin.py:178 (a list since 3.7)"),
    "ROLLOUT-GPUS": ("TP × DP fits the rollout node's GPUs",
                     "swift/pipelines/infer/rollout.py:619 (data-parallel rank × TP picks the GPUs)"),
    "CLUSTER-NO-TRAINER": ("at least one trainer node", "grpo-ui's launch"),
    "CLUSTER-ROLLOUT-UNUSED": ("rollout nodes only in server mode", "grpo-ui's launch"),
    "CLUSTER-GPU-OVERLAP": ("no two nodes on one host share a GPU", "grpo-ui's launch; field report 000"),
    "MASTER-LOOPBACK": ("MASTER_ADDR is routable when NNODES > 1", "field report 003, ms-swift issue #2485"),
    "ADDRESS-PLACEHOLDER": ("no host or address is an example script's stand-in (xxx.xxx.xxx.xxx)",
                            "ms-swift's examples/train/grpo multi-node scripts (node 1's MASTER_ADDR=xxx.xxx.xxx.xxx)"),
    "PORT-CLASH": ("rendezvous, server and group ports differ", "grpo-ui's launch"),
    "PATH-RELATIVE-NO-WORKDIR": ("relative paths of the files a job names (model, datasets, plugins, system prompt "
                                 "file, DeepSpeed/FSDP JSON) need a workdir to be read from",
                                 "swift/utils/hub_utils.py:90; swift/arguments/base_args/template_args.py:160"),
    "ROLLOUT-SERVER-OUTSIDE": ("a rollout server the job talks to but no node starts is declared as started outside "
                               "the job",
                               "ms-swift's examples/train/grpo/external/*.sh; issue 26"),
    "CREDENTIAL-UNDECLARED": ("the key a tracker (report_to) or a hub needs is declared for the Launch page",
                              "wandb / swanlab / huggingface_hub; issue 26"),
    "SEED-ZERO3-KL0": ("ZeRO-3, per-device batch 1 and accumulation: parameters not updating", "field report 001"),
    "SEED-OFFLOAD-STALL": ("offload on a large model stalls between rollout and training", "field report 000"),
    "SEED-VLLM-UTIL-LOW": ("vLLM share too small for the model's weights and KV cache", "field reports 000, 004"),
    "SEED-TP-SPANS-NODE": ("colocated TP over every GPU with async/offload on them", "field report 000"),
    "SEED-OFFLOAD-SMALL": ("offload on a small model leaves GPUs idle", "field report 002"),
    "SEED-DATALOADER-WORKERS": ("too few dataloader workers starve the GPUs", "field report 002"),
    "SEED-NODE-DIFFER": ("per-node settings differ in more than NODE_RANK", "field report 003"),
    "SEED-REF-MODEL": ("beta > 0 with full tuning loads a second full model",
                       "ms-swift's examples/train/grpo/multi_node/Qwen2_5_32B_full.sh"),
    "ENGINE-FLAG": ("an argument the job's engine does not take (swift rlhf's on megatron rlhf, or the reverse; "
                    "reported by swift_cli)", "swift/pipelines/base.py:35-40 remaining_argv"),
    "ENGINE-VALUE": ("a value the job's engine does not take (megatron rlhf's fewer tuner types and DDP backends, whole "
                     "epochs; reported by swift_cli)", "megatron_args.py:449, :489, :586"),
    "ENGINE-VERSION": ("megatron rlhf for ms-swift ≥ 4.0 (Megatron GRPO from 3.11, with 3.x names before 4.0)",
                       "swift/megatron/trainers/grpo_trainer.py (v3.11.0)"),
    "MEGATRON-WORLD": ("TP·PP·CP (and EP·ETP·PP) divide the training GPUs", "megatron_args.py:945-948"),
    "MEGATRON-TP-HEADS": ("TP divides the attention heads and KV heads", "Megatron-Core TransformerConfig"),
    "MEGATRON-EP-EXPERTS": ("EP divides the experts (and only MoE models have them)", "Megatron-Core TransformerConfig"),
    "MEGATRON-PP-LAYERS": ("PP divides the layers, or the uneven-split flags are set with PP > 1",
                           "megatron_args.py:833-836; Megatron-Core TransformerConfig"),
    "MEGATRON-SP-TP": ("sequence_parallel needs TP > 1 (ms-swift turns it off)", "megatron_args.py:891-892"),
    "MEGATRON-CP-ATTENTION": ("context parallelism needs Transformer Engine attention (not local)",
                              "megatron/core/transformer/dot_product_attention.py"),
    "MEGATRON-RECOMPUTE": ("recompute_method only with full recomputation", "megatron_args.py:800-801"),
    "MEGATRON-GLOBAL-BATCH": ("global_batch_size divisible by micro_batch_size × DP", "megatron_args.py:950-959"),
    "MEGATRON-GEN-BATCH": ("generation batch = global × steps_per_generation, divisible by num_generations",
                           "megatron_args.py:271-293"),
    "MEGATRON-DP-ALIGN": ("prompts per rollout divisible by DP, then by micro_batch_size; a completion per rank",
                          "megatron_args.py:310-329"),
    "MEGATRON-UNSUPPORTED": ("async_generate, sync_ref_model, num_iterations > 1, REAL without micro = k·G, VPP with a "
                             "reference model, save_strategy no, save_total_limit < 2",
                             "megatron_args.py:395-406, :861-862; grpo_trainer.py:644"),
    "MEGATRON-USE-VLLM": ("Megatron GRPO without Ray needs use_vllm", "megatron_args.py:439-440"),
    "MEGATRON-VLLM-MODE": ("vllm_mode given (no default on megatron rlhf)", "rollout_mixin.py:419"),
    "RAY-BACKEND": ("Ray mode is launched on a Ray cluster, not by the SSH or Slurm node scripts",
                    "swift/cli/main.py:74-98, swift/cli/_megatron/rlhf.py"),
    "RAY-PLACEMENT": ("each role's share of a node a STRICT_PACK placement group one node holds",
                      "swift/ray/megatron/resource_pool.py:56-80"),
    "RAY-WORKDIR": ("Ray workers resolve relative paths in the directory their cluster's Ray runs in",
                    "swift/megatron/arguments/sft_args.py:18-26, swift/ray/megatron/driver_utils.py:188-191"),
    "RAY-NNODES": ("each role's GPUs split evenly over nnodes", "swift/ray/megatron/driver_utils.py:77-84"),
    "RAY-REPLICAS": ("rollout GPUs a whole number of vLLM TP × DP replicas", "swift/ray/megatron/rollout/replica.py:118-125"),
    "RAY-VLLM-MODE": ("no vllm_mode in Ray mode (the placement decides)", "swift/megatron/pipelines/train/rlhf.py:48-67"),
    "RAY-TRAIN-ITERS": ("Ray mode needs train_iters or num_train_epochs", "swift/ray/megatron/pipeline.py:103-112"),
    "RAY-NO-EVAL": ("Ray mode has no evaluation loop", "swift/ray/megatron/driver_utils.py:228-238"),
    "ENV-SECRET-MOVED": ("token-like names in env become secret_env names, their values dropped", "SECURITY.md"),
}

Rule = Callable[[JobSpec, Resolved], Iterator[Finding]]
_RULES: list[tuple[Rule, tuple[str, ...]]] = []


def rule(fn: Rule | None = None, *, engines: tuple[str, ...] = SWIFT):
    """Register a rule (each rule module's rules, in the order they are written) for the training engines whose
    checks it mirrors: ``@rule`` for swift rlhf's, ``@rule(engines=ENGINES)`` for both, ``@rule(engines=MEGATRON)``
    for megatron rlhf's."""
    def register(fn: Rule) -> Rule:
        _RULES.append((fn, engines))
        return fn
    return register(fn) if fn is not None else register


def rules_in(module, engine: str = "swift") -> list[Rule]:
    """The rules ``module`` registered for ``engine``, in its order."""
    return [fn for fn, engines in _RULES if fn.__module__ == module.__name__ and engine in engines]


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
