"""Rewards and the algorithm: reward functions, models and weights, loss types, Liger, padding-free, vLLM LoRA."""

from __future__ import annotations

from grpo_ui.checks.rules.base import rule
from grpo_ui.core.findings import finding
from grpo_ui.spec.fields import ENGINES
from grpo_ui.spec.swift_args import BUILTIN_REWARDS


@rule(engines=ENGINES)
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
