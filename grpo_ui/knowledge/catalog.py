"""Model architectures and GPUs the estimator knows: hub ids as people spell them (quantised variants included),
GPU names as nvidia-smi prints them, and a Hugging Face config.json read from text, a local path or a node."""

from __future__ import annotations

import difflib
import json
import re
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import yaml

from grpo_ui.core import shell

DATA = Path(__file__).parent / "data"


@dataclass(frozen=True)
class Vision:
    """A vision tower: Qwen2.5-VL's windowed ViT with a patch merger, Qwen3-VL/3.5's ViT (LayerNorm, GELU MLP) with a
    merger, or Gemma 3's SigLIP with a projector. ``patch_size × spatial_merge_size`` pixels square make one LLM
    token."""

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
        m = h * self.spatial_merge_size ** 2  # merger input: spatial_merge² patches concatenated
        merger = m * m + m + m * self.out_hidden_size + self.out_hidden_size
        if self.kind == "qwen2_5_vl":
            # block: qkv (3h² + 3h) + proj (h² + h) + gated MLP with biases (3hi + 2i + h) + two RMSNorms (2h)
            block = 4 * h * h + 4 * h + 3 * h * i + 2 * i + h + 2 * h
            patch = 3 * self.temporal_patch_size * self.patch_size ** 2 * h
            return self.depth * block + patch + h + merger
        # attention with biases (4h² + 4h), GELU MLP with biases (2hi + i + h), two LayerNorms (4h)
        block = 4 * h * h + 4 * h + 2 * h * i + i + h + 4 * h
        if self.kind == "qwen3_vl":  # 3D patch embedding, 48×48 learned positions, merger
            return self.depth * block + 3 * self.temporal_patch_size * self.patch_size ** 2 * h + 2304 * h + merger
        patches = (self.image_size // self.patch_size) ** 2  # SigLIP
        embed = 3 * self.patch_size ** 2 * h + h + patches * h
        return self.depth * block + embed + 2 * h + h * self.out_hidden_size + h

    @property
    def pixels_per_token(self) -> int:
        return (self.patch_size * self.spatial_merge_size) ** 2


@dataclass(frozen=True)
class ModelArch:
    """A decoder-only transformer: dense or MoE (with an optional shared expert), optionally hybrid (Gated DeltaNet
    linear-attention layers between full-attention ones), optionally with a vision tower; ``extra_params_b`` counts
    checkpoint parts outside the decoder and vision tower (an omni model's audio encoder and talker)."""

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
    attn_output_gate: bool = False
    num_experts: int = 0
    num_experts_per_tok: int = 0
    moe_intermediate_size: int | None = None
    shared_expert_intermediate_size: int = 0
    linear_attention_layers: int = 0
    linear_num_key_heads: int = 0
    linear_num_value_heads: int = 0
    linear_key_head_dim: int = 0
    linear_value_head_dim: int = 0
    linear_conv_kernel_dim: int = 4
    vision: Vision | None = None
    extra_params_b: float = 0.0
    params_b: float | None = None  # published count, for the tests
    active_params_b: float | None = None
    aliases: tuple[str, ...] = field(default_factory=tuple)
    hub: tuple[str, ...] = field(default_factory=tuple)  # checkpoints with this architecture (Hub ids)

    @property
    def hd(self) -> int:
        return self.head_dim or self.hidden_size // self.num_attention_heads

    @property
    def full_attention_layers(self) -> int:
        return self.num_hidden_layers - self.linear_attention_layers

    def attention_params(self) -> int:
        """One full-attention layer: q (doubled when an output gate is computed with it), k, v, o, biases, q/k norms."""
        h, q, kv = self.hidden_size, self.num_attention_heads * self.hd, self.num_key_value_heads * self.hd
        bias = (q + 2 * kv) if self.qkv_bias else 0
        norms = 2 * self.hd if self.qk_norm else 0
        return h * q * (2 if self.attn_output_gate else 1) + 2 * h * kv + q * h + bias + norms

    def linear_attention_params(self) -> int:
        """One Gated DeltaNet layer (transformers' Qwen3NextGatedDeltaNet): in_proj_qkvz h → 2·Hk·dk + 2·Hv·dv,
        in_proj_ba h → 2·Hv, a depthwise conv over q, k, v, A_log and dt_bias, a gated RMSNorm, out_proj Hv·dv → h."""
        h, k, v = self.hidden_size, self.linear_num_key_heads * self.linear_key_head_dim, (
            self.linear_num_value_heads * self.linear_value_head_dim)
        conv = (2 * k + v) * self.linear_conv_kernel_dim
        return h * (2 * k + 2 * v) + h * 2 * self.linear_num_value_heads + conv + 2 * self.linear_num_value_heads + (
            self.linear_value_head_dim + v * h)

    def mlp_params(self, active: bool = False) -> int:
        """Gated MLP (gate, up, down): 3·h·i; MoE: experts × 3·h·i_moe + router h·E (+ a shared expert and its gate)."""
        h = self.hidden_size
        if not self.num_experts:
            return 3 * h * self.intermediate_size
        experts = self.num_experts_per_tok if active else self.num_experts
        shared = 3 * h * self.shared_expert_intermediate_size + h if self.shared_expert_intermediate_size else 0
        return experts * 3 * h * self.moe_intermediate_size + h * self.num_experts + shared

    def decoder_params(self, active: bool = False) -> int:
        """All decoder layers (their two norms included)."""
        norms = 2 * self.hidden_size
        return (self.full_attention_layers * (self.attention_params() + self.mlp_params(active) + norms)
                + self.linear_attention_layers * (self.linear_attention_params() + self.mlp_params(active) + norms))

    def layer_params(self, active: bool = False) -> int:
        """The largest single decoder layer."""
        attention = max(self.attention_params(), self.linear_attention_params() if self.linear_attention_layers else 0)
        return attention + self.mlp_params(active) + 2 * self.hidden_size

    def embedding_params(self) -> int:
        return self.vocab_size * self.hidden_size * (1 if self.tie_word_embeddings else 2)

    def total_params(self, active: bool = False) -> int:
        """All parameters (active=True: those one token uses in an MoE)."""
        vision = self.vision.params() if self.vision else 0
        return (self.decoder_params(active) + self.embedding_params() + self.hidden_size + vision
                + int(self.extra_params_b * 1e9))

    def linears(self) -> list[tuple[str, int, int, int]]:
        """(name, in, out, count in the model) of every decoder linear, named as in HF checkpoints (LoRA targets);
        MoE experts' linears count once per expert."""
        h, q, kv = self.hidden_size, self.num_attention_heads * self.hd, self.num_key_value_heads * self.hd
        full, lin = self.full_attention_layers, self.linear_attention_layers
        inter = self.moe_intermediate_size if self.num_experts else self.intermediate_size
        experts = (self.num_experts or 1) * self.num_hidden_layers
        out = [("q_proj", h, q * (2 if self.attn_output_gate else 1), full), ("k_proj", h, kv, full),
               ("v_proj", h, kv, full), ("o_proj", q, h, full),
               ("gate_proj", h, inter, experts), ("up_proj", h, inter, experts), ("down_proj", inter, h, experts)]
        if lin:
            k = self.linear_num_key_heads * self.linear_key_head_dim
            v = self.linear_num_value_heads * self.linear_value_head_dim
            out += [("in_proj_qkvz", h, 2 * k + 2 * v, lin), ("in_proj_ba", h, 2 * self.linear_num_value_heads, lin),
                    ("out_proj", v, h, lin)]
        return out

    def largest_linear(self) -> int:
        return max(fan_in * fan_out for _, fan_in, fan_out, _ in self.linears())

    def kv_bytes_per_token(self, dtype_bytes: int = 2) -> int:
        """KV cache per token: 2 (K and V) × full-attention layers × kv_heads × head_dim × bytes (linear-attention
        layers keep a fixed-size state instead, see linear_state_bytes)."""
        return 2 * self.full_attention_layers * self.num_key_value_heads * self.hd * dtype_bytes

    def linear_state_bytes(self) -> int:
        """The recurrent state one sequence keeps in every linear-attention layer: Hv × dk × dv in fp32, plus the
        convolution's last kernel−1 inputs (transformers' / vLLM's Gated DeltaNet caches)."""
        k = self.linear_num_key_heads * self.linear_key_head_dim
        v = self.linear_num_value_heads * self.linear_value_head_dim
        per_layer = (self.linear_num_value_heads * self.linear_key_head_dim * self.linear_value_head_dim * 4
                     + (2 * k + v) * (self.linear_conv_kernel_dim - 1) * 2)
        return self.linear_attention_layers * per_layer


_ARCH_KEYS = set(ModelArch.__dataclass_fields__) - {"name", "vision", "aliases", "hub"}


def _arch(name: str, d: dict) -> ModelArch:
    vision = Vision(**d["vision"]) if d.get("vision") else None
    kw = {k: v for k, v in d.items() if k in _ARCH_KEYS}
    return ModelArch(name=name, vision=vision, aliases=tuple(d.get("aliases", ())), hub=tuple(d.get("hub", ())),
                     **kw)


@cache
def models() -> dict[str, ModelArch]:
    raw = yaml.safe_load((DATA / "models.yaml").read_text())
    return {name: _arch(name, d) for name, d in raw.items()}


# A quantised checkpoint's suffix → (kind, bytes per packed decoder weight). GPTQ/AWQ 4-bit: 0.5 B + an fp16 scale and
# a 4-bit zero per group of 128; bnb nf4 with double quantisation (ms-swift's and PEFT's default): 0.5 B + an 8-bit
# absmax per 64 (+ fp32 per 256 blocks); 8-bit GPTQ: 1 B + group scales; bnb int8 (LLM.int8): 1 B + row scales.
QUANT_BYTES = {"gptq4": 0.52, "awq4": 0.52, "bnb4": 0.516, "gptq8": 1.02, "bnb8": 1.0625, "fp8": 1.0}
_QUANT_SUFFIX = re.compile(r"[-_.](gptq[-_.]?int4|gptq[-_.]?int8|int4|int8|awq|gptq|fp8|(?:unsloth[-_.])?bnb[-_.]?4bit"
                           r"|bnb[-_.]?8bit|4bit|8bit)$")


def quant_of(name: str) -> str:
    """The quantisation a hub id's name announces ('' for none): Qwen's -Int4/-Int8 are GPTQ, -AWQ, -GPTQ…,
    -bnb-4bit / unsloth-bnb-4bit, -FP8."""
    base = (name or "").rstrip("/").split("/")[-1].lower()
    m = _QUANT_SUFFIX.search(base)
    if not m:
        return ""
    s = m[1].replace("_", "-").replace(".", "-")
    if "awq" in s:
        return "awq4"
    if "fp8" in s:
        return "fp8"
    if "bnb" in s or s in ("4bit", "8bit"):
        return "bnb8" if "8bit" in s else "bnb4"
    return "gptq8" if "int8" in s else "gptq4"


def _norm(name: str) -> str:
    """'Qwen/Qwen-1_8B-Chat-Int4' → 'qwen-1.8b': basename, lower case, no quantisation or chat/instruct suffix."""
    base = name.rstrip("/").split("/")[-1].lower()
    base = _QUANT_SUFFIX.sub("", base)
    base = re.sub(r"(\d)_(\d)", r"\1.\2", base)
    return re.sub(r"-(instruct|chat|base|it|hf)(-\d+)?$", "", base)


@cache
def _model_keys() -> dict[str, ModelArch]:
    return {key: arch for arch in models().values() for key in {_norm(arch.name), *(_norm(a) for a in arch.aliases)}}


def find_model(name: str) -> ModelArch | None:
    """Catalogue entry for a hub id or path (``Qwen/Qwen2.5-7B-Instruct-AWQ`` → Qwen2.5-7B), or None."""
    return _model_keys().get(_norm(name)) if name else None


def hub_models() -> dict[str, ModelArch]:
    """Every checkpoint the catalogue names, as a Hub id (what --model takes) → its architecture."""
    return {hub_id: arch for arch in models().values() for hub_id in arch.hub}


def closest_models(name: str, n: int = 3) -> list[str]:
    keys = _model_keys()
    return [keys[k].name for k in difflib.get_close_matches(_norm(name or ""), list(keys), n=n, cutoff=0.5)]


def _text_config(cfg: dict) -> dict:
    """The language model's part of a config.json: itself, or text_config / llm_config (VL), or thinker_config's
    text_config (omni)."""
    thinker = cfg.get("thinker_config") or {}
    return cfg.get("text_config") or cfg.get("llm_config") or thinker.get("text_config") or cfg


def parse_hf_config(source: str | dict | Path) -> dict:
    """A config.json as a dict: given as a dict, pasted JSON text, or a path (file or model directory). ValueError
    says what is wrong."""
    if isinstance(source, dict):
        return source
    text = str(source)
    if not text.lstrip().startswith("{"):
        p = Path(text)
        try:
            p = p.expanduser()
            p = p / "config.json" if p.is_dir() else p
            text = p.read_text()
        except OSError as e:
            raise ValueError(f"cannot read config.json at {p}: {e.strerror}") from None
        except RuntimeError as e:  # '~name' of a user this host does not know
            raise ValueError(f"cannot read config.json at {p}: {e}") from None
    try:
        cfg = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"config.json is not valid JSON: {e}") from None
    if not isinstance(cfg, dict):
        raise ValueError("config.json must be a JSON object")
    return cfg


