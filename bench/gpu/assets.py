"""What the GPU calibration kit trains on, made on the spot (the GPU machine downloads nothing): a model of a catalogue
architecture (grpo_ui/knowledge/data/models.yaml) with random weights, a small byte-level BPE tokenizer with a ChatML
template, and a dataset of prompts of one length. Needs torch, transformers and tokenizers (the GPU image has them).

A random model's next-token distribution is close to uniform over its vocabulary, so it almost never samples the end
of a sequence: every completion runs to max_completion_length, as with ignore_eos (the measured lengths are recorded
all the same: completions/mean_length, clipped_ratio)."""

from __future__ import annotations

import json
from pathlib import Path

from grpo_ui.knowledge.catalog import ModelArch

CHATML = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
WORDS = "what is the sum of two and three times four minus five plus six divided by seven answer".split()


def tokenizer(directory: Path):
    """A byte-level BPE tokenizer of a few hundred tokens (ids below any model's vocabulary), saved in ``directory``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator([" ".join(WORDS)] * 4 + ["<think>reasoning</think><answer>42</answer>"],
                            trainers.BpeTrainer(vocab_size=300, special_tokens=SPECIALS,
                                                initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                   additional_special_tokens=SPECIALS)
    fast.chat_template = CHATML
    fast.save_pretrained(directory)
    return fast


def qwen2_config(arch: ModelArch, tok) -> dict:
    """config.json of a Qwen2 decoder with the catalogue's dimensions (the catalogue's Qwen2.5 entries)."""
    return {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": arch.hidden_size,
            "intermediate_size": arch.intermediate_size, "num_hidden_layers": arch.num_hidden_layers,
            "num_attention_heads": arch.num_attention_heads, "num_key_value_heads": arch.num_key_value_heads,
            "vocab_size": arch.vocab_size, "tie_word_embeddings": arch.tie_word_embeddings,
            "max_position_embeddings": 32768, "rope_theta": 1000000.0, "rms_norm_eps": 1e-6, "hidden_act": "silu",
            "torch_dtype": "bfloat16", "eos_token_id": tok.eos_token_id, "pad_token_id": tok.pad_token_id,
            "bos_token_id": None, "use_sliding_window": False}


def model(arch: ModelArch, directory: Path) -> Path:
    """A random-initialised model of ``arch`` in ``directory`` (made once; on the GPU when there is one)."""
    if (directory / "config.json").exists():
        return directory
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    directory.mkdir(parents=True, exist_ok=True)
    tok = tokenizer(directory)
    (directory / "config.json").write_text(json.dumps(qwen2_config(arch, tok), indent=2))
    config = AutoConfig.from_pretrained(directory)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(0)
    with torch.device(device):
        net = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    net.save_pretrained(directory)
    del net
    if device == "cuda":
        torch.cuda.empty_cache()
    return directory


def chat_tokens(tok, messages: list[dict]) -> int:
    """Tokens of a prompt with its chat template and the assistant's opening."""
    ids = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    return len(ids["input_ids"] if hasattr(ids, "keys") else ids)


def mean_prompt_tokens(tok, path: Path) -> float:
    """The mean prompt of a messages JSONL dataset in tokens (estimate.prompt_tokens)."""
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return sum(chat_tokens(tok, r["messages"]) for r in rows) / len(rows)


def dataset(path: Path, prompt_words: int, rows: int = 64) -> None:
    """``rows`` single-turn prompts of ``prompt_words`` words, written as ms-swift's messages JSONL."""
    lines = []
    for n in range(rows):
        text = " ".join(WORDS[(n + k) % len(WORDS)] for k in range(prompt_words)) + "?"
        lines.append(json.dumps({"messages": [{"role": "user", "content": text}], "solution": "42"}))
    path.write_text("\n".join(lines) + "\n")
