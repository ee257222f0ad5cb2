"""The estimator's dynamic-memory physics against what PyTorch really keeps: tests/memory_probe.py runs transformers'
decoder layers, PEFT's LoRA, TRL's selective_log_softmax, accelerate's native-AMP wrapper and the causal-LM cross
entropy on the CPU (in the ms-swift venv, where they are installed) and measures the saved tensors and step peaks
that grpo_ui.memory.estimate models (layer_activation_bytes, logits, CKPT_RECOMPUTE). No GPU exists here; the measured code is the code that runs on one,
and the one CPU/CUDA difference that matters (the dropout mask's dtype) is accounted for below."""

import json
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from grpo_ui.knowledge.catalog import ModelArch
from grpo_ui.memory.dynamic import CKPT_RECOMPUTE, layer_activation_bytes, logits
from grpo_ui.memory.inputs import inputs_from_spec
from grpo_ui.spec.model import JobSpec
from grpo_ui.spec.paths import with_changes

PROBE = Path(__file__).parent / "memory_probe.py"
QWEN3 = {"model_type": "qwen3", "hidden_size": 256, "num_attention_heads": 8, "num_key_value_heads": 2,
         "head_dim": 32, "intermediate_size": 768, "vocab_size": 4096}
QWEN2 = {**QWEN3, "model_type": "qwen2", "head_dim": 32}
TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
FAN_IN = 6 * 256 + 768  # q, k, v, gate, up read h; o reads q (8 heads × 32 = h); down reads i

SAVED = [  # (name, model, how it trains, CPU dropout-mask bytes beyond CUDA's 1 per element and adapted input)
    ("full bf16", QWEN3, {}, 0),
    ("full fp32 weights under autocast", QWEN3, {"fp32": True, "autocast": True}, 0),
    ("LoRA fp32 adapters under autocast", QWEN3, {"lora": True, "autocast": True}, 0),
    ("LoRA fp32 adapters, dropout", QWEN3, {"lora": True, "autocast": True, "dropout": 0.05}, 4 - 1),
    ("LoRA bf16 adapters (DeepSpeed)", QWEN3, {"lora": True, "bf16_adapters": True}, 0),
    ("LoRA bf16 adapters, dropout", QWEN3, {"lora": True, "bf16_adapters": True, "dropout": 0.05}, 2 - 1),
    ("full bf16, no q/k norm", QWEN2, {}, 0),
    ("LoRA, no q/k norm", QWEN2, {"lora": True, "autocast": True}, 0),
]
LOGITS = [  # (name, how the logits reach the loss, the estimator's flags)
    ("bf16 logits, temperature as a copy (DeepSpeed, ms-swift < 4.2)", {}, {"zero": True, "logits_inplace": False}),
    ("bf16 logits, in-place temperature (DeepSpeed, ms-swift >= 4.2)", {"inplace": True},
     {"zero": True, "logits_inplace": True}),
    ("fp32 logits from native AMP, copy", {"amp_fp32_outputs": True}, {"logits_inplace": False}),
    ("fp32 logits from native AMP, in place", {"amp_fp32_outputs": True, "inplace": True}, {"logits_inplace": True}),
]
CROSS_ENTROPY = ["transformers", "upcast"]  # SFT: transformers 5's loss function; the head's upcast (< 4.45)