def from_hf_config(source: str | dict | Path, name: str = "imported") -> ModelArch:
    """A ModelArch from a config.json (see parse_hf_config for the forms it takes)."""
    cfg = parse_hf_config(source)
    text_cfg = _text_config(cfg)
    missing = [k for k in ("hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size")
               if k not in text_cfg and k not in cfg]
    if missing:
        raise ValueError(f"config.json lacks {', '.join(missing)}; is it a decoder language model?")

    def get(key, default=None):
        return text_cfg.get(key, cfg.get(key, default))

    arch_names = " ".join(cfg.get("architectures", []))
    model_type = str(get("model_type", ""))
    inter = get("intermediate_size") or get("ffn_hidden_size") or 4 * get("hidden_size")
    if "QWenLMHeadModel" in arch_names:  # Qwen1 stores both halves of its gated MLP
        inter //= 2
    experts = get("num_experts") or get("num_local_experts") or get("n_routed_experts") or 0
    hybrid = model_type.startswith(("qwen3_next", "qwen3_5"))
    layers = get("num_hidden_layers")
    types = get("layer_types")
    linear_layers = (sum(t == "linear_attention" for t in types) if types else
                     layers - layers // get("full_attention_interval", 4) if hybrid else 0)
    return ModelArch(
        name=name, hidden_size=get("hidden_size"), num_hidden_layers=layers,
        num_attention_heads=get("num_attention_heads"),
        num_key_value_heads=get("num_key_value_heads") or get("multi_query_group_num") or get("num_attention_heads"),
        intermediate_size=inter, vocab_size=get("vocab_size") or get("padded_vocab_size"),
        tie_word_embeddings=bool(cfg.get("tie_word_embeddings", text_cfg.get("tie_word_embeddings", False))),
        head_dim=get("head_dim") or get("kv_channels"),
        qkv_bias=bool(get("attention_bias", False) or get("add_qkv_bias", False)) or "Qwen2" in arch_names
        or "QWen" in arch_names, qk_norm="Qwen3" in arch_names or model_type.startswith("qwen3"),
        attn_output_gate=hybrid, num_experts=experts, num_experts_per_tok=get("num_experts_per_tok", 0) or 0,
        moe_intermediate_size=get("moe_intermediate_size") or (inter if experts else None),
        shared_expert_intermediate_size=get("shared_expert_intermediate_size", 0) or 0,
        linear_attention_layers=linear_layers, linear_num_key_heads=get("linear_num_key_heads", 0) or 0,
        linear_num_value_heads=get("linear_num_value_heads", 0) or 0,
        linear_key_head_dim=get("linear_key_head_dim", 0) or 0,
        linear_value_head_dim=get("linear_value_head_dim", 0) or 0,
        linear_conv_kernel_dim=get("linear_conv_kernel_dim", 4) or 4,
        vision=_vision_from_cfg(cfg, get("hidden_size")))


def quant_from_hf_config(cfg: dict) -> str:
    """The quantisation a checkpoint's config.json declares (quantization_config), '' for none."""
    q = cfg.get("quantization_config") or _text_config(cfg).get("quantization_config") or {}
    method, bits = str(q.get("quant_method", "")).lower(), q.get("bits") or q.get("w_bit")
    if method in ("gptq", "awq"):
        return f"{method}{bits or 4}"
    if method == "bitsandbytes":
        return "bnb8" if q.get("load_in_8bit") else "bnb4"
    return "fp8" if method in ("fp8", "fbgemm_fp8", "compressed-tensors") else ""


def _vision_from_cfg(cfg: dict, text_hidden: int) -> Vision | None:
    v = cfg.get("vision_config") or (cfg.get("thinker_config") or {}).get("vision_config")
    if not v:
        return None
    if "siglip" in str(v.get("model_type", "")):
        return Vision("siglip", v["num_hidden_layers"], v["hidden_size"], v["intermediate_size"], text_hidden,
                      patch_size=v.get("patch_size", 14), image_size=v.get("image_size", 896))
    kind = "qwen3_vl" if str(v.get("model_type", "")).startswith(("qwen3", "qwen3_5")) else "qwen2_5_vl"
    return Vision(kind, v.get("depth", 32), v.get("hidden_size", 1280), v.get("intermediate_size", 3420),
                  v.get("out_hidden_size", text_hidden), patch_size=v.get("patch_size", 14),
                  temporal_patch_size=v.get("temporal_patch_size", 2),
                  spatial_merge_size=v.get("spatial_merge_size", 2))


def fetch_hf_config(runner, model_path: str, limit: int = 1 << 20) -> dict:
    """config.json of a model directory on a node, read through a Runner (the launch plan's or preflight's); ValueError
    when it is not there or not JSON."""
    res = runner.run(f"head -c {limit} {shell.path(model_path.rstrip('/') + '/config.json')}", timeout=20)
    if res.rc != 0:
        raise ValueError(f"{runner.host}: cannot read {model_path}/config.json: {res.err.strip() or 'no such file'}")
    return parse_hf_config(res.out)


def params_from_name(name: str) -> float | None:
    """Billions of parameters read from a name like 'Qwen2.5-32B-Instruct' (the first 'NNB' in it), or None."""
    found = re.findall(r"(\d+(?:[._]\d+)?)[bB](?![a-zA-Z])", name or "")
    return float(found[0].replace("_", ".")) if found else None


def model_params_b(name: str) -> float | None:
    """Parameter count in billions: from the catalogue, else from the name."""
    arch = find_model(name)
    return arch.total_params() / 1e9 if arch else params_from_name(name)


# ---------------------------------------------------------------------------------------------------------------
# GPUs

@dataclass(frozen=True)
class Gpu:
    """A GPU model: its memory, architecture and, where the catalogue has them, its speed facts (gpus.yaml's header
    says what each figure is; ``speed_source`` the datasheet they come from)."""

    name: str  # as nvidia-smi --query-gpu=name prints it
    memory_gib: float
    arch: str
    aliases: tuple[str, ...] = ()
    tflops_bf16: float | None = None  # dense bf16 Tensor Core TFLOPS (fp16 on Volta/Turing)
    hbm_gbs: float | None = None      # memory bandwidth, GB/s
    nvlink_gbs: float | None = None   # total NVLink bandwidth per GPU (both directions), GB/s; 0 = none
    pcie_gbs: float | None = None     # host link per direction, GB/s
    speed_source: str | None = None

    @property
    def has_speed(self) -> bool:
        """The step-time model's facts are known (peak compute, memory and link bandwidths)."""
        return None not in (self.tflops_bf16, self.hbm_gbs, self.nvlink_gbs, self.pcie_gbs)

    @property
    def bf16(self) -> bool:
        return self.arch not in ("volta", "turing")

    @property
    def flash_attn(self) -> bool:
        return self.bf16  # FlashAttention-2 needs Ampere or later


class UnknownGpu(ValueError):
    """A GPU name the catalogue does not know; ``closest`` lists the nearest catalogue names."""

    def __init__(self, name: str, closest: list[str]):
        self.name, self.closest = name, closest
        hint = f" Closest: {', '.join(closest)}." if closest else ""
        super().__init__(f"unknown GPU {name!r}.{hint} Use the name nvidia-smi prints, or give the memory per GPU "
                         "(the node's gpu_memory_gib, or --gpu-gib).")


@cache
def gpus() -> dict[str, Gpu]:
    raw = yaml.safe_load((DATA / "gpus.yaml").read_text())
    return {n: Gpu(n, round(d["memory_mib"] / 1024, 2), d["arch"], tuple(map(str, d.get("aliases", []))),
                   *(d.get(k) for k in _SPEED_KEYS)) for n, d in raw.items()}


_SPEED_KEYS = ("tflops_bf16", "hbm_gbs", "nvlink_gbs", "pcie_gbs", "speed_source")


def _gpu_key(name: str, loose: bool = False) -> str:
    """Case, spaces and punctuation do not matter; loose also drops the vendor words nvidia-smi adds."""
    key = re.sub(r"[^a-z0-9]", "", name.lower())
    return re.sub(r"nvidia|geforce|tesla", "", key) if loose else key


@cache
def _gpu_keys() -> tuple[dict[str, Gpu], dict[str, Gpu]]:
    exact, loose = {}, {}
    for g in gpus().values():
        for n in (g.name, *g.aliases):
            exact.setdefault(_gpu_key(n), g)
            loose.setdefault(_gpu_key(n, loose=True), g)
    return exact, loose


def find_gpu(name: str | None) -> Gpu | None:
    """A catalogue GPU by the name nvidia-smi prints or an alias (case and spacing do not matter); None if unknown."""
    if not name or not name.strip():
        return None
    exact, loose = _gpu_keys()
    return exact.get(_gpu_key(name)) or loose.get(_gpu_key(name, loose=True))


def resolve_gpu(name: str) -> Gpu:
    """find_gpu, or UnknownGpu naming the closest catalogue GPUs."""
    gpu = find_gpu(name)
    if gpu:
        return gpu
    _, loose = _gpu_keys()
    near = difflib.get_close_matches(_gpu_key(name, loose=True), list(loose), n=3, cutoff=0.5)
    raise UnknownGpu(name, list(dict.fromkeys(loose[k].name for k in near)))
