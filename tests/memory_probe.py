"""Measures, on the CPU and with the real libraries (transformers' decoder layers, PEFT's LoRA, TRL's
selective_log_softmax, accelerate's native-AMP output conversion), what a training micro-step keeps in memory.

Run by tests/test_memory_physics.py in the ms-swift venv: ``python memory_probe.py '<json list of cases>'`` prints one
JSON result per case. A case names a tiny model (dims), how it trains (full or LoRA, adapters' dtype, dropout,
autocast, fp32 weights) and what to measure:

- ``saved``: bytes autograd keeps for backward per token and per decoder layer (the graph's saved tensors after a
  forward, parameters and autocast's weight copies excluded, storages counted once; two depths differenced);
- ``logits``: the peak bytes per logit of the GRPO log-prob path (slice, temperature in place or as a copy, TRL's
  selective_log_softmax, a policy-gradient loss, backward), the logits in bf16 or converted to fp32;
- ``recompute``: with gradient checkpointing and a small vocabulary, the step's peak above the checkpointed layer
  inputs and the gradients, in units of one layer's saved bytes;
- ``cross_entropy``: the peak bytes per logit of an SFT step's causal-LM loss, computed by the model from its labels
  (``head`` transformers: transformers 5's loss function) or by the lines transformers < 4.45 heads ran on the 16-bit
  logits (``head`` upcast).

CPU kernels are not CUDA's: dropout keeps a mask in the input's dtype here (CUDA's fused kernel: one byte), which the
test accounts for; everything else compared is the same Python code on either device.
"""

from __future__ import annotations

import json
import sys
import weakref

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten


class LiveBytes(TorchDispatchMode):
    """Bytes of tensor storages created inside the mode and still alive, and their peak."""

    def __init__(self, existing=()):
        super().__init__()
        self.skip = {t.untyped_storage().data_ptr() for t in existing}
        self.live: dict[int, int] = {}
        self.now = self.peak = 0

    def _free(self, key: int, size: int) -> None:
        if self.live.get(key) == size:
            del self.live[key]
            self.now -= size

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor):
                storage = t.untyped_storage()
                key, size = storage.data_ptr(), storage.nbytes()
                if size and key not in self.live and key not in self.skip:
                    self.live[key] = size
                    self.now += size
                    self.peak = max(self.peak, self.now)
                    weakref.finalize(storage, self._free, key, size)
        return out


def build(case: dict, layers: int):
    from transformers import AutoConfig, AutoModelForCausalLM

    dims = {k: case[k] for k in ("hidden_size", "num_attention_heads", "num_key_value_heads", "head_dim",
                                 "intermediate_size", "vocab_size")}
    config = AutoConfig.for_model(case["model_type"], num_hidden_layers=layers, tie_word_embeddings=False,
                                  attn_implementation="sdpa", **dims)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config).to(torch.float32 if case.get("fp32") else torch.bfloat16)
    if case.get("lora"):
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(model, LoraConfig(r=8, lora_alpha=16, lora_dropout=case.get("dropout", 0.0),
                                                 target_modules="all-linear"))
        if case.get("bf16_adapters"):
            for p in model.parameters():
                if p.requires_grad:
                    p.data = p.data.to(torch.bfloat16)
    if case.get("ckpt"):
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": True})
        model.enable_input_require_grads()
    return model.train()


def autocast(case: dict):
    return torch.autocast("cpu", dtype=torch.bfloat16, enabled=bool(case.get("autocast")))


def saved_bytes(case: dict, layers: int) -> int:
    """Bytes of the non-parameter tensors the graph saves after one forward."""
    model = build(case, layers)
    ids = torch.randint(0, case["vocab_size"], (case["batch"], case["tokens"]))
    with autocast(case):
        out = model(input_ids=ids, use_cache=False, logits_to_keep=1).logits
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    seen: dict[int, int] = {}
    stack, visited = [out.grad_fn], set()
    while stack:
        fn = stack.pop()
        if fn is None or fn in visited:
            continue
        visited.add(fn)
        for name in dir(fn):
            if not name.startswith("_saved_") or name.startswith("_saved_mat2"):  # mat2: autocast's weight casts
                continue
            value = getattr(fn, name)
            for t in value if isinstance(value, (list, tuple)) else [value]:
                if isinstance(t, torch.Tensor):
                    storage = t.untyped_storage()
                    if storage.data_ptr() not in params:
                        seen[storage.data_ptr()] = storage.nbytes()
        stack.extend(f for f, _ in fn.next_functions)
    return sum(seen.values())


def step_peak(case: dict) -> tuple[int, int]:
    """(peak live bytes of one GRPO micro-step, bytes of the gradients it leaves)."""
    from accelerate.utils import convert_outputs_to_fp32
    from trl.trainer.utils import selective_log_softmax

    model = build(case, case["layers"])
    forward = convert_outputs_to_fp32(model.forward) if case.get("amp_fp32_outputs") else model.forward
    prompt, completion = case["prompt"], case["completion"]
    ids = torch.randint(0, case["vocab_size"], (case["batch"], prompt + completion))
    track = LiveBytes(list(model.parameters()) + list(model.buffers()))
    with track:
        with autocast(case):
            logits = forward(input_ids=ids, logits_to_keep=completion + 1, use_cache=False).logits[:, :-1, :]
            if case.get("inplace"):
                logits.div_(0.7)
            else:
                logits = logits / 0.7
            loss = -(selective_log_softmax(logits, ids[:, -completion:]) * torch.randn(case["batch"], 1)).mean()
        del logits
        loss.backward()
    grads = sum(p.grad.untyped_storage().nbytes() for p in model.parameters() if p.grad is not None)
    return track.peak, grads


def cross_entropy_peak(case: dict) -> int:
    """Peak live bytes of one SFT step's loss and backward. ``head`` transformers: the model's own loss from the
    labels; upcast: what transformers < 4.45 causal-LM heads did (logits.float(), a shifted contiguous copy,
    CrossEntropyLoss). The outputs are dropped before backward, as HF Trainer's compute_loss returns only the loss."""
    model = build(case, case["layers"])
    ids = torch.randint(0, case["vocab_size"], (case["batch"], case["tokens"]))
    track = LiveBytes(list(model.parameters()) + list(model.buffers()))
    with track, autocast(case):
        if case["head"] == "transformers":
            loss = model(input_ids=ids, labels=ids, use_cache=False).loss
        else:
            logits = model(input_ids=ids, use_cache=False).logits.float()
            shifted = logits[..., :-1, :].contiguous()
            loss = torch.nn.functional.cross_entropy(shifted.view(-1, shifted.size(-1)), ids[..., 1:].reshape(-1))
            del logits, shifted
        loss.backward()
    return track.peak


def measure(case: dict) -> dict:
    if case["measure"] == "cross_entropy":
        return {"bytes_per_logit": cross_entropy_peak(case) / (case["batch"] * case["tokens"] * case["vocab_size"])}
    if case["measure"] == "saved":
        per_layer = saved_bytes(case, 2) - saved_bytes(case, 1)
        return {"bytes_per_token_layer": per_layer / (case["batch"] * case["tokens"])}
    peak, grads = step_peak(case)
    if case["measure"] == "logits":
        return {"bytes_per_logit": peak / (case["batch"] * case["completion"] * case["vocab_size"])}
    return {"peak": peak, "grads": grads}


if __name__ == "__main__":
    print(json.dumps([measure(case) for case in json.loads(sys.argv[1])]))
