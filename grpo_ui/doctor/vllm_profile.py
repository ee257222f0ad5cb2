"""vLLM's own account of its GPU memory as it starts (its memory profile), as each version prints it, and what makes
a profile impossible.

vLLM sizes its KV cache from what it measures while it starts: the weights it loaded, the peak of a trial forward
pass, and what ``gpu_memory_utilization`` × the card leaves. The lines, by version (vLLM's worker and model runner):
``Loading model weights took 8.5107 GB`` (v0 model_runner, up to 0.7), ``Model loading took 6.59 GiB and 7.2
seconds`` (later), ``the current vLLM instance can use total_gpu_memory (79.25GiB) x gpu_memory_utilization (0.15) =
11.89GiB`` then ``model weights take 8.51GiB; non_torch_memory takes 0.26GiB; PyTorch activation peak memory takes
0.94GiB; the rest of the memory reserved for KV Cache is 2.18GiB.`` (worker.py 0.7-0.8), the table of 0.6.5
(``gpu_memory_utilization       0.90``, ``model weights take   14.96GiB``, ``available_kv_cache_memory    53.29GiB``),
v1's ``Available KV cache memory: 8.11 GiB`` and ``Free memory on device (…) on startup. Desired GPU memory
utilization is (0.9, 28.22 GiB). Actual usage is 16.61 GiB for weight, …`` (gpu_worker), and the executor's
``# GPU blocks: 715, # CPU blocks: 1310``.

A profile is impossible when the weights measured 0 GiB (they were not on the GPU when vLLM measured), when nothing
is left for the KV cache, or when the cache got no block at all.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

WEIGHTS = re.compile(r"Loading model weights took (?P<v>[\d.]+) ?GB|Model loading took (?P<v2>[\d.]+) ?Gi?B|"
                     r"model weights take\s+(?P<v3>[\d.]+) ?GiB|Actual usage is (?P<v4>[\d.]+) GiB for weight\b|"
                     r"weights memory: (?P<v5>[\d.]+) ?GiB")
UTILISATION = re.compile(r"gpu_memory_utilization \((?P<v>[\d.]+)\)|gpu_memory_utilization\s+(?P<v2>[\d.]+)\s*$|"
                         r"Desired GPU memory utilization is \((?P<v3>[\d.]+),")
KV_CACHE = re.compile(r"the rest of the memory reserved for KV Cache is (?P<v>-?[\d.]+) ?GiB|"
                      r"available_kv_cache_memory\s+(?P<v2>-?[\d.]+) ?GiB|Available KV cache memory: (?P<v3>-?[\d.]+) ?GiB")
BLOCKS = re.compile(r"# (?:GPU|CUDA|cuda) blocks: (?P<v>\d+)")
EMPTY_WEIGHTS = 0.01  # GiB: no model that vLLM serves weighs less


def _value(m: re.Match) -> float:
    return float(next(v for v in m.groupdict().values() if v is not None))


@dataclass
class Profile:
    """The last memory profile a process printed before a line: each value and the line it came from."""

    weights: float | None = None
    utilisation: float | None = None
    kv_cache: float | None = None
    blocks: int | None = None
    lines: dict[str, int] = field(default_factory=dict)  # value name → its line's index

    def problem(self) -> tuple[str, int] | None:
        """What makes the profile impossible, and the line that shows it; None for a possible one."""
        if self.weights is not None and self.weights < EMPTY_WEIGHTS:
            return f"its weights measured {self.weights:g} GiB", self.lines["weights"]
        if self.kv_cache is not None and self.kv_cache <= 0:
            return f"{self.kv_cache:g} GiB left for the KV cache", self.lines["kv_cache"]
        if self.blocks == 0:
            return "0 GPU blocks for the KV cache", self.lines["blocks"]
        return None

    def said(self) -> str:
        """The profile's numbers in words."""
        parts = []
        if self.utilisation is not None:
            parts.append(f"gpu_memory_utilization {self.utilisation:g} (vLLM's share of the whole card)")
        if self.weights is not None:
            parts.append(f"weights {self.weights:g} GiB")
        if self.kv_cache is not None:
            parts.append(f"KV cache {self.kv_cache:g} GiB")
        return ", ".join(parts)


PATTERNS = {"weights": WEIGHTS, "utilisation": UTILISATION, "kv_cache": KV_CACHE, "blocks": BLOCKS}


def profile(bodies: list[str], indexes: list[int]) -> Profile:
    """The profile the given lines print (their messages, with their indexes in the log)."""
    found = Profile()
    for body, i in zip(bodies, indexes, strict=True):
        if "GiB" not in body and "GB" not in body and "blocks" not in body and "utilization" not in body:
            continue
        for name, rx in PATTERNS.items():
            if m := rx.search(body):
                setattr(found, name, int(_value(m)) if name == "blocks" else _value(m))
                found.lines[name] = i
    return found
