"""The mean completion length a run is assumed to have when the user gives none (estimate.completion_tokens unset):
a prior that depends on max_completion_length, from the lengths published GRPO and R1-style runs report.

Short caps fill, long caps do not. Under a cap of a few hundred tokens completions run into it (format and
short-answer tasks), so the mean is a share of the cap; raise the cap to 8K, 16K or 28K and runs from base or instruct
checkpoints on math still average from a few hundred to a few thousand tokens (SimpleRL-Zoo's eight base models at an
8K cap: 0.7K to 4K over their runs; DeepSeek-V3-671B on verl at a 9.6K cap: 1,960). So the prior saturates:

    mean(cap) = TYPICAL_TOKENS · (1 − exp(−FILL · cap / TYPICAL_TOKENS))

which is FILL · cap for small caps and levels off toward TYPICAL_TOKENS for long ones. FILL and TYPICAL_TOKENS are
the pair with the least mean |ln(prior ÷ published mean)| (bench/time_calibration.length_prior; a test keeps them
equal) over two sets of published means, neither of them a held-out or fresh row of the step-time data:
- the fit rows of tests/data/time_measurements.jsonl that give a mean below their cap (Unsloth's notebooks, NeMo RL's
  'G-Average Seq len', Megatron-SWIFT's logged completions/mean_length);
- tests/data/completion_lengths.jsonl: response lengths other GRPO-style runs publish with their cap (ms-swift's GRPO
  best practices, verl's quick start and DeepSeek-671B benchmark, the response-length curves of SimpleRL-Zoo's
  README), each with its page and sentence.
The published means scatter about a factor of 3 around the prior either way (a reasoning model fills a 4K cap, a
short-answer task uses a tenth of it), which is why the prediction's range is wider when the length is assumed
(timing.report.RANGE_ASSUMED).
"""

from __future__ import annotations

import math

FILL = 0.36             # the mean as a share of a short cap
TYPICAL_TOKENS = 1850   # what the mean levels off to, however long the cap


def assumed_mean(cap: int, fill: float | None = None, typical: float | None = None) -> float:
    """The prior's mean completion for max_completion_length ``cap`` (``fill`` / ``typical`` stand for the module's
    constants, for fitting them)."""
    fill, typical = fill or FILL, typical or TYPICAL_TOKENS
    return typical * (1 - math.exp(-fill * cap / typical))


def assumption(mean: float, cap: int) -> str:
    """The assumption in words, with the field that replaces it."""
    return (f"completions average {mean:.0f} tokens of max_completion_length {cap}, a guess: published GRPO runs "
            f"average about {FILL:.0%} of a short cap and level off near {TYPICAL_TOKENS:,} tokens however long it is, "
            "often a factor of 3 either way, and the longest at the cap (set estimate.completion_tokens to a similar run's "
            "completions/mean_length)")
