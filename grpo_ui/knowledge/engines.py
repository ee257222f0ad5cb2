"""How a job shards its model: DeepSpeed's ZeRO settings and FSDP's, read from ms-swift's preset names, inline JSON
or a JSON file, as the memory estimate needs them. A config that cannot be read is an error, never a guess."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

# ms-swift's presets (swift/config/zero*.json, ms-swift 4.6): bucket sizes in elements; 'auto' values are filled in by
# transformers' HfDeepSpeedConfig (trainer_config_finalize): reduce_bucket_size = h², stage3_prefetch_bucket_size =
# 0.9·h² (ms-swift's GRPOConfig sets it to 0), stage3_param_persistence_threshold = 10·h.
_PRESETS = {
    "zero0": {"stage": 0, "reduce_bucket_size": 2e8, "allgather_bucket_size": 2e8, "overlap_comm": False},
    "zero1": {"stage": 1, "reduce_bucket_size": 2e8, "allgather_bucket_size": 2e8, "overlap_comm": True},
    "zero2": {"stage": 2, "reduce_bucket_size": 2e8, "allgather_bucket_size": 2e8, "overlap_comm": True},
    "zero2_offload": {"stage": 2, "reduce_bucket_size": 2e8, "allgather_bucket_size": 2e8, "overlap_comm": True,
                      "offload_optimizer": True},
    "zero3": {"stage": 3, "overlap_comm": True},
    "zero3_offload": {"stage": 3, "overlap_comm": True, "offload_optimizer": True, "offload_param": True},
}


class EngineConfigError(ValueError):
    """A DeepSpeed or FSDP config the estimate cannot read; the message names the field and what to do."""


@dataclass(frozen=True)
class ZeroConfig:
    """DeepSpeed ZeRO settings that decide memory. Bucket sizes in elements; None means DeepSpeed's 'auto' (sized
    from the hidden size); prefetch None: ms-swift GRPO's 0 (sft callers pass transformers' 'auto')."""

    stage: int
    offload_optimizer: bool = False
    offload_param: bool = False
    reduce_bucket_size: float | None = None
    allgather_bucket_size: float | None = None
    overlap_comm: bool = True
    prefetch_bucket_size: float | None = None
    max_live_parameters: float = 1e9


@dataclass(frozen=True)
class FsdpConfig:
    """FSDP2 (ms-swift's only FSDP): full shard re-gathers each layer for backward (reshard_after_forward), shard_grad_op
    keeps the gathered parameters; offload keeps parameters, gradients and optimizer states in host RAM."""

    reshard_after_forward: bool = True
    offload: bool = False
    activation_checkpointing: bool = True


def _load_json(value: str, field: str) -> dict:
    text = value.strip()
    source = "the inline JSON"
    if not text.startswith("{"):
        source = text
        try:
            text = Path(text).expanduser().read_text()
        except OSError as e:
            raise EngineConfigError(
                f"{field}: cannot read {value!r} here ({e.strerror}); the memory estimate needs its settings: give "
                "a preset name, the JSON inline, or a copy of the file on this machine") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise EngineConfigError(f"{field}: {source} is not valid JSON ({e})") from None
    if not isinstance(data, dict):
        raise EngineConfigError(f"{field}: {source} must be a JSON object")
    return data


def _number(value) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def zero_config(deepspeed: str | None) -> ZeroConfig | None:
    """ZeRO settings of train.deepspeed (None when DeepSpeed is not used; zero0 is DeepSpeed at stage 0)."""
    if not deepspeed or not deepspeed.strip():
        return None
    name = deepspeed.strip()
    if name in _PRESETS:
        return ZeroConfig(**_PRESETS[name])
    zero = _load_json(name, "train.deepspeed").get("zero_optimization", {})
    if not isinstance(zero, dict):
        raise EngineConfigError("train.deepspeed: zero_optimization must be a JSON object")

    def offloaded(key: str) -> bool:
        return str((zero.get(key) or {}).get("device", "none")).lower() not in ("none", "")

    try:
        stage = int(zero.get("stage", 0))
    except (TypeError, ValueError):
        raise EngineConfigError(f"train.deepspeed: zero_optimization.stage {zero.get('stage')!r} is not 0-3") from None
    if stage not in (0, 1, 2, 3):
        raise EngineConfigError(f"train.deepspeed: zero_optimization.stage {stage} is not 0-3")
    return ZeroConfig(stage, offloaded("offload_optimizer"), offloaded("offload_param"),
                      _number(zero.get("reduce_bucket_size")), _number(zero.get("allgather_bucket_size")),
                      bool(zero.get("overlap_comm", stage == 3)), _number(zero.get("stage3_prefetch_bucket_size")),
                      _number(zero.get("stage3_max_live_parameters")) or 1e9)


def fsdp_config(fsdp: str | None) -> FsdpConfig | None:
    """FSDP settings of train.fsdp: the 'fsdp2' preset (swift/config/fsdp2.json: full_shard, activation
    checkpointing), a strategy string ('full_shard auto_wrap offload'), or a JSON file / inline JSON with 'fsdp' and
    'fsdp_config'."""
    if not fsdp or not fsdp.strip():
        return None
    value = fsdp.strip()
    if value == "fsdp2":
        return FsdpConfig()
    if not value.startswith("{") and not value.endswith(".json"):
        words = value.split()
        return FsdpConfig(reshard_after_forward="shard_grad_op" not in words, offload="offload" in words,
                          activation_checkpointing=False)
    data = _load_json(value, "train.fsdp")
    words = str(data.get("fsdp", "full_shard")).split()
    cfg = data.get("fsdp_config") or {}
    return FsdpConfig(reshard_after_forward=bool(cfg.get("reshard_after_forward", "shard_grad_op" not in words)),
                      offload="offload" in words or bool(cfg.get("offload_params")),
                      activation_checkpointing=bool(cfg.get("activation_checkpointing", False)))
