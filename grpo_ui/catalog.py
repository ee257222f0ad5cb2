"""Model architectures and GPUs the estimator knows, plus import of a Hugging Face config.json."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import yaml

DATA = Path(__file__).parent / "data"


@dataclass(frozen=True)
class Vision:
    """A vision tower: Qwen2.5-VL's windowed ViT with patch merger, or Gemma 3's SigLIP with a projector."""

    kind: str
    depth: int
    hidden_size: int
    intermediate_size: int
    out_hidden_size: int
    patch_size: int = 14
    temporal_patch_size: int = 2
    spatial_merge_size: int = 2
    image_size: int = 896

    def params(self) -> int:
        h, i = self.hidden_size, self.intermediate_size
        if self.kind == "qwen2_5_vl":
            # block: qkv (3h² + 3h) + proj (h² + h) + gated MLP with biases (3hi + 2i + h) + two RMSNorms (2h)
            block = 4 * h * h + 4 * h + 3 * h * i + 2 * i + h + 2 * h
            patch = 3 * self.temporal_patch_size * self.patch_size ** 2 * h
            m = h * self.spatial_merge_size ** 2  # merger: RMSNorm, Linear(m, m), GELU, Linear(m, out)
            return self.depth * block + patch + h + m * m + m + m * self.out_hidden_size + self.out_hidden_size
        # SigLIP: attention with biases (4h² + 4h), GELU MLP with biases (2hi + i + h), two LayerNorms (4h)
        block = 4 * h * h + 4 * h + 2 * h * i + i + h + 4 * h
        patches = (self.image_size // self.patch_size) ** 2
        embed = 3 * self.patch_size ** 2 * h + h + patches * h
        return self.depth * block + embed + 2 * h + h * self.out_hidden_size + h


@dataclass(frozen=True)
class ModelArch:
    """A decoder-only transformer (optionally MoE, optionally with a vision tower)."""

    name: str
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    intermediate_size: int
    vocab_size: int
    tie_word_embeddings: bool = False
    head_dim: int | None = None
    qkv_bias: bool = False
    qk_norm: bool = False
    num_experts: int = 0
    num_experts_per_tok: int = 0
    moe_intermediate_size: int | None = None
    vision: Vision | None = None
    params_b: float | None = None  # published count, for the tests
    active_params_b: float | None = None
    aliases: tuple[str, ...] = field(default_factory=tuple)

    @property
    def hd(self) -> int:
        return self.head_dim or self.hidden_size // self.num_attention_heads

    def attention_params(self) -> int:
        h, q, kv = self.hidden_size, self.num_attention_heads * self.hd, self.num_key_value_heads * self.hd
        bias = (q + 2 * kv) if self.qkv_bias else 0
        norms = 2 * self.hd if self.qk_norm else 0
        return h * q + 2 * h * kv + q * h + bias + norms

    def mlp_params(self, active: bool = False) -> int:
        """Gated MLP (gate, up, down): 3·h·i; MoE: experts × 3·h·i_moe + router h·E."""
        h = self.hidden_size
        if not self.num_experts:
            return 3 * h * self.intermediate_size
        experts = self.num_experts_per_tok if active else self.num_experts
        return experts * 3 * h * self.moe_intermediate_size + h * self.num_experts

    def layer_params(self, active: bool = False) -> int:
        return self.attention_params() + self.mlp_params(active) + 2 * self.hidden_size

    def embedding_params(self) -> int:
        return self.vocab_size * self.hidden_size * (1 if self.tie_word_embeddings else 2)

    def total_params(self, active: bool = False) -> int:
        """All parameters (active=True: those one token uses in an MoE)."""
        vision = self.vision.params() if self.vision else 0
        return (self.num_hidden_layers * self.layer_params(active) + self.embedding_params() + self.hidden_size
                + vision)

    def linear_shapes(self) -> dict[str, tuple[int, int]]:
        """(in, out) of each linear layer type in one decoder layer, named as in HF checkpoints (LoRA targets)."""
        h, q, kv = self.hidden_size, self.num_attention_heads * self.hd, self.num_key_value_heads * self.hd
        inter = self.moe_intermediate_size if self.num_experts else self.intermediate_size
        return {"q_proj": (h, q), "k_proj": (h, kv), "v_proj": (h, kv), "o_proj": (q, h),
                "gate_proj": (h, inter), "up_proj": (h, inter), "down_proj": (inter, h)}

    def kv_bytes_per_token(self, dtype_bytes: int = 2) -> int:
        """KV cache per token: 2 (K and V) × layers × kv_heads × head_dim × bytes."""
        return 2 * self.num_hidden_layers * self.num_key_value_heads * self.hd * dtype_bytes


_ARCH_KEYS = set(ModelArch.__dataclass_fields__) - {"name", "vision", "aliases"}


def _arch(name: str, d: dict) -> ModelArch:
    vision = Vision(**d["vision"]) if d.get("vision") else None
    kw = {k: v for k, v in d.items() if k in _ARCH_KEYS}
    return ModelArch(name=name, vision=vision, aliases=tuple(d.get("aliases", ())), **kw)


@cache
def models() -> dict[str, ModelArch]:
    raw = yaml.safe_load((DATA / "models.yaml").read_text())
    return {name: _arch(name, d) for name, d in raw.items()}


def _norm(name: str) -> str:
    base = name.rstrip("/").split("/")[-1].lower()
    return re.sub(r"-(instruct|chat|base|it|hf)(-\d+)?$", "", base)


def find_model(name: str) -> ModelArch | None:
    """Catalogue entry for a hub id or path (``Qwen/Qwen2.5-7B-Instruct`` → Qwen2.5-7B), or None."""
    if not name:
        return None
    key = _norm(name)
    for arch in models().values():
        if key in {_norm(arch.name), *(_norm(a) for a in arch.aliases)}:
            return arch
    return None


def from_hf_config(source: str | dict | Path, name: str = "imported") -> ModelArch:
    """A ModelArch from a config.json: a dict, pasted JSON text, or a path (file or model directory)."""
    if isinstance(source, dict):
        cfg = source
    else:
        text = str(source)
        if not text.lstrip().startswith("{"):
            p = Path(text).expanduser()
            p = p / "config.json" if p.is_dir() else p
            try:
                text = p.read_text()
            except OSError as e:
                raise ValueError(f"cannot read config.json at {p}: {e.strerror}") from None
        try:
            cfg = json.loads(text)
        except json.JSONDecodeError as e:
            raise ValueError(f"config.json is not valid JSON: {e}") from None
    text_cfg = cfg.get("text_config") or cfg.get("llm_config") or cfg
    missing = [k for k in ("hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size")
               if k not in text_cfg and k not in cfg]
    if missing:
        raise ValueError(f"config.json lacks {', '.join(missing)}; is it a decoder language model?")

    def get(key, default=None):
        return text_cfg.get(key, cfg.get(key, default))

    arch_names = " ".join(cfg.get("architectures", []))
    inter = get("intermediate_size") or 4 * get("hidden_size")
    if "QWenLMHeadModel" in arch_names:  # Qwen1 stores both halves of its gated MLP
        inter //= 2
    experts = get("num_experts") or get("num_local_experts") or get("n_routed_experts") or 0
    vision = _vision_from_cfg(cfg, get("hidden_size"))
    return ModelArch(
        name=name, hidden_size=get("hidden_size"), num_hidden_layers=get("num_hidden_layers"),
        num_attention_heads=get("num_attention_heads"),
        num_key_value_heads=get("num_key_value_heads") or get("num_attention_heads"),
        intermediate_size=inter, vocab_size=get("vocab_size"),
        tie_word_embeddings=bool(cfg.get("tie_word_embeddings", text_cfg.get("tie_word_embeddings", False))),
        head_dim=get("head_dim"), qkv_bias=bool(get("attention_bias", False)) or "Qwen2" in arch_names
        or "QWen" in arch_names, qk_norm="Qwen3" in arch_names,
        num_experts=experts, num_experts_per_tok=get("num_experts_per_tok", 0) or 0,
        moe_intermediate_size=get("moe_intermediate_size") or (inter if experts else None), vision=vision)


def _vision_from_cfg(cfg: dict, text_hidden: int) -> Vision | None:
    v = cfg.get("vision_config")
    if not v:
        return None
    if "siglip" in str(v.get("model_type", "")):
        return Vision("siglip", v["num_hidden_layers"], v["hidden_size"], v["intermediate_size"], text_hidden,
                      patch_size=v.get("patch_size", 14), image_size=v.get("image_size", 896))
    return Vision("qwen2_5_vl", v.get("depth", 32), v.get("hidden_size", 1280), v.get("intermediate_size", 3420),
                  v.get("out_hidden_size", text_hidden), patch_size=v.get("patch_size", 14),
                  temporal_patch_size=v.get("temporal_patch_size", 2),
                  spatial_merge_size=v.get("spatial_merge_size", 2))


def params_from_name(name: str) -> float | None:
    """Billions of parameters read from a name like 'Qwen2.5-32B-Instruct' (the last 'NNB' in it), or None."""
    found = re.findall(r"(\d+(?:\.\d+)?)[bB](?![a-zA-Z])", name or "")
    return float(found[0]) if found else None


def model_params_b(name: str) -> float | None:
    """Parameter count in billions: from the catalogue, else from the name."""
    arch = find_model(name)
    return arch.total_params() / 1e9 if arch else params_from_name(name)


# ---------------------------------------------------------------------------------------------------------------
# GPUs

@dataclass(frozen=True)
class Gpu:
    name: str
    memory_gib: float
    bf16: bool
    flash_attn: bool
    arch: str
    aliases: tuple[str, ...] = ()


@cache
def gpus() -> dict[str, Gpu]:
    raw = yaml.safe_load((DATA / "gpus.yaml").read_text())
    return {n: Gpu(n, d["memory_gib"], d["bf16"], d["flash_attn"], d["arch"], tuple(map(str, d.get("aliases", []))))
            for n, d in raw.items()}


def find_gpu(name: str | None) -> Gpu | None:
    """A catalogue GPU by its name, an alias, or the name nvidia-smi prints; None if unknown."""
    if not name:
        return None
    key = name.strip().lower()
    for g in gpus().values():
        if key == g.name.lower() or key in (a.lower() for a in g.aliases):
            return g
    return None
