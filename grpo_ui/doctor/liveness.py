"""Is the run alive? How long a healthy run may stay silent, from the time per step it has shown.

Every sign of progress counts as life: any new output, including tqdm's ``\\r`` updates of an unfinished line
(rank 0's Train bar moves once per optimizer step even when ``logging_steps`` prints a metric line only every N
steps), rollout progress, metric lines and checkpoint saves. A healthy run's longest silence is one generation step:
the time per step it has logged, times ``steps_per_generation`` (generation happens on the first step of each batch),
times ``logging_steps`` when no per-step bar is visible. The silence allowed adds a margin that tolerates GRPO's
step-time variance (long completions, resampling, saves) and is never more than 10 minutes.
"""

from __future__ import annotations

import re

from grpo_ui.doctor import pace

STARTUP_S = 1800.0     # the gap assumed before a step is logged: model loading, vLLM start-up, the first rollout
MIN_MARGIN_S = 300.0   # silence tolerated beyond the expected gap, at least …
MAX_MARGIN_S = 600.0   # … and at most (a silent run is flagged within 10 minutes beyond the expected gap)
RECENT = 5             # logged intervals looked at
STEP_BAR = re.compile(r"Train:\s+\d+%\|.*\| \d+/\d+ \[")


def step_seconds(metrics: dict[str, list[tuple[int, float]]]) -> float | None:
    """The longest recent time per optimizer step: each of the last logged intervals (ms-swift's clock, see
    pace.py), and the run's average so far (train_speed); None before a step is logged."""
    per_interval = [i.seconds for i in pace.intervals(pace.clock(metrics)[1])][-RECENT:]
    average = [v for _, v in metrics.get("seconds_per_step", [])[-1:]]
    found = per_interval + average
    return max(found) if found else None


def expected_gap(metrics: dict, logging_steps: int = 1, steps_per_generation: int = 1,
                 step_bar: bool = True) -> float:
    """Seconds a healthy run may go without any sign of progress."""
    step = step_seconds(metrics)
    if step is None:
        return STARTUP_S
    return step * max(steps_per_generation, 1) * (1 if step_bar else max(logging_steps, 1))


def allowed_silence(gap: float) -> float:
    """The expected gap plus a margin of twice the gap, between 5 and 10 minutes."""
    return gap + min(max(2 * gap, MIN_MARGIN_S), MAX_MARGIN_S)


def has_step_bar(lines: list[str]) -> bool:
    """Whether the log shows ms-swift's per-step Train bar (rank 0 with tqdm on)."""
    return any(STEP_BAR.search(line) for line in lines)


TQDM_TIMING = re.compile(r"\s*\[[^\]]*(?:<|it/s|s/it)[^\]]*\]")


def progress_mark(pending: str) -> str:
    """What an unfinished line shows of progress, without tqdm's clock: a bar redrawn only to update its elapsed
    time (tqdm's monitor thread does that while a step is stuck) is no progress."""
    return TQDM_TIMING.sub("", pending).strip()
