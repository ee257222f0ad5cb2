"""The tiny local GRPO job that the real-software tests run: a random Qwen2-architecture model, a byte-level BPE
tokenizer with a ChatML template, and a small dataset — built here, since nothing can be downloaded.

Run with the ms-swift venv's python: `python tests/tiny_job.py build DIR` (idempotent). Importable without torch.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

SWIFT_VENV = Path(os.environ.get("GRPO_UI_SWIFT_VENV", Path.home() / ".cache/grpo-ui/swift-venv"))
ASSETS = Path(os.environ.get("GRPO_UI_ASSETS", Path.home() / ".cache/grpo-ui/tiny-assets"))
CHATML = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
QUESTIONS = [("What is 2 + 3?", "5"), ("What is 7 - 4?", "3"), ("What is 6 * 2?", "12"), ("What is 9 / 3?", "3"),
             ("What is 10 + 5?", "15"), ("What is 8 - 8?", "0"), ("What is 4 * 4?", "16"), ("What is 1 + 1?", "2")]
# Environment the tiny job needs on a machine without GPUs or network.
CPU_ENV = {"ACCELERATE_USE_CPU": "true", "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
           "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "1"}


def swift_python() -> Path:
    return SWIFT_VENV / "bin" / "python"


def paths(root: Path = ASSETS) -> dict[str, Path]:
    return {"model": root / "model", "dataset": root / "data.jsonl"}


def tiny_spec_data(root: Path = ASSETS, max_steps: int = 3) -> dict:
    """JobSpec fields (as a dict) of the tiny CPU job: LoRA, float32, no vLLM, format reward."""
    p = paths(root)
    return {"name": "tiny-grpo", "train": {
        "model": str(p["model"]), "model_type": "qwen2", "template": "qwen", "dataset": [str(p["dataset"])],
        "reward_funcs": ["format"], "num_generations": 2, "per_device_train_batch_size": 2, "max_steps": max_steps,
        "max_completion_length": 16, "tuner_type": "lora", "lora_rank": 4, "torch_dtype": "float32",
        "logging_steps": 1, "save_steps": 100, "dataloader_num_workers": 0, "report_to": ["none"],
        "ddp_backend": "gloo"},
        "rollout": {"use_vllm": False, "vllm_mode": None}, "env": dict(CPU_ENV),
        "cluster": {"nodes": [{"host": "localhost", "gpus": [0], "python_env": str(SWIFT_VENV)}]}}


def build(root: Path = ASSETS) -> dict[str, Path]:
    """Create the model, tokenizer and dataset under root (skipped when already there)."""
    p = paths(root)
    if (p["model"] / "config.json").exists() and p["dataset"].exists():
        return p
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    root.mkdir(parents=True, exist_ok=True)
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    corpus = [q + " " + a for q, a in QUESTIONS] + ["<think>reasoning</think><answer>42</answer>",
                                                    "system user assistant You are a helpful assistant."]
    tok.train_from_iterator(corpus, trainers.BpeTrainer(vocab_size=400, special_tokens=specials,
                                                        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                   additional_special_tokens=specials)
    fast.chat_template = CHATML
    torch.manual_seed(0)
    config = Qwen2Config(vocab_size=len(fast), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                         tie_word_embeddings=True, eos_token_id=fast.eos_token_id, pad_token_id=fast.pad_token_id,
                         bos_token_id=None)
    model = Qwen2ForCausalLM(config)
    model.save_pretrained(p["model"])
    fast.save_pretrained(p["model"])
    rows = [{"messages": [{"role": "user", "content": q}], "solution": a} for q, a in QUESTIONS * 4]
    p["dataset"].write_text("".join(json.dumps(r) + "\n" for r in rows))
    return p


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] != "build":
        sys.exit("usage: python tests/tiny_job.py build DIR")
    for name, path in build(Path(sys.argv[2])).items():
        print(f"{name}: {path}")
