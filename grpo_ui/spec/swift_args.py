"""ms-swift's arguments grpo-ui models, each declared once (field names are the ms-swift 4.x flag names): ``swift rlhf``'s
training arguments (TrainArgs), the trainer's rollout arguments (RolloutArgs) and ``swift rollout``'s (ServerArgs).

Set vs default: a field is *set* when it is in its section's ``model_fields_set`` (the user, a preset, an imported
script or the YAML gave it); otherwise ms-swift's own default for the target version applies. Declared defaults are
ms-swift's (a test checks them against its argument classes), so rules read effective values from unset fields;
rendering, YAML export and presets carry exactly the set fields.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, field_validator

from grpo_ui.spec.fields import MEGATRON, SWIFT, arg, parse_version
from grpo_ui.spec.names import check_host

SUPPORTED_VERSIONS = ("3.2", "3.3", "3.4", "3.5", "3.6", "3.7", "3.8", "3.9", "3.10", "3.11", "3.12",
                      "4.0", "4.1", "4.2", "4.3", "4.4", "4.5", "4.6")
DEEPSPEED_PRESETS = ("zero0", "zero1", "zero2", "zero3", "zero2_offload", "zero3_offload")
TUNER_TYPES = ("lora", "full", "lora_llm", "longlora", "adalora", "llamapro", "adapter", "vera", "boft",
               "fourierft", "reft", "bone")
LOSS_TYPES = ("grpo", "bnpo", "dr_grpo", "dapo", "cispo", "sapo", "real", "fipo")
FIRST_GRPO_VERSION = (3, 2, 0)  # ms-swift's first release with GRPO
BUILTIN_REWARDS = ("accuracy", "format", "cosine", "repetition", "soft_overlong", "math", "toolbench", "react_format")


def dialect_of(version: str) -> str:
    """The flag dialect of an ms-swift version; ValueError for versions without GRPO."""
    v = parse_version(version)
    if v >= (4, 1, 0):
        return "4.1+"
    if v >= (4, 0, 0):
        return "4.0"
    if v >= (3, 5, 0):
        return "3.5-3.12"
    if v >= FIRST_GRPO_VERSION:
        return "3.2-3.4"
    raise ValueError(f"ms-swift {version} is older than 3.2, which has no GRPO support; upgrade ms-swift")



class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class TrainArgs(_Section):
    """Arguments of ``swift rlhf --rlhf_type grpo`` other than rollout/vLLM."""

    # model & tuner
    model: str | None = arg(None, "Hub id or local path of the policy model.", group="model")
    model_type: str | None = arg(None, "ms-swift model type; auto-detected from the model when empty.", group="model")
    template: str | None = arg(None, "Chat template; auto-detected when empty.", group="model")
    system: str | None = arg(None, "System prompt, or a path to a .txt file with it.", group="model", widget="text")
    tuner_type: Literal[TUNER_TYPES] = arg("lora", "lora trains adapters on a frozen base; full trains every weight.",
                                           group="model", old_name="train_type", renamed_in="4.0", megatron={"default": "full", "values": ("lora", "full", "lora_llm")})
    lora_rank: int = arg(8, "LoRA rank r.", group="model", ge=1, le=1024)
    lora_alpha: int = arg(32, "LoRA alpha (scale = alpha / r).", group="model", ge=1)
    lora_dropout: float = arg(0.05, "LoRA dropout.", group="model", ge=0, lt=1)
    target_modules: list[str] = arg(["all-linear"], "Modules that get LoRA adapters: all-linear or name suffixes.",
                                    group="model")
    torch_dtype: Literal["bfloat16", "float16", "float32"] | None = arg(
        None, "Parameter dtype; empty = from config.json.", group="model")
    attn_impl: str | None = arg(None, "Attention kernel; padding_free needs flash_attn.", group="model",
                                choices=("flash_attn", "sdpa", "eager"), engines=SWIFT, instead="attention_backend (Megatron's attention kernel)")
    quant_bits: Literal[4, 8] | None = arg(None, "Load the base model quantized (QLoRA).", group="model", engines=SWIFT, instead='nothing: Megatron-SWIFT loads no quantized base model; use LoRA (tuner_type lora) on bf16 weights')
    quant_method: Literal["bnb", "hqq", "eetq"] | None = arg(None, "Quantization backend for quant_bits.",
                                                             group="model", engines=SWIFT, instead='nothing: Megatron-SWIFT loads no quantized base model')
    deepspeed: str | None = arg(None, "DeepSpeed preset (zero0…zero3_offload), a JSON file path or a JSON string.",
                                group="model", choices=DEEPSPEED_PRESETS, widget="text", engines=SWIFT, instead="Megatron's own sharding: use_distributed_optimizer (ZeRO-1 like), tensor/pipeline/expert parallelism")
    fsdp: str | None = arg(None, "fsdp2, a path to an FSDP2 JSON config or a JSON string; exclusive with deepspeed.",
                           group="model", choices=("fsdp2",), widget="text", engines=SWIFT, instead="Megatron's own sharding: use_distributed_optimizer, tensor/pipeline/expert parallelism")
    use_hf: bool = arg(False, "Download the model and datasets from the Hugging Face Hub instead of ModelScope (as "
                       "USE_HF=1 in the environment does).", group="model")
    ref_model: str | None = arg(None, "Separate reference model (full tuning only; default: the initial policy).",
                                group="model")

    # batch & generation
    per_device_train_batch_size: int = arg(1, "Completions per device per micro-step.", group="batch", ge=1, engines=SWIFT, instead='micro_batch_size (completions per data-parallel rank per micro-step)')
    per_device_eval_batch_size: int = arg(1, "Completions per device per eval step.", group="batch", ge=1, engines=SWIFT, instead='micro_batch_size')
    gradient_accumulation_steps: int | None = arg(None, "Micro-steps per optimizer step (GRPO default 1).",
                                                  group="batch", ge=1, engines=SWIFT, instead='global_batch_size = micro_batch_size × DP × the accumulation steps')
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
    top_k: int = arg(-1, "Top-k sampling (-1 = off).", group="batch", old_default=(50, "4.1"), megatron={"old_default": (50, "4.3")})
    top_p: float = arg(1.0, "Top-p sampling.", group="batch", gt=0, le=1, old_default=(0.9, "4.1"), megatron={"old_default": (0.9, "4.3")})
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
                                         group="reward", engines=SWIFT, instead="reward_funcs (Megatron GRPO does not run reward models yet: megatron_args.py 'Not Supported Yet')")
    reward_model_plugin: list[str] | None = arg(None, "One plugin per reward model.", group="reward", engines=SWIFT, instead='reward_funcs with external_plugins')
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
    dataloader_num_workers: int | None = arg(None, "Dataloader worker processes per rank.", group="data", ge=0, megatron={"default": 4})

    # training
    num_train_epochs: float | None = arg(3, "Epochs over the dataset (Megatron: whole epochs; they decide train_iters when set).", group="training", gt=0, megatron={"default": None, "integer": True})
    max_steps: int = arg(-1, "Stop after this many optimizer steps (-1 = epochs decide).", group="training", engines=SWIFT, instead='train_iters')
    learning_rate: float | None = arg(None, "Learning rate (default 1e-5 full / 1e-4 LoRA).", group="training",
                                      gt=0, engines=SWIFT, instead='lr')
    warmup_ratio: float = arg(0.0, "Warm-up fraction of the steps.", group="training", ge=0, lt=1, engines=SWIFT, instead='lr_warmup_fraction')
    warmup_steps: int = arg(0, "Warm-up steps (exclusive with warmup_ratio).", group="training", ge=0, engines=SWIFT, instead='lr_warmup_iters')
    gradient_checkpointing: bool = arg(True, "Recompute activations in backward (less memory, ~30% slower).",
                                       group="training", engines=SWIFT, instead='recompute_granularity (selective or full)')
    use_liger_kernel: bool = arg(False, "Liger fused kernels (chunked log-prob loss, no full logits).",
                                 group="training", engines=SWIFT, instead='nothing: Megatron computes the loss with its own fused cross entropy')
    padding_free: bool = arg(False, "Pack sequences without padding (needs flash_attn).", group="training", megatron={"default": True})
    sequence_parallel_size: int = arg(1, "Ulysses sequence-parallel degree.", group="training", ge=1, engines=SWIFT, instead="context_parallel_size (Megatron sets ms-swift's sequence_parallel_size to it)")
    ddp_backend: Literal["nccl", "gloo", "hccl", "mpi"] | None = arg(None, "torch.distributed backend.",
                                                                     group="training", megatron={"default": "nccl", "values": ("nccl", "gloo")})
    ddp_timeout: int = arg(18000000, "Collective timeout in seconds.", group="training", ge=1)
    seed: int = arg(42, "Random seed.", group="training")
    resume_from_checkpoint: str | None = arg(None, "Checkpoint directory to resume from.", group="training", engines=SWIFT, instead='mcore_model (the checkpoint) with finetune false')

    # output & logging
    output_dir: str | None = arg(None, "Where runs are written (a versioned vN-YYYYMMDD-HHMMSS dir inside); "
                                 "default output/<model name>.", group="output")
    logging_steps: int = arg(5, "Log metrics every N steps.", group="output", ge=1)
    save_strategy: Literal["steps", "epoch", "no"] = arg("steps", "When to save checkpoints.", group="output")
    save_steps: int = arg(500, "Save every N steps.", group="output", ge=1)
    save_total_limit: int | None = arg(None, "Keep at most N checkpoints.", group="output", ge=1)
    save_only_model: bool = arg(False, "Skip optimizer state in checkpoints.", group="output", engines=SWIFT, instead='no_save_optim and no_save_rng')
    save_on_each_node: bool = arg(False, "Every node saves (needed when output_dir is not shared).",
                                  group="output", engines=SWIFT, instead='nothing: every node of a Megatron job writes one shared output_dir')
    eval_strategy: Literal["steps", "epoch", "no"] | None = arg(None, "When to evaluate.", group="output", engines=SWIFT, instead='eval_steps')
    eval_steps: int | None = arg(None, "Evaluate every N steps.", group="output", ge=1)
    report_to: list[str] = arg(["tensorboard"], "Experiment trackers.", group="output",
                               choices=("tensorboard", "wandb", "swanlab", "none"))
    log_completions: bool = arg(False, "Write completions.jsonl with prompts, completions and rewards.",
                                group="output")

    # Megatron (megatron rlhf): parallelism, batch, memory, optimizer and checkpoints. ms-swift 4.6's
    # swift/megatron/arguments/megatron_args.py (MegatronArguments) is where each default comes from.
    tensor_model_parallel_size: int = arg(1, "Tensor parallelism (TP): each layer's matrices split over TP GPUs of a "
                                          "node.", group="parallel", ge=1, engines=MEGATRON, instead='deepspeed zero3 or fsdp to shard the model, or engine megatron')
    pipeline_model_parallel_size: int = arg(1, "Pipeline parallelism (PP): the layers split into PP stages.",
                                            group="parallel", ge=1, engines=MEGATRON, instead='deepspeed zero3 or fsdp, or engine megatron')
    context_parallel_size: int = arg(1, "Context parallelism (CP): each sequence split over CP GPUs.",
                                     group="parallel", ge=1, engines=MEGATRON, instead='sequence_parallel_size (Ulysses), or engine megatron')
    expert_model_parallel_size: int = arg(1, "Expert parallelism (EP, MoE models): the experts split over EP GPUs.",
                                          group="parallel", ge=1, engines=MEGATRON, instead='deepspeed zero3, or engine megatron')
    expert_tensor_parallel_size: int = arg(1, "Tensor parallelism inside each expert (ETP, MoE models).",
                                           group="parallel", ge=1, engines=MEGATRON, instead='engine megatron')
    sequence_parallel: bool = arg(False, "Sequence parallelism: shard the activations outside attention over the TP "
                                  "group (ms-swift turns it off when TP is 1).", group="parallel", engines=MEGATRON, instead='sequence_parallel_size (Ulysses), or engine megatron')
    virtual_pipeline_model_parallel_size: int | None = arg(
        None, "Virtual pipeline stages per PP rank (interleaved schedule); GRPO with a reference model refuses it.",
        group="parallel", ge=1, engines=MEGATRON, since="4.0", instead='engine megatron')
    decoder_first_pipeline_num_layers: int | None = arg(
        None, "Layers in the first pipeline stage (uneven split; needs PP > 1).", group="parallel", ge=1,
        engines=MEGATRON, instead='engine megatron')
    decoder_last_pipeline_num_layers: int | None = arg(
        None, "Layers in the last pipeline stage (uneven split; needs PP > 1).", group="parallel", ge=1,
        engines=MEGATRON, instead='engine megatron')
    use_distributed_optimizer: bool = arg(True, "Shard the optimizer states over the data-parallel ranks (ZeRO-1).",
                                          group="parallel", engines=MEGATRON, instead='deepspeed zero1 (or zero2/zero3)')
    micro_batch_size: int = arg(1, "Completions per data-parallel rank per micro-step.", group="batch", ge=1,
                                engines=MEGATRON, instead='per_device_train_batch_size')
    global_batch_size: int = arg(16, "Completions per optimizer step over all data-parallel ranks (micro × DP × "
                                 "micro-steps).", group="batch", ge=1, engines=MEGATRON, instead='per_device_train_batch_size × world × gradient_accumulation_steps')
    recompute_granularity: Literal["selective", "full", "none"] = arg(
        "selective", "Activation recomputation: selective (attention only), full (whole layers) or none.",
        group="parallel", engines=MEGATRON, instead='gradient_checkpointing')
    recompute_method: Literal["uniform", "block"] | None = arg(
        None, "With full recomputation: uniform (every N layers) or block (the first N layers of each stage).",
        group="parallel", engines=MEGATRON, instead='gradient_checkpointing')
    recompute_num_layers: int | None = arg(None, "Layers per recomputation unit (full recomputation).",
                                           group="parallel", ge=1, engines=MEGATRON, instead='gradient_checkpointing')
    optimizer_cpu_offload: bool = arg(False, "Keep optimizer states on the CPU and step there (with the "
                                      "distributed optimizer).", group="parallel", engines=MEGATRON, instead='deepspeed zero2_offload or zero3_offload')
    optimizer_offload_fraction: float = arg(1.0, "Share of the optimizer states offloaded to the CPU.",
                                            group="parallel", ge=0, le=1, engines=MEGATRON, instead='deepspeed zero2_offload or zero3_offload')
    use_precision_aware_optimizer: bool = arg(False, "Transformer Engine's precision-aware optimizer (lower-precision "
                                              "main parameters and moments).", group="parallel", engines=MEGATRON, instead='engine megatron')
    attention_backend: str = arg("flash", "Megatron attention kernel: flash, fused, unfused, local, auto (or flash_2, "
                                 "flash_3, flash_4).", group="parallel", engines=MEGATRON,
                                 choices=("flash", "fused", "unfused", "local", "auto"), instead='attn_impl')
    train_iters: int | None = arg(None, "Optimizer steps of the run (num_train_epochs, when set, decides instead).",
                                  group="training", ge=1, engines=MEGATRON, instead='max_steps')
    lr: float | None = arg(None, "Learning rate (default 1e-5 full / 1e-4 LoRA).", group="training", gt=0,
                           engines=MEGATRON, instead='learning_rate')
    min_lr: float = arg(0.0, "Learning rate at the end of the decay.", group="training", ge=0, engines=MEGATRON, instead="engine megatron (swift rlhf's scheduler decays to 0)")
    lr_warmup_fraction: float | None = arg(None, "Warm-up fraction of the steps.", group="training", ge=0, lt=1,
                                           engines=MEGATRON, instead='warmup_ratio')
    lr_warmup_iters: int = arg(0, "Warm-up steps.", group="training", ge=0, engines=MEGATRON, instead='warmup_steps')
    bf16: bool | None = arg(None, "Train in bfloat16 (default: from torch_dtype / the model's config).",
                            group="training", engines=MEGATRON, instead='torch_dtype bfloat16')
    finetune: bool = arg(True, "Start from step 0 with fresh optimizer and data iterators (false resumes an mcore "
                         "checkpoint's state).", group="training", engines=MEGATRON, instead='resume_from_checkpoint to resume')
    mcore_model: str | None = arg(None, "A Megatron (torch_dist) checkpoint to load instead of the HF weights of "
                                  "model.", group="model", engines=MEGATRON, since="4.0", instead='model (HF weights)')
    no_save_optim: bool = arg(False, "Save no optimizer state in checkpoints.", group="output", engines=MEGATRON, instead='save_only_model')
    no_save_rng: bool = arg(False, "Save no RNG state in checkpoints.", group="output", engines=MEGATRON, instead='save_only_model')
    save_safetensors: bool = arg(True, "Save checkpoints as HF safetensors (through mcore-bridge).", group="output",
                                 engines=MEGATRON, instead='nothing: swift rlhf saves safetensors')
    merge_lora: bool | None = arg(None, "Merge LoRA into the saved safetensors (default: save_safetensors).",
                                  group="output", engines=MEGATRON, instead='swift export --merge_lora after training')
    use_ray: bool = arg(False, "Run as ms-swift's Ray mode (megatron rlhf --use_ray true --config job.yaml): the "
                        "trainers and the vLLM replicas are Ray actors, placed on the cluster's GPUs (no rollout "
                        "nodes: colocated; rollout nodes: separate GPUs).", group="ray", engines=MEGATRON,
                        since="4.3", instead="engine megatron (swift rlhf GRPO has no Ray mode: ms-swift's Ray page marks grpo unsupported there)")

    @field_validator("dataset", "reward_funcs", "target_modules", "report_to", "external_plugins")
    @classmethod
    def _no_blank_items(cls, v: list[str]) -> list[str]:
        if any(not str(x).strip() for x in v):
            raise ValueError("empty entry in the list; remove it")
        return v


class RolloutArgs(_Section):
    """Trainer-side rollout settings: vLLM colocated with training, or external ``swift rollout`` servers."""

    use_vllm: bool = arg(False, "Generate with vLLM (off: slow transformers generate).", group="rollout", megatron={"default": True})
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
        group="rollout", ge=1, until="3.5", applies="colocate", engines=SWIFT, instead='vllm_mode colocate')  # 3.5 warns that it is deprecated; 3.6 removed it
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
    offload_bridge: bool = arg(False, "Megatron colocate: keep the HF-format export buffer of the weight sync on the "
                               "CPU.", group="rollout", applies="colocate", engines=MEGATRON, instead='engine megatron')
    move_model_batches: int | None = arg(None, "Sync weights to vLLM in N layer batches (ZeRO-3).",
                                         group="rollout", ge=1, engines=SWIFT, instead="nothing: Megatron syncs the weights to vLLM by itself ('Not Supported Yet' there)")
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
