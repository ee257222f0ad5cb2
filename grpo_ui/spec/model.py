"""JobSpec: the one declaration of a GRPO job.

Every field is declared once. An ms-swift argument with ``arg()``: its default, bounds, help text, form group, flag
name and the ms-swift versions that accept it (field names are the ms-swift 4.x flag names). grpo-ui's own settings
(the job's, the cluster's, each node's, the Slurm request's) with ``setting()``: type, default, bounds, help text, the
backend that uses it and how the form writes it. The form, the validation, the argv rendering, YAML and the docs
derive from these declarations (``ARGS``, ``SETTINGS``). What the fields mean together, the job's effective values,
is grpo_ui.spec.resolve's.

Set vs default: a field of ``train``, ``rollout`` or ``server`` is *set* when it is in that section's
``model_fields_set`` (the user, a preset, an imported script or the YAML gave it); otherwise ms-swift's own default for
the target version applies. Declared defaults are ms-swift's (a test checks them against its argument classes), so
rules read effective values from unset fields; rendering, YAML export and presets carry exactly the set fields.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, field_validator, model_validator

from grpo_ui.core.errors import UserError
from grpo_ui.knowledge.catalog import from_hf_config, gpus

SUPPORTED_VERSIONS = ("3.2", "3.3", "3.4", "3.5", "3.6", "3.7", "3.8", "3.9", "3.10", "3.11", "3.12",
                      "4.0", "4.1", "4.2", "4.3", "4.4", "4.5", "4.6")
DEEPSPEED_PRESETS = ("zero0", "zero1", "zero2", "zero3", "zero2_offload", "zero3_offload")
TUNER_TYPES = ("lora", "full", "lora_llm", "longlora", "adalora", "llamapro", "adapter", "vera", "boft",
               "fourierft", "reft", "bone")
LOSS_TYPES = ("grpo", "bnpo", "dr_grpo", "dapo", "cispo", "sapo", "real", "fipo")
BUILTIN_REWARDS = ("accuracy", "format", "cosine", "repetition", "soft_overlong", "math", "toolbench", "react_format")
GROUPS = {
    "model": "Model & tuner",
    "rollout": "Rollout / vLLM",
    "server": "Rollout server (swift rollout)",
    "batch": "Batch & generation",
    "rl": "RL loss",
    "reward": "Reward",
    "data": "Data",
    "training": "Training",
    "output": "Output & logging",
}


def parse_version(text: str) -> tuple[int, int, int]:
    """'4.6' / '4.6.0.dev0' / 'v3.2.1' → (4, 6, 0). Raises ValueError naming the bad text."""
    m = re.match(r"^v?(\d+)\.(\d+)(?:\.(\d+))?", str(text).strip())
    if not m:
        raise ValueError(f"not an ms-swift version: {text!r} (expected e.g. 4.6 or 3.9.3)")
    return int(m[1]), int(m[2]), int(m[3] or 0)


def arg(default: Any, help: str, *, group: str, flag: str | None = None, since: str | None = None,
        until: str | None = None, old_name: str | None = None, renamed_in: str | None = None,
        choices: tuple | None = None, old_default: tuple[Any, str] | None = None,
        applies: Literal["colocate", "server"] | None = None, **bounds) -> Any:
    """Declare one ms-swift argument.

    since/until: first version that accepts it / first version that no longer does.
    old_name/renamed_in: the flag was called ``old_name`` before ``renamed_in``.
    choices: suggested values for free-text fields (the form offers them).
    old_default: (value, version): ms-swift's own default was ``value`` before ``version`` (what an unset field means
    for older targets).
    applies: the vLLM mode that alone uses it (the ``server`` section's arguments: server mode).
    """
    extra = {"group": group, "flag": flag, "since": since, "until": until, "old_name": old_name,
             "renamed_in": renamed_in, "choices": list(choices) if choices else None,
             "old_default": list(old_default) if old_default else None, "applies": applies}
    return Field(description=help, json_schema_extra={"swift": extra}, **_default(default), **bounds)


def _default(default: Any) -> dict:
    """A declared default as Field's keyword: a fresh copy per model for lists and dicts."""
    if isinstance(default, (list, dict)):
        return {"default_factory": lambda d=default: type(d)(d)}
    return {"default": default}


def setting(default: Any, help: str, *, applies: Literal["ssh", "slurm"] | None = None,
            widget: Literal["lines", "csv"] | None = None, options: Callable[[], list[str]] | None = None,
            **constraints) -> Any:
    """Declare one grpo-ui setting: of the job, its cluster, a node or its Slurm request (not an ms-swift argument).

    applies: the backend that alone uses it. widget: how a list or mapping is written as text: 'lines' (one item per
    line) or 'csv' (items separated by commas); otherwise items separated by spaces, shell-quoted (a mapping as
    KEY=value items). Other widgets follow the type: bool a checkbox, Literal a choice, numbers a number within the
    bounds. options: a function listing the values to choose from (the current value is offered too). ``...`` as the
    default: required.
    """
    extra = {"applies": applies, "widget": widget, "options": options}
    return Field(description=help, json_schema_extra={"setting": extra}, **_default(default), **constraints)


# Set by the node scripts themselves (GRPO_UI_RUN by the launcher): a spec's env must not change them.
RESERVED_ENV = ("NODE_RANK", "MASTER_ADDR", "MASTER_PORT", "NNODES", "NPROC_PER_NODE", "CUDA_VISIBLE_DEVICES",
                "GRPO_UI_RUN")
SECRET_NAME = re.compile(r"(_TOKEN|_KEY)$|PASSWORD|SECRET", re.IGNORECASE)  # values travel in the secrets file


def _gpu_names() -> list[str]:
    """The catalogue's GPUs, by the names nvidia-smi prints."""
    return sorted(gpus())


def check_env_names(names, reserved: tuple[str, ...] = RESERVED_ENV):
    """Variable names as bash exports them (they reach scripts unquoted), none of them ``reserved``; ValueError lists
    the bad ones."""
    bad = [k for k in names if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", k)]
    if bad:
        raise ValueError(f"not valid environment variable names: {bad}")
    taken = [k for k in names if k in reserved]
    if taken:
        raise ValueError(f"{', '.join(taken)} cannot be set in env: grpo-ui sets it on every node from the cluster "
                         "settings" + (" (CUDA_VISIBLE_DEVICES from each node's gpus)" if "CUDA_VISIBLE_DEVICES" in
                                       taken else ""))
    return names


def check_no_secrets(env: dict[str, str]) -> dict[str, str]:
    """A spec loaded whole has token-like names moved to secret_env already; one changed field by field must not
    bring them back (ValueError names them)."""
    found = [k for k in env if SECRET_NAME.search(k)]
    if found:
        raise ValueError(f"{', '.join(found)} look(s) like secrets: list the name in secret_env instead (the value "
                         "travels in a 0600 file at launch, never in the spec)")
    return env


def check_name(value: str, what: str = "job id", longest: int = 128) -> str:
    """A name that becomes a file or directory name (job ids, job names): letters, digits, '.', '_' and '-', not
    starting with '.' or '-' (so never '..' or an option), at most ``longest`` characters. Raises SpecError."""
    if not re.fullmatch(rf"[A-Za-z0-9_][A-Za-z0-9._-]{{0,{longest - 1}}}", value or ""):
        raise SpecError([(what, f"{value!r} is not usable as a {what}: use up to {longest} letters, digits, '.', "
                                "'_' or '-', starting with a letter, digit or '_'")])
    return value


_LABEL = re.compile(r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?")
_ALIAS = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,252}")


def check_host(value: str, alias: bool = False) -> str:
    """An IPv4 or IPv6 address (without brackets: ms-swift adds them in URLs), a host name (RFC 1123) or, with
    ``alias``, an ~/.ssh/config alias (letters, digits, '.', '_', '-'). ValueError says which forms are accepted."""
    forms = "an IPv4/IPv6 address, a host name" + (" or an ~/.ssh/config alias" if alias else "")
    if value.startswith("[") and value.endswith("]"):
        raise ValueError(f"write the IPv6 address {value[1:-1]!r} without brackets")
    try:
        ipaddress.ip_address(value)
        return value
    except ValueError:
        pass
    labels = value.removesuffix(".").split(".")
    if len(value) <= 253 and all(_LABEL.fullmatch(x) for x in labels) and not all(x.isdigit() for x in labels):
        return value
    if alias and _ALIAS.fullmatch(value) and not value.replace(".", "").isdigit():
        return value
    raise ValueError(f"{value!r} is not {forms}")


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class TrainArgs(_Section):
    """Arguments of ``swift rlhf --rlhf_type grpo`` other than rollout/vLLM."""

    # model & tuner
    model: str | None = arg(None, "Hub id or local path of the policy model.", group="model")
    model_type: str | None = arg(None, "ms-swift model type; auto-detected from the model when empty.", group="model")
    template: str | None = arg(None, "Chat template; auto-detected when empty.", group="model")
    system: str | None = arg(None, "System prompt, or a path to a text file with it.", group="model")
    tuner_type: Literal[TUNER_TYPES] = arg("lora", "lora trains adapters on a frozen base; full trains every weight.",
                                           group="model", old_name="train_type", renamed_in="4.0")
    lora_rank: int = arg(8, "LoRA rank r.", group="model", ge=1, le=1024)
    lora_alpha: int = arg(32, "LoRA alpha (scale = alpha / r).", group="model", ge=1)
    lora_dropout: float = arg(0.05, "LoRA dropout.", group="model", ge=0, lt=1)
    target_modules: list[str] = arg(["all-linear"], "Modules that get LoRA adapters: all-linear or name suffixes.",
                                    group="model")
    torch_dtype: Literal["bfloat16", "float16", "float32"] | None = arg(
        None, "Parameter dtype; empty = from config.json.", group="model")
    attn_impl: str | None = arg(None, "Attention kernel; padding_free needs flash_attn.", group="model",
                                choices=("flash_attn", "sdpa", "eager"))
    quant_bits: Literal[4, 8] | None = arg(None, "Load the base model quantized (QLoRA).", group="model")
    quant_method: Literal["bnb", "hqq", "eetq"] | None = arg(None, "Quantization backend for quant_bits.",
                                                             group="model")
    deepspeed: str | None = arg(None, "DeepSpeed preset (zero0…zero3_offload), a JSON file path or a JSON string.",
                                group="model", choices=DEEPSPEED_PRESETS)
    fsdp: str | None = arg(None, "fsdp2 or a path to an FSDP2 JSON config; exclusive with deepspeed.", group="model",
                           choices=("fsdp2",))
    ref_model: str | None = arg(None, "Separate reference model (full tuning only; default: the initial policy).",
                                group="model")

    # batch & generation
    per_device_train_batch_size: int = arg(1, "Completions per device per micro-step.", group="batch", ge=1)
    per_device_eval_batch_size: int = arg(1, "Completions per device per eval step.", group="batch", ge=1)
    gradient_accumulation_steps: int | None = arg(None, "Micro-steps per optimizer step (GRPO default 1).",
                                                  group="batch", ge=1)
    generation_batch_size: int | None = arg(None, "Completions per rollout (default per_device × world × "
                                            "steps_per_generation).", group="batch", ge=1, since="3.5")
    steps_per_generation: int | None = arg(None, "Optimizer micro-steps per rollout (default "
                                           "gradient_accumulation_steps).", group="batch", since="3.5")
    num_generations: int = arg(8, "Completions per prompt (the group size G).", group="batch", ge=1)
    num_generations_eval: int | None = arg(None, "Completions per prompt at evaluation (default num_generations).",
                                           group="batch", ge=1, since="3.12")
    max_length: int | None = arg(None, "Prompt length limit in tokens (GRPO).", group="batch", ge=1)
    max_completion_length: int = arg(512, "Longest completion in tokens.", group="batch", ge=1)
    truncation_strategy: Literal["left", "delete", "right", "split"] | None = arg(
        None, "Over-long prompts: left-truncate or delete (GRPO allows only these two).", group="batch")
    temperature: float = arg(0.9, "Sampling temperature for rollouts.", group="batch", ge=0)
    top_k: int = arg(-1, "Top-k sampling (-1 = off).", group="batch", old_default=(50, "4.1"))
    top_p: float = arg(1.0, "Top-p sampling.", group="batch", gt=0, le=1, old_default=(0.9, "4.1"))
    repetition_penalty: float = arg(1.0, "Repetition penalty.", group="batch", gt=0)
    stop_words: list[str] = arg([], "Extra stop words for generation.", group="batch")

    # RL loss
    beta: float | None = arg(None, "KL coefficient (default 0.04); 0 skips the reference model.", group="rl", ge=0)
    epsilon: float = arg(0.2, "Clip range ε.", group="rl", gt=0)
    epsilon_high: float | None = arg(None, "Upper clip range (DAPO clip-higher).", group="rl", gt=0)
    delta: float | None = arg(None, "Two-sided GRPO clip δ.", group="rl", gt=0)
    num_iterations: int = arg(1, "Updates per rollout batch (μ).", group="rl", ge=1)
    loss_type: Literal[LOSS_TYPES] | None = arg(None, "Loss normalisation (default grpo).", group="rl")
    importance_sampling_level: Literal["token", "sequence", "sequence_token"] = arg(
        "token", "Importance ratio per token (GRPO) or per sequence (GSPO).", group="rl", since="3.7")
    advantage_estimator: Literal["grpo", "rloo", "reinforce_plus_plus"] = arg(
        "grpo", "Advantage estimator.", group="rl", since="3.10")
    scale_rewards: Literal["group", "batch", "none", "gdpo"] | None = arg(
        None, "Reward normalisation (default follows the estimator).", group="rl", since="3.10")
    kl_in_reward: bool | None = arg(None, "Put the KL penalty in the reward instead of the loss.", group="rl")
    dynamic_sample: bool = arg(False, "DAPO dynamic sampling: resample groups with zero reward spread.", group="rl")
    max_resample_times: int = arg(3, "Resampling rounds for dynamic_sample.", group="rl", ge=0)
    overlong_filter: bool = arg(False, "Drop truncated completions from the loss.", group="rl")
    sync_ref_model: bool = arg(False, "Periodically sync the reference model to the policy.", group="rl")
    log_entropy: bool = arg(False, "Log token entropy statistics.", group="rl", since="3.7")
    top_entropy_quantile: float = arg(1.0, "Train only on the top-entropy quantile of tokens.", group="rl",
                                      gt=0, le=1, since="3.7")

    # reward
    reward_funcs: list[str] = arg([], "Reward functions: built-in names or ones registered by external_plugins.",
                                  group="reward", choices=BUILTIN_REWARDS)
    reward_weights: list[float] | None = arg(None, "One weight per reward function and reward model.",
                                             group="reward")
    reward_model: list[str] | None = arg(None, "Reward models (hub ids or paths), scored after reward_funcs.",
                                         group="reward")
    reward_model_plugin: list[str] | None = arg(None, "One plugin per reward model.", group="reward")
    external_plugins: list[str] = arg([], "Python files that register rewards or schedulers.", group="reward")
    soft_max_length: int | None = arg(None, "soft_overlong: length where the penalty reaches its maximum.",
                                      group="reward", ge=1)
    soft_cache_length: int | None = arg(None, "soft_overlong: penalty-free margin below soft_max_length.",
                                        group="reward", ge=1)
    multi_turn_scheduler: str | None = arg(None, "Multi-turn rollout scheduler name.", group="reward")
    max_turns: int | None = arg(None, "Maximum turns for multi-turn rollouts.", group="reward", ge=1)

    # data
    dataset: list[str] = arg([], "Training datasets: id_or_path[:subset][#N].", group="data")
    val_dataset: list[str] = arg([], "Validation datasets.", group="data")
    split_dataset_ratio: float = arg(0.0, "Fraction of the training set held out for evaluation.", group="data",
                                     ge=0, lt=1, old_default=(0.01, "3.6"))
    dataset_num_proc: int = arg(1, "Processes for dataset preprocessing.", group="data", ge=1)
    load_from_cache_file: bool = arg(False, "Reuse the datasets preprocessing cache.", group="data")
    dataset_shuffle: bool = arg(True, "Shuffle the training set.", group="data")
    dataloader_num_workers: int | None = arg(None, "Dataloader worker processes per rank.", group="data", ge=0)

    # training
    num_train_epochs: float = arg(3, "Epochs over the dataset.", group="training", gt=0)
    max_steps: int = arg(-1, "Stop after this many optimizer steps (-1 = epochs decide).", group="training")
    learning_rate: float | None = arg(None, "Learning rate (default 1e-5 full / 1e-4 LoRA).", group="training",
                                      gt=0)
    warmup_ratio: float = arg(0.0, "Warm-up fraction of the steps.", group="training", ge=0, lt=1)
    warmup_steps: int = arg(0, "Warm-up steps (exclusive with warmup_ratio).", group="training", ge=0)
    gradient_checkpointing: bool = arg(True, "Recompute activations in backward (less memory, ~30% slower).",
                                       group="training")
    use_liger_kernel: bool = arg(False, "Liger fused kernels (chunked log-prob loss, no full logits).",
                                 group="training")
    padding_free: bool = arg(False, "Pack sequences without padding (needs flash_attn).", group="training")
    sequence_parallel_size: int = arg(1, "Ulysses sequence-parallel degree.", group="training", ge=1)
    ddp_backend: Literal["nccl", "gloo", "hccl", "mpi"] | None = arg(None, "torch.distributed backend.",
                                                                     group="training")
    ddp_timeout: int = arg(18000000, "Collective timeout in seconds.", group="training", ge=1)
    seed: int = arg(42, "Random seed.", group="training")
    resume_from_checkpoint: str | None = arg(None, "Checkpoint directory to resume from.", group="training")

    # output & logging
    output_dir: str | None = arg(None, "Where runs are written (a versioned vN-YYYYMMDD-HHMMSS dir inside); "
                                 "default output/<model name>.", group="output")
    logging_steps: int = arg(5, "Log metrics every N steps.", group="output", ge=1)
    save_strategy: Literal["steps", "epoch", "no"] = arg("steps", "When to save checkpoints.", group="output")
    save_steps: int = arg(500, "Save every N steps.", group="output", ge=1)
    save_total_limit: int | None = arg(None, "Keep at most N checkpoints.", group="output", ge=1)
    save_only_model: bool = arg(False, "Skip optimizer state in checkpoints.", group="output")
    save_on_each_node: bool = arg(False, "Every node saves (needed when output_dir is not shared).",
                                  group="output")
    eval_strategy: Literal["steps", "epoch", "no"] | None = arg(None, "When to evaluate.", group="output")
    eval_steps: int | None = arg(None, "Evaluate every N steps.", group="output", ge=1)
    report_to: list[str] = arg(["tensorboard"], "Experiment trackers.", group="output",
                               choices=("tensorboard", "wandb", "swanlab", "none"))
    log_completions: bool = arg(False, "Write completions.jsonl with prompts, completions and rewards.",
                                group="output")

    @field_validator("dataset", "reward_funcs", "target_modules", "report_to", "external_plugins")
    @classmethod
    def _no_blank_items(cls, v: list[str]) -> list[str]:
        if any(not str(x).strip() for x in v):
            raise ValueError("empty entry in the list; remove it")
        return v


class RolloutArgs(_Section):
    """Trainer-side rollout settings: vLLM colocated with training, or external ``swift rollout`` servers."""

    use_vllm: bool = arg(False, "Generate with vLLM (off: slow transformers generate).", group="rollout")
    vllm_mode: Literal["colocate", "server"] | None = arg(
        None, "colocate: vLLM shares the training GPUs; server: separate swift rollout nodes.",
        group="rollout", since="3.5")
    vllm_gpu_memory_utilization: float = arg(0.9, "Share of each GPU vLLM reserves (colocate).", group="rollout",
                                             gt=0, le=1, applies="colocate")
    vllm_max_model_len: int | None = arg(None, "vLLM context length (colocate); default from the model.",
                                         group="rollout", ge=1, applies="colocate")
    vllm_tensor_parallel_size: int = arg(1, "vLLM tensor parallel size (colocate).", group="rollout", ge=1,
                                         since="3.4", old_name="tensor_parallel_size", renamed_in="3.5",
                                         applies="colocate")
    vllm_max_num_seqs: int | None = arg(None, "vLLM concurrent sequences (colocate).", group="rollout", ge=1,
                                        applies="colocate")
    num_infer_workers: int | None = arg(
        None, "ms-swift 3.2–3.4: vLLM engines per node. Empty or the node's GPU count: vLLM shares the training "
        "GPUs; fewer: vLLM takes the node's last N GPUs and training the others (NPROC_PER_NODE = GPUs − N).",
        group="rollout", ge=1, until="3.5", applies="colocate")  # 3.5 warns that it is deprecated; 3.6 removed it
    vllm_enable_prefix_caching: bool = arg(True, "vLLM prefix caching.", group="rollout")
    vllm_enable_lora: bool = arg(False, "Sync only LoRA deltas to vLLM.", group="rollout", since="3.10")
    vllm_enforce_eager: bool = arg(False, "Disable CUDA graphs in vLLM (saves memory, slower).", group="rollout")
    sleep_level: Literal[0, 1, 2] = arg(0, "Colocate, while training: 1 frees vLLM's KV cache and moves its weights "
                                        "to CPU RAM, 2 discards both.",
                                        group="rollout", since="3.2.1", applies="colocate")
    offload_model: bool = arg(False, "Colocate: move the policy to CPU during rollout.", group="rollout",
                              since="3.2.1", applies="colocate")
    offload_optimizer: bool = arg(False, "Colocate: move optimizer states to CPU during rollout.",
                                  group="rollout", since="3.2.1", applies="colocate")
    move_model_batches: int | None = arg(None, "Sync weights to vLLM in N layer batches (ZeRO-3).",
                                         group="rollout", ge=1)
    async_generate: bool = arg(False, "Server mode: roll out the next batch while training.", group="rollout",
                               applies="server")
    vllm_server_host: list[str] | None = arg(None, "Rollout server hosts (default: the rollout nodes of the "
                                             "cluster).", group="rollout", since="3.3.1", applies="server")
    vllm_server_port: list[int] = arg([8000], "One HTTP port per server host.", group="rollout", since="3.3.1",
                                      applies="server")
    vllm_server_group_port: list[int] | None = arg(None, "NCCL weight-sync ports (default 51216 + i).",
                                                   group="rollout", since="3.12", applies="server")
    vllm_server_timeout: float = arg(240.0, "Seconds the trainer waits for the servers' /health/.",
                                     group="rollout", gt=0, applies="server")

    @field_validator("vllm_server_host")
    @classmethod
    def _hosts_ok(cls, v: list[str] | None) -> list[str] | None:
        for i, host in enumerate(v or []):
            try:
                check_host(host)
            except ValueError as e:
                raise ValueError(f"item {i}: {e}") from None
        return v


class ServerArgs(_Section):
    """Arguments of ``swift rollout`` on rollout nodes (server mode)."""

    vllm_tensor_parallel_size: int = arg(1, "Tensor parallel size per vLLM engine.", group="server", ge=1,
                                         old_name="tensor_parallel_size", renamed_in="3.7")
    vllm_data_parallel_size: int = arg(1, "vLLM engines per rollout node (TP × DP ≤ GPUs).", group="server",
                                       ge=1, old_name="data_parallel_size", renamed_in="3.7")
    vllm_gpu_memory_utilization: float = arg(0.9, "Share of each rollout GPU vLLM reserves.", group="server",
                                             gt=0, le=1, old_name="gpu_memory_utilization", renamed_in="3.7")
    vllm_max_model_len: int | None = arg(None, "vLLM context length on the server.", group="server", ge=1,
                                         old_name="max_model_len", renamed_in="3.7")
    vllm_enable_lora: bool = arg(False, "Accept LoRA adapter syncs.", group="server", since="3.10")
    vllm_max_lora_rank: int = arg(16, "Largest LoRA rank accepted (≥ train lora_rank).", group="server", ge=1,
                                  since="3.10")
    port: int = arg(8000, "HTTP port of each server.", group="server", ge=1, le=65535)


class Node(BaseModel):
    """One machine: where to reach it, which GPUs to use, and what it does."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)
    host: str = setting(..., "Hostname, IP or ~/.ssh/config alias; 'localhost' runs without SSH.")
    user: str | None = setting(None, "SSH user (default: ssh config / current user).", applies="ssh")
    port: int | None = setting(None, "SSH port (default: ssh config / 22).", applies="ssh", ge=1, le=65535)
    identity_file: str | None = setting(None, "SSH private key file (default: ssh config / agent).", applies="ssh")
    address: str | None = setting(None, "Address other nodes use to reach it (default: host).", applies="ssh")
    gpus: list[int] = setting([0], "CUDA device ids to use, e.g. 0,1,2,3.", widget="csv")
    gpu_model: str | None = setting(None, "GPU model as nvidia-smi names it (from the catalogue or filled in by "
                                    "preflight).", options=_gpu_names)
    gpu_memory_gib: float | None = setting(None, "Memory per GPU in GiB, for a GPU the catalogue does not know (the "
                                           "memory estimate uses it over gpu_model's).", gt=0, le=4096)
    python_env: str | None = setting(None, "venv or conda env directory to activate.")
    role: Literal["trainer", "rollout"] = setting("trainer", "trainer runs swift rlhf; rollout runs swift rollout.")
    workdir: str | None = setting(None, "Directory to cd into (default: the cluster workdir).")
    env: dict[str, str] = setting({}, "Extra environment for this node only: NAME=value items.")

    @field_validator("host")
    @classmethod
    def _host_ok(cls, v: str) -> str:
        return check_host(v.strip(), alias=True)

    @field_validator("address")
    @classmethod
    def _address_ok(cls, v: str | None) -> str | None:
        return None if v is None else check_host(v.strip())

    @field_validator("env")
    @classmethod
    def _env_names(cls, v: dict[str, str]) -> dict[str, str]:
        return check_no_secrets(check_env_names(v, tuple(k for k in RESERVED_ENV if k != "CUDA_VISIBLE_DEVICES")))

    @field_validator("gpus")
    @classmethod
    def _gpus_ok(cls, v: list[int]) -> list[int]:
        if not v:
            raise ValueError("give at least one GPU id")
        if len(set(v)) != len(v) or min(v) < 0:
            raise ValueError(f"GPU ids must be distinct and ≥ 0, got {v}")
        return v

    @property
    def routable(self) -> str:
        """The address other nodes use."""
        return self.address or self.host

    @property
    def is_local(self) -> bool:
        return self.host in ("localhost", "127.0.0.1", "::1")


class ClusterSpec(BaseModel):
    """The machines of the job and how they find each other."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)
    nodes: list[Node] = Field(default_factory=lambda: [Node(host="localhost")], description="The machines, one "
                              "row each (fields: the node settings).")
    master_addr: str | None = setting(None, "Rendezvous address (default: node 0's address).", applies="ssh")
    master_port: int | None = setting(
        None, "Rendezvous port on the master (MASTER_PORT). Unset: 29500 over SSH; on Slurm 20000 + the Slurm job id "
        "mod 20000, so jobs that share a node do not collide.", ge=1, le=65535)
    workdir: str | None = setting(None, "Directory every node cd's into (default: the job's run dir).")
    run_root: str = setting("~/.grpo-ui/runs", "Where each node keeps its run directories.")
    backend: Literal["ssh", "slurm"] = setting(
        "ssh", "ssh: grpo-ui starts every node over SSH. slurm: one sbatch job; Slurm picks the machines (the trainer "
        "nodes then say how many nodes with how many GPUs, their hosts are unused).")
    login: str = setting("localhost", "Where sbatch, squeue and scancel run: a hostname or ~/.ssh/config alias "
                         "reached over SSH, or localhost when the app runs on a login node. run_root must be on a "
                         "file system the compute nodes share.", applies="slurm", pattern=r"^[A-Za-z0-9_.-]+$")

    @field_validator("master_addr")
    @classmethod
    def _master_ok(cls, v: str | None) -> str | None:
        return None if v is None else check_host(v.strip())


# Options a job's extra #SBATCH lines may not set: grpo-ui writes them itself, or a field of its own sets them.
SBATCH_OWN = {
    "nodes": "the number of trainer nodes", "ntasks": "one task per node", "ntasks-per-node": "one task per node",
    "output": "the per-node logs in the run directory", "error": "the per-node logs in the run directory",
    "job-name": "the job id", "chdir": "the run directory", "array": "one job per launch", "wrap": "the batch script",
    "parsable": "the submission", "partition": "slurm.partition", "account": "slurm.account", "qos": "slurm.qos",
    "time": "slurm.time_limit", "gres": "slurm.gpus_per_node", "gpus": "slurm.gpus_per_node",
    "gpus-per-node": "slurm.gpus_per_node", "constraint": "slurm.constraint", "cpus-per-task": "slurm.cpus_per_task",
}
SBATCH_SHORT = {"N": "nodes", "n": "ntasks", "o": "output", "e": "error", "J": "job-name", "D": "chdir", "a": "array",
                "p": "partition", "A": "account", "q": "qos", "t": "time", "G": "gpus", "C": "constraint",
                "c": "cpus-per-task"}
SBATCH_LINE = re.compile(r"^--([A-Za-z][A-Za-z0-9-]*)(?=[= ]|$)|^-([A-Za-z])")  # the option's long or short name
_NAME = (re.compile(r"^[A-Za-z0-9_.-]+$"), "letters, digits, '.', '_' and '-'")
SLURM_TEXT = {  # field → (what sbatch takes, said in words)
    "partition": (re.compile(r"^[A-Za-z0-9_.-]+(,[A-Za-z0-9_.-]+)*$"), "a name, or names separated by ','"),
    "account": _NAME, "qos": _NAME,
    "time_limit": (re.compile(r"^(\d+-\d+(:\d+){0,2}|\d+(:\d+){0,2}|UNLIMITED|INFINITE)$"),
                   "minutes, HH:MM:SS or D-HH:MM:SS"),
    "constraint": (re.compile(r"^[A-Za-z0-9_.,:&|!*\[\]()-]+$"), "feature names joined by & | , ( ) [ ] *"),
}


def sbatch_option(line: str) -> str:
    """One extra #SBATCH line → the option text sbatch reads (``#SBATCH`` prefix dropped); ValueError says why not."""
    text = line.strip().removeprefix("#SBATCH").strip()
    m = SBATCH_LINE.match(text)
    if not m or "#" in text or not text.isprintable():
        raise ValueError(f"{line!r} is not one sbatch option (e.g. --mem=64G or --exclusive)")
    name = m[1] or SBATCH_SHORT.get(m[2], m[2])
    own = next((o for o in SBATCH_OWN if o.startswith(name)), None)  # sbatch takes unambiguous prefixes (--part)
    if own:
        raise ValueError(f"{line!r}: grpo-ui sets --{own} from {SBATCH_OWN[own]}; remove the line")
    return text


class SlurmSpec(BaseModel):
    """How the job asks Slurm for its allocation (cluster.backend slurm)."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)
    partition: str | None = setting(None, "Partition (-p); empty: the cluster's default partition.", applies="slurm")
    account: str | None = setting(None, "Account charged for the job (-A).", applies="slurm")
    qos: str | None = setting(None, "Quality of service (--qos).", applies="slurm")
    time_limit: str | None = setting(None, "Wall-clock limit (-t): minutes, HH:MM:SS or D-HH:MM:SS; the job ends as "
                                     "TIMEOUT when it passes.", applies="slurm")
    gpus_per_node: int | None = setting(None, "GPUs requested per node (--gres=gpu:N); empty: the trainer nodes' GPU "
                                        "count; 0 asks for none (a CPU partition).", applies="slurm", ge=0, le=128)
    cpus_per_task: int | None = setting(None, "CPUs for each node's task, torchrun and its workers "
                                        "(--cpus-per-task); empty: the partition's default.", applies="slurm", ge=1,
                                        le=4096)
    constraint: str | None = setting(None, "Node features the machines must have (-C), e.g. a100|h100.",
                                     applies="slurm")
    extra_sbatch: list[str] = setting([], "More #SBATCH lines, one option each (e.g. --exclusive, --mem=0, "
                                      "--reservation=ml).", applies="slurm", widget="lines")

    @field_validator("partition", "account", "qos", "time_limit", "constraint")
    @classmethod
    def _text_ok(cls, v: str | None, info) -> str | None:
        pattern, form = SLURM_TEXT[info.field_name]
        if v is not None and not pattern.match(v):
            raise ValueError(f"{v!r} is not a Slurm {info.field_name.replace('_', ' ')}: use {form}")
        return v

    @field_validator("extra_sbatch")
    @classmethod
    def _lines_ok(cls, v: list[str]) -> list[str]:
        problems = []
        for i, line in enumerate(v):
            try:
                sbatch_option(line)
            except ValueError as e:
                problems.append(f"line {i + 1}: {e}")
        if problems:
            raise ValueError("; ".join(problems))
        return v


def _split_secrets(data: dict) -> tuple[dict, list[str]]:
    """Raw spec data with token-like names taken out of ``env`` and every node's ``env`` and added to
    ``secret_env`` (their values dropped); and the names moved. ``data`` itself is left as it was."""
    moved: list[str] = []

    def take(env):
        if not isinstance(env, dict):
            return env
        found = [k for k in env if isinstance(k, str) and SECRET_NAME.search(k)]
        moved.extend(k for k in found if k not in moved)
        return {k: v for k, v in env.items() if k not in found}

    data = {**data, **({"env": take(data["env"])} if "env" in data else {})}
    cluster = data.get("cluster")
    if isinstance(cluster, dict) and isinstance(cluster.get("nodes"), list):
        nodes = [{**n, "env": take(n["env"])} if isinstance(n, dict) and "env" in n else n for n in cluster["nodes"]]
        data["cluster"] = {**cluster, "nodes": nodes}
    names = data.get("secret_env") or []
    if moved and isinstance(names, list):
        data["secret_env"] = [*names, *(k for k in moved if k not in names)]
    return data, moved


class JobSpec(BaseModel):
    """A whole GRPO job: training args, rollout, optional rollout servers, the cluster and the ms-swift version."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)
    name: str = setting("grpo-job", "Job name (letters, digits, . _ -).")
    swift_version: str = setting("4.6", "ms-swift version on the nodes; picks the flag dialect.",
                                 options=lambda: list(SUPPORTED_VERSIONS[::-1]))
    train: TrainArgs = Field(default_factory=TrainArgs, description="swift rlhf arguments.")
    rollout: RolloutArgs = Field(default_factory=RolloutArgs, description="Trainer-side rollout arguments.")
    server: ServerArgs = Field(default_factory=ServerArgs, description="swift rollout arguments.")
    cluster: ClusterSpec = Field(default_factory=ClusterSpec, description="The machines.")
    slurm: SlurmSpec = Field(default_factory=SlurmSpec, description="The Slurm request.")
    env: dict[str, str] = setting({}, "Environment for every node: NAME=value, one per line.", widget="lines")
    secret_env: list[str] = setting([], "Names of secret variables (values live in a 0600 file, never here).")
    extra_args: list[str] = setting([], "Extra swift rlhf arguments, verbatim.")
    rollout_extra_args: list[str] = setting([], "Extra swift rollout arguments, verbatim.")
    unresolved: dict[str, str] = Field(default_factory=dict, description="Values an imported script left to its "
                                       "caller's shell ({field path: shell text}); each must be filled in.")
    hf_configs: dict[str, dict] = Field(default_factory=dict, description="The config.json of models the catalogue "
                                        "does not know, by model id: the memory estimate reads their architecture.")
    _moved_secrets: list[str] = PrivateAttr(default_factory=list)  # token-like env names moved when loaded

    @model_validator(mode="wrap")
    @classmethod
    def _secrets_out_of_env(cls, data, handler):
        """Token-like names (``*_TOKEN``, ``*_KEY``, ``*PASSWORD*``, ``*SECRET*``) in ``env`` or a node's ``env``
        become ``secret_env`` names; their values are dropped so they never reach a script, YAML or the database
        (``moved_secrets`` lists them for the finding)."""
        data, moved = _split_secrets(data) if isinstance(data, dict) else (data, [])
        spec = handler(data)
        if moved and isinstance(spec, JobSpec):
            spec._moved_secrets = moved
        return spec

    @property
    def moved_secrets(self) -> list[str]:
        return list(self._moved_secrets)

    @field_validator("hf_configs")
    @classmethod
    def _hf_configs_ok(cls, v: dict[str, dict]) -> dict[str, dict]:
        for model, cfg in v.items():
            try:
                from_hf_config(cfg)
            except ValueError as e:
                raise ValueError(f"the config.json given for {model}: {e}") from None
        return v

    @field_validator("name")
    @classmethod
    def _name_ok(cls, v: str) -> str:
        try:
            return check_name(v, "job name", longest=64)
        except SpecError as e:
            raise ValueError(e.problems[0][1]) from None

    @field_validator("swift_version")
    @classmethod
    def _version_ok(cls, v: str) -> str:
        parse_version(v)
        return v

    @field_validator("env")
    @classmethod
    def _env_ok(cls, v: dict[str, str]) -> dict[str, str]:
        return check_no_secrets(check_env_names(v))

    @field_validator("secret_env")
    @classmethod
    def _secret_names_ok(cls, v: list[str]) -> list[str]:
        return check_env_names(v)

    def trainer_nodes(self) -> list[Node]:
        return [n for n in self.cluster.nodes if n.role == "trainer"]

    def rollout_nodes(self) -> list[Node]:
        return [n for n in self.cluster.nodes if n.role == "rollout"]


# ---------------------------------------------------------------------------------------------------------------
# The field registry: what the form, the CLI renderer, the importer and the docs iterate over.

SECTIONS: dict[str, type[BaseModel]] = {"train": TrainArgs, "rollout": RolloutArgs, "server": ServerArgs}
SECTION_APPLIES = {"server": "server"}  # the swift rollout arguments act in server mode only
# grpo-ui's own settings: section → (model, where its fields live in a JobSpec; '[i]': in every node)
SETTING_SECTIONS: dict[str, tuple[type[BaseModel], str]] = {
    "job": (JobSpec, ""), "cluster": (ClusterSpec, "cluster."), "node": (Node, "cluster.nodes[i]."),
    "slurm": (SlurmSpec, "slurm.")}
STRUCTURE = {"train", "rollout", "server", "cluster", "slurm", "nodes", "unresolved", "hf_configs"}  # not form settings


@dataclass(frozen=True, kw_only=True)
class Decl:
    """One declared field, as read back from its declaration: its type, help, default, bounds and how a form edits
    it. Forms, validation, argv, YAML and docs read these, never the models' fields one by one."""

    section: str
    name: str
    help: str
    default: Any
    annotation: Any
    bounds: dict
    widget: str | None = None  # 'lines' / 'csv': how a list or mapping is written as text (setting())
    applies: str | None = None  # the backend ('ssh', 'slurm') or vLLM mode ('colocate', 'server') that alone uses it
    choices: tuple | None = None  # suggestions for a free-text field (arg())
    options: Callable[[], list[str]] | None = None  # the values to choose from (setting())
    required: bool = False

    @property
    def path(self) -> str:
        return f"{self.section}.{self.name}"

    def owner(self, spec: JobSpec, index: int | None = None) -> BaseModel:
        """The model in ``spec`` that holds this field."""
        return getattr(spec, self.section)


@dataclass(frozen=True, kw_only=True)
class ArgDecl(Decl):
    """One declared ms-swift argument (``arg()``)."""

    group: str
    flag: str
    since: str | None
    until: str | None
    old_name: str | None
    renamed_in: str | None
    old_default: tuple | None = None  # (ms-swift's default before a version, that version)

    def accepted_in(self, version: str) -> bool:
        v = parse_version(version)
        return (self.since is None or v >= parse_version(self.since)) and (
            self.until is None or v < parse_version(self.until))

    def swift_default(self, version: str) -> Any:
        """ms-swift's own default in that version (what an omitted flag means there)."""
        if self.old_default and parse_version(version) < parse_version(self.old_default[1]):
            return self.old_default[0]
        return self.default

    def flag_for(self, version: str) -> str:
        """The flag name this version knows (the old name before a rename)."""
        if self.old_name and parse_version(version) < parse_version(self.renamed_in):
            return self.old_name
        return self.flag


@dataclass(frozen=True, kw_only=True)
class SettingDecl(Decl):
    """One declared grpo-ui setting (``setting()``): of the job, its cluster, each node (section 'node') or Slurm."""

    @property
    def path(self) -> str:
        """Dotted path; a node setting's has ``[i]`` for the node's index (``path_at``)."""
        return SETTING_SECTIONS[self.section][1] + self.name

    def path_at(self, index: int) -> str:
        return self.path.replace("[i]", f"[{index}]")

    @property
    def per_node(self) -> bool:
        return self.section == "node"

    def owner(self, spec: JobSpec, index: int | None = None) -> BaseModel:
        if self.section == "job":
            return spec
        if self.section == "node":
            return spec.cluster.nodes[index]
        return getattr(spec, self.section)


def _bounds(info) -> dict:
    out = {}
    for m in info.metadata:
        for key in ("ge", "gt", "le", "lt"):
            if getattr(m, key, None) is not None:
                out[key] = getattr(m, key)
    return out


def _common(section: str, name: str, info) -> dict:
    return {"section": section, "name": name, "help": info.description or "", "annotation": info.annotation,
            "default": info.get_default(call_default_factory=True), "bounds": _bounds(info)}


def _args(section: str, model: type[BaseModel]) -> list[ArgDecl]:
    out = []
    for name, info in model.model_fields.items():
        sw = (info.json_schema_extra or {})["swift"]
        out.append(ArgDecl(**_common(section, name, info), applies=sw["applies"] or SECTION_APPLIES.get(section),
                           group=sw["group"], flag=sw["flag"] or name,
                           since=sw["since"], until=sw["until"], old_name=sw["old_name"],
                           renamed_in=sw["renamed_in"], choices=tuple(sw["choices"]) if sw["choices"] else None,
                           old_default=tuple(sw["old_default"]) if sw.get("old_default") else None))
    return out


def _settings(section: str, model: type[BaseModel]) -> list[SettingDecl]:
    """The section's settings; a field declared otherwise must be one of the spec's sections (STRUCTURE)."""
    out = []
    for name, info in model.model_fields.items():
        extra = (info.json_schema_extra or {}).get("setting")
        if extra is None:
            if name not in STRUCTURE:
                raise TypeError(f"{model.__name__}.{name} is not declared with setting()")
            continue
        out.append(SettingDecl(**_common(section, name, info), applies=extra["applies"], widget=extra["widget"],
                               options=extra["options"], required=info.is_required()))
    return out


ARGS: tuple[ArgDecl, ...] = tuple(d for s, m in SECTIONS.items() for d in _args(s, m))
ARGS_BY_PATH: dict[str, ArgDecl] = {d.path: d for d in ARGS}
SETTINGS: tuple[SettingDecl, ...] = tuple(d for s, (m, _) in SETTING_SECTIONS.items() for d in _settings(s, m))
SETTINGS_BY_PATH: dict[str, SettingDecl] = {d.path: d for d in SETTINGS}


# ---------------------------------------------------------------------------------------------------------------
# Paths, YAML, errors.

class SpecError(UserError, ValueError):
    """A spec that cannot be loaded; ``problems`` lists (dotted field path, message)."""

    def __init__(self, problems: list[tuple[str, str]], source: str = "spec"):
        self.problems = problems
        lines = [f"{source}: {len(problems)} problem(s)"] + [f"  {p}: {m}" for p, m in problems]
        super().__init__("\n".join(lines))


def _path_of(loc: tuple) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "spec"


def validate_spec(data: dict, source: str = "spec") -> JobSpec:
    """dict → JobSpec, or SpecError naming every bad field and why."""
    try:
        return JobSpec.model_validate(data)
    except ValidationError as e:
        raise SpecError([(_path_of(err["loc"]), err["msg"]) for err in e.errors()], source) from None


def spec_to_yaml(spec: JobSpec) -> str:
    """YAML with only the set fields (plus name and version); loads back to an equal spec, set fields included."""
    data = spec.model_dump(mode="json", exclude_unset=True)
    data = {"name": spec.name, "swift_version": spec.swift_version, **data}
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=120)


YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml's safe loader when PyYAML has it (~10× faster)
MAX_YAML_BYTES = 1 << 20  # a job spec is a few KiB
MAX_YAML_DEPTH = 32  # a job spec nests 4 deep; libyaml's loaders recurse per level (deep input crashes or raises)
_OPEN = (yaml.BlockMappingStartToken, yaml.BlockSequenceStartToken, yaml.FlowMappingStartToken,
         yaml.FlowSequenceStartToken)
_CLOSE = (yaml.BlockEndToken, yaml.FlowMappingEndToken, yaml.FlowSequenceEndToken)


def check_yaml_limits(text: str, source: str = "spec") -> None:
    """Size, nesting depth and aliases of a YAML text, checked with PyYAML's pure-Python scanner (iterative, and it
    reads only a few tokens ahead, unlike libyaml's) before anything is parsed: a deep ``[[[[…]]]]`` overflows the
    recursive parsers, and aliases can expand a small file into billions of items. Raises SpecError."""
    size = len(text.encode("utf-8", "surrogateescape"))
    if size > MAX_YAML_BYTES:
        raise SpecError([("spec", f"{size} bytes is more than a job spec needs (limit {MAX_YAML_BYTES})")], source)
    depth = 0
    try:
        for token in yaml.scan(text, Loader=yaml.SafeLoader):
            if isinstance(token, _OPEN):
                depth += 1
                if depth > MAX_YAML_DEPTH:
                    raise SpecError([("spec", f"nested more than {MAX_YAML_DEPTH} levels deep (line "
                                              f"{token.start_mark.line + 1}); a job spec needs 4")], source)
            elif isinstance(token, _CLOSE):
                depth -= 1
            elif isinstance(token, (yaml.AliasToken, yaml.AnchorToken)):
                raise SpecError([("spec", f"anchors and aliases (&name, *name; line {token.start_mark.line + 1}) "
                                          "are not accepted in a job spec: write the values out")], source)
    except yaml.YAMLError as e:
        raise SpecError([("spec", f"not valid YAML: {e}")], source) from None


def spec_from_yaml(text: str, source: str = "spec") -> JobSpec:
    check_yaml_limits(text, source)
    try:
        data = yaml.load(text, Loader=YAML_LOADER) or {}
    except yaml.YAMLError as e:
        raise SpecError([("spec", f"not valid YAML: {e}")], source) from None
    if not isinstance(data, dict):
        raise SpecError([("spec", "the top level must be a mapping of sections")], source)
    return validate_spec(data, source)


def load_spec(path: str | Path) -> JobSpec:
    p = Path(path)
    try:
        with open(p, "rb") as f:
            raw = f.read(MAX_YAML_BYTES + 1)
        text = raw.decode("utf-8")
    except OSError as e:
        raise SpecError([("spec", f"cannot read {p}: {e.strerror}")], str(p)) from None
    except UnicodeDecodeError as e:
        raise SpecError([("spec", f"not UTF-8 text (byte {e.start}): save the file as UTF-8")], str(p)) from None
    return spec_from_yaml(text, str(p))


def save_spec(spec: JobSpec, path: str | Path) -> None:
    Path(path).write_text(spec_to_yaml(spec))


_PATH_PART = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)(?:\[(\d+)\])?")


