"""Reward functions for the captured runs (loaded by ms-swift with --external_plugins): one healthy reward with a
spread, a slow one, and the faulty ones users report (None, NaN, an exception)."""

import math
import os
import time

from swift.rewards import ORM, orms


class LengthSpread(ORM):
    """Healthy: the share of distinct characters, so completions of one prompt get different rewards."""

    def __call__(self, completions, **kwargs):
        return [len(set(c)) / max(len(c), 1) for c in completions]


class SlowLengthSpread(LengthSpread):
    """Healthy but slow, like a remote reward service: sleeps SLOW_REWARD_S seconds per call."""

    def __call__(self, completions, **kwargs):
        time.sleep(float(os.environ.get("SLOW_REWARD_S", "4")))
        return super().__call__(completions, **kwargs)


class SlowingLengthSpread(LengthSpread):
    """A reward service that gets slower on every call: sleeps 0.5 s more each time."""

    calls = 0

    def __call__(self, completions, **kwargs):
        SlowingLengthSpread.calls += 1
        time.sleep(0.5 * SlowingLengthSpread.calls)
        return super().__call__(completions, **kwargs)


class ReturnsNone(ORM):
    """A verifier that gives up on every completion."""

    def __call__(self, completions, **kwargs):
        return [None for _ in completions]


class ReturnsNan(ORM):
    """A score computed as 0/0."""

    def __call__(self, completions, **kwargs):
        return [math.nan for _ in completions]


class ReturnsInf(ORM):
    """A score divided by a zero count (numpy-style: inf, not an error)."""

    def __call__(self, completions, **kwargs):
        return [math.inf for _ in completions]


class Raises(ORM):
    """A verifier that cannot parse its input."""

    def __call__(self, completions, solution, **kwargs):
        return [float(s.split("=")[1]) for s in solution]


orms.update({"length_spread": LengthSpread, "slow_length_spread": SlowLengthSpread,
             "slowing_length_spread": SlowingLengthSpread, "returns_none": ReturnsNone,
             "returns_nan": ReturnsNan, "returns_inf": ReturnsInf, "raises": Raises})