@pytest.fixture(scope="module")
def measured(swift_python):
    cases = [{**model, **how, "measure": "saved", "batch": 2, "tokens": 64} for _, model, how, _ in SAVED]
    cases += [{**QWEN3, "hidden_size": 64, "num_attention_heads": 2, "num_key_value_heads": 1, "intermediate_size": 128,
               "vocab_size": 32000, "layers": 1, "batch": 2, "prompt": 8, "completion": 128, "measure": "logits", **how}
              for _, how, _ in LOGITS]
    cases += [{**QWEN3, "vocab_size": 512, "layers": 8, "batch": 2, "prompt": 16, "completion": 240, "ckpt": True,
               "measure": "recompute", **how} for how in ({}, {"lora": True, "autocast": True})]
    cases += [{**QWEN3, "hidden_size": 64, "num_attention_heads": 2, "num_key_value_heads": 1, "intermediate_size": 128,
               "vocab_size": 32000, "layers": 1, "batch": 2, "tokens": 128, "measure": "cross_entropy", "head": head,
               "autocast": True} for head in CROSS_ENTROPY]
    out = subprocess.run([str(swift_python), str(PROBE), json.dumps(cases)], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def tiny_inputs(model: dict, how: dict, tokens: int = 64):
    arch = ModelArch(name="tiny", hidden_size=model["hidden_size"], num_hidden_layers=how.get("layers", 2),
                     num_attention_heads=model["num_attention_heads"], num_key_value_heads=model["num_key_value_heads"],
                     head_dim=model["head_dim"], intermediate_size=model["intermediate_size"],
                     vocab_size=model["vocab_size"], qk_norm=model["model_type"] == "qwen3",
                     qkv_bias=model["model_type"] == "qwen2")
    base = inputs_from_spec(with_changes(JobSpec(), {"train.model": "Qwen/Qwen3-8B", "train.dataset": ["d"],
                                                     "train.reward_funcs": ["accuracy"]}))
    return replace(base, arch=arch, full=not how.get("lora"), compute_bytes=4.0 if how.get("fp32") else 2.0,
                   lora_rank=8, lora_targets=TARGETS, lora_dropout=how.get("dropout", 0.0), attn="sdpa",
                   lora_bf16=bool(how.get("bf16_adapters")), micro_batch=1, prompt_len=0, completion_len=tokens)


@pytest.mark.parametrize("index", range(len(SAVED)), ids=[name for name, *_ in SAVED])
def test_layer_activations_are_what_autograd_saves(measured, index):
    """Every saved tensor of a decoder layer, within 2 % (the norms' fp32 statistics and RoPE tables are left out)."""
    _, model, how, cpu_mask_extra = SAVED[index]
    expected = layer_activation_bytes(tiny_inputs(model, how)) + (FAN_IN * cpu_mask_extra if how.get("dropout") else 0)
    assert measured[index]["bytes_per_token_layer"] == pytest.approx(expected, rel=0.02)


@pytest.mark.parametrize("index", range(len(LOGITS)), ids=[name for name, *_ in LOGITS])
def test_grpo_logits_peak_per_logit(measured, index):
    _, _, flags = LOGITS[index]
    got = measured[len(SAVED) + index]["bytes_per_logit"]
    model = {**QWEN3, "hidden_size": 64, "num_attention_heads": 2, "num_key_value_heads": 1,
             "intermediate_size": 128, "vocab_size": 32000}
    i = tiny_inputs(model, {"lora": True}, tokens=128)
    engine = inputs_from_spec(with_changes(JobSpec(), {"train.model": "Qwen/Qwen3-8B", "train.dataset": ["d"],
                                                       "train.reward_funcs": ["accuracy"], "train.deepspeed": "zero2"}))
    i = replace(i, zero=engine.zero if flags.get("zero") else None, logits_inplace=flags["logits_inplace"])
    per_logit = logits(i) / (i.completion_len + 1) / i.arch.vocab_size
    assert got == pytest.approx(per_logit, rel=0.05)


@pytest.mark.parametrize("which", [0, 1], ids=["full tuning", "LoRA"])
def test_the_recomputed_layer_peaks_near_ckpt_recompute_layers(measured, which):
    """Gradient checkpointing: the step's peak above the checkpointed inputs and the gradients is the recomputed
    layer's saved bytes and its backward's temporaries: 1.15 × the layer for full tuning (it peaks last, beside all
    the gradients), 1.4 × for LoRA under autocast (it peaks first, beside all the inputs)."""
    got = measured[len(SAVED) + len(LOGITS) + which]
    how = {"layers": 8} if which == 0 else {"layers": 8, "lora": True}
    i = tiny_inputs({**QWEN3, "vocab_size": 512}, how, tokens=256)
    tokens = 2 * 256
    inputs = (8 * 256 * 2 * tokens) if which == 1 else 0  # full tuning peaks last, with the inputs mostly freed
    ratio = (got["peak"] - got["grads"] - inputs) / (layer_activation_bytes(i) * tokens)
    assert ratio == pytest.approx(CKPT_RECOMPUTE, rel=0.15)


@pytest.mark.parametrize("index", range(len(CROSS_ENTROPY)), ids=CROSS_ENTROPY)
def test_sft_cross_entropy_peaks_at_twelve_bytes_per_logit(measured, index):
    """Whether the loss function upcasts the 16-bit logits (transformers 5) or the head did (transformers < 4.45), the
    step peaks at three fp32 tensors of the logits' size: the returned logits are gone before the backward."""
    got = measured[len(SAVED) + len(LOGITS) + 2 + index]["bytes_per_logit"]
    model = {**QWEN3, "hidden_size": 64, "num_attention_heads": 2, "num_key_value_heads": 1,
             "intermediate_size": 128, "vocab_size": 32000}
    i = replace(tiny_inputs(model, {}, tokens=128), loss="ce")
    assert got == pytest.approx(logits(i) / i.completion_len / i.arch.vocab_size, rel=0.03)