def get_path(spec: JobSpec, path: str) -> Any:
    """Value at a dotted path such as ``train.num_generations`` or ``cluster.nodes[1].host``."""
    obj: Any = spec
    for part in path.split("."):
        m = _PATH_PART.fullmatch(part)
        if not m:
            raise KeyError(path)
        obj = getattr(obj, m[1])
        if m[2] is not None:
            obj = obj[int(m[2])]
    return obj


def _set_data(value: Any) -> Any:
    """A model's set fields as plain data (lists of models too); anything else unchanged."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="python", exclude_unset=True)
    if isinstance(value, list):
        return [_set_data(v) for v in value]
    return value


def _field(model: Any, part: str) -> re.Match:
    m = _PATH_PART.fullmatch(part)
    if m is None or m[1] not in type(model).model_fields:
        raise KeyError(part)
    return m


def with_changes(spec: JobSpec, changes: dict[str, Any]) -> JobSpec:
    """A new, validated spec with ``{dotted path: value}`` applied; the changed fields become set, the others keep
    their set/unset state. SpecError names a bad path or value."""
    data = _set_data(spec)
    for path, value in changes.items():
        *parents, leaf = path.split(".")
        obj, model = data, spec
        try:
            for part in parents:
                m = _field(model, part)
                model = getattr(model, m[1])
                obj = obj.setdefault(m[1], _set_data(model))
                if m[2] is not None:
                    model, obj = model[int(m[2])], obj[int(m[2])]
            m = _field(model, leaf)
            if m[2] is None:
                obj[m[1]] = value
            else:
                obj.setdefault(m[1], _set_data(getattr(model, m[1])))[int(m[2])] = value
        except (KeyError, IndexError, TypeError, AttributeError):
            raise SpecError([(path, "no such field")]) from None
    return validate_spec(data)
