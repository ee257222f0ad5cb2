"""A run's measured pace: seconds per optimizer step (the first step apart), the ETA from recent steps, the share of
each rollout cycle vLLM spends awake, and whether completions reach their cap. Pure functions over what ms-swift
and vLLM log.

ms-swift logs, with every metric line, ``train_speed(s/it)``: the seconds since training began divided by the steps
done since (swift/trainers/patcher.py, ``add_train_message``; ms-swift 3.x: trainers/callback.py; megatron rlhf 4.x
from its last rank: swift/megatron/callbacks/print.py, the same arithmetic), six decimals. It
is a cumulative average (the slow first step stays in it), but multiplied back by those steps it gives ms-swift's
own clock at each logged step to the microsecond (``elapsed_time`` shows whole seconds only), however late the
watcher read the line. Two such clocks over the steps between them give the wall time per step of that interval.

ms-swift's finer timers (``profiling/Time taken: GRPOTrainer.generate`` …, rlhf_trainers/utils.py
``profiling_context``) go to wandb and swanlab only, never to logging.jsonl or stdout. The rollout's share is read
from vLLM's executor lines instead (colocate mode with sleep_level > 0): ``It took %.6f seconds to wake up tags
[…]`` when a rollout begins and ``It took %.6f seconds to fall asleep.`` when it ends, each with vLLM's
``MM-DD HH:MM:SS`` prefix.
"""

from __future__ import annotations

import math
import re
import statistics
from dataclasses import asdict, dataclass, replace
from datetime import datetime

Series = list[tuple[int, float]]

RECENT_ROUNDS = 10      # the ETA's pace: the last logged steps covering this many rollout rounds (or all there are)
RECENT_CYCLES = 10      # the rollout share: over this many of the last sleep/wake cycles
MOSTLY_CAPPED = 0.5     # clipped_ratio from which most completions are said to hit the cap
VLLM_SLEEP = re.compile(r"(\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)(?:\.\d+)? \[[^\]]*\] It took ([\d.]+) seconds to "
                        r"(fall asleep|wake up)")
SLEEP_MARK = "seconds to "  # a substring of every line VLLM_SLEEP matches (to select log lines cheaply)


@dataclass(frozen=True)
class Interval:
    """Between two logged steps: the later step, the optimizer steps between them, wall seconds per step."""

    step: int
    steps: int
    seconds: float


@dataclass(frozen=True)
class Rollout:
    """vLLM awake (woken for a rollout, weights synced, generating, falling asleep) vs each whole cycle."""

    share: float          # awake seconds / cycle seconds, over the recent cycles
    awake_s: float        # median seconds awake per cycle
    cycle_s: float        # median seconds from one wake-up to the next
    cycles: int           # complete cycles seen


@dataclass(frozen=True)
class Completions:
    mean_length: float         # completions/mean_length at the last logged step (tokens)
    cap: int | None            # max_completion_length
    clipped_ratio: float | None  # share of completions cut at the cap at the last logged step


@dataclass(frozen=True)
class Pace:
    """What a run's log says of its speed so far (``pace``); None where the log does not tell (yet)."""

    start_step: int               # the step training (re)started from (0, or the checkpoint a resumed run loaded)
    first_step: int | None        # the first logged step
    warmup_s: float | None        # seconds per step up to the first logged step (first rollout, compilation)
    intervals: list[Interval]     # every logged interval after it
    step: int | None              # the last logged step
    total: int | None             # max_steps as ms-swift logs it
    train_s: float | None         # ms-swift's clock at the last logged step: training so far, warm-up included
    recent_s: float | None        # seconds per step over the last RECENT_ROUNDS rollout rounds
    median_s: float | None        # median seconds per step of the rollout rounds after the first logged step
    eta_s: float | None           # the steps left × recent_s
    rollout: Rollout | None
    completions: Completions | None

    def to_dict(self) -> dict:
        """As plain values, the intervals as their count ('logged_intervals')."""
        out = asdict(replace(self, intervals=[]))
        del out["intervals"]
        return {**out, "logged_intervals": len(self.intervals)}


def _finite(x: float) -> bool:
    return x is not None and math.isfinite(x) and x > 0


def start_step(first_step: int, seconds_per_step: float, elapsed_s: float | None) -> int:
    """The step training began at: 0 when the first logged clock fits ms-swift's elapsed_time (whole seconds), else
    a resumed run's checkpoint step, from elapsed_time / train_speed."""
    if elapsed_s is None or abs(seconds_per_step * first_step - elapsed_s) <= 1.0 + 0.1 * elapsed_s:
        return 0
    return first_step - max(1, round(elapsed_s / seconds_per_step))


def clock(metrics: dict[str, Series]) -> tuple[int, Series]:
    """(start step, [(logged step, seconds since training began)]) from train_speed(s/it) (``seconds_per_step``);
    from elapsed_time (whole seconds) where a log gives no running average (megatron rlhf 3.x's Megatron-LM line,
    whose per-iteration time covers only the iterations since the previous line)."""
    speed = [(s, v) for s, v in metrics.get("seconds_per_step", []) if _finite(v)]
    if not speed:
        return 0, [(s, v) for s, v in metrics.get("elapsed_time_s", []) if _finite(v)]
    elapsed = dict(metrics.get("elapsed_time_s", []))
    first, v = speed[0]
    start = start_step(first, v, elapsed.get(first))
    return start, [(s, v * (s - start)) for s, v in speed if s > start]


def intervals(points: Series) -> list[Interval]:
    """Wall seconds per step between consecutive logged steps."""
    return [Interval(s2, s2 - s1, (t2 - t1) / (s2 - s1)) for (s1, t1), (s2, t2) in zip(points, points[1:],
                                                                                       strict=False) if s2 > s1]


def rounds(found: list[Interval], steps_per_round: int) -> list[float]:
    """Seconds per step of each rollout round: consecutive intervals joined until they cover ``steps_per_round``
    steps (with steps_per_generation > 1 a step that generates is slower than the ones it feeds); a last, partial
    round counts only when there is no whole one."""
    out, steps, seconds = [], 0, 0.0
    for i in found:
        steps, seconds = steps + i.steps, seconds + i.seconds * i.steps
        if steps >= steps_per_round:
            out.append(seconds / steps)
            steps, seconds = 0, 0.0
    return out or ([seconds / steps] if steps else [])


def recent_pace(points: Series, steps_per_round: int) -> float | None:
    """Seconds per step from the last logged step back to the latest one at least RECENT_ROUNDS rounds earlier (or
    to the first logged step)."""
    if len(points) < 2:
        return None
    last_step, last_t = points[-1]
    back = next(((s, t) for s, t in reversed(points[:-1]) if last_step - s >= RECENT_ROUNDS * steps_per_round),
                points[0])
    return (last_t - back[1]) / (last_step - back[0])


def vllm_rollouts(lines: list[str]) -> Rollout | None:
    """Rollout cycles from vLLM's sleep/wake lines (every rank's, in log order): a cycle starts when vLLM first wakes
    after sleeping (the wake-up's own duration before its line) and is awake until the last rank has fallen asleep;
    None before one whole cycle."""
    awake, cycle = [], []
    began = asleep = None
    for line in lines:
        m = VLLM_SLEEP.search(line)
        if not m:
            continue
        at = datetime(2000, *map(int, m.groups()[:5])).timestamp()  # vLLM gives no year; 2000 has a 02-29
        if m[7] == "fall asleep":
            asleep = at if began is not None else None
        elif began is None or asleep is not None:  # the first wake-up of a rollout
            start = at - float(m[6])
            if began is not None and asleep is not None and start > asleep >= began:  # not across a new year
                awake.append(asleep - began)
                cycle.append(start - began)
            began, asleep = start, None
    if not cycle:
        return None
    recent_awake, recent_cycle = awake[-RECENT_CYCLES:], cycle[-RECENT_CYCLES:]
    return Rollout(share=sum(recent_awake) / sum(recent_cycle), awake_s=statistics.median(recent_awake),
                   cycle_s=statistics.median(recent_cycle), cycles=len(cycle))


def completions(metrics: dict[str, Series], cap: int | None) -> Completions | None:
    lengths = metrics.get("completions/mean_length")
    if not lengths:
        return None
    clipped = metrics.get("completions/clipped_ratio")
    return Completions(lengths[-1][1], cap, clipped[-1][1] if clipped else None)


def pace(metrics: dict[str, Series], steps_per_round: int = 1, sleep_lines: list[str] = (),
         completion_cap: int | None = None) -> Pace:
    """The measured pace of a run from its logged metrics (``doctor.metrics`` names), the optimizer steps from one
    rollout to the next, rank 0's node's vLLM sleep/wake lines and max_completion_length."""
    steps_per_round = max(steps_per_round, 1)
    start, points = clock(metrics)
    first = points[0] if points else None
    found = intervals(points)
    per_round = rounds(found, steps_per_round)
    recent = recent_pace(points, steps_per_round)
    progress = metrics.get("max_steps", [])
    step = points[-1][0] if points else (progress[-1][0] if progress else None)
    total = int(progress[-1][1]) if progress else None
    eta = max(total - step, 0) * recent if recent is not None and total is not None and step is not None else None
    return Pace(start_step=start, first_step=first[0] if first else None,
                warmup_s=first[1] / (first[0] - start) if first else None, intervals=found, step=step, total=total,
                train_s=points[-1][1] if points else None, recent_s=recent,
                median_s=statistics.median(per_round) if per_round else None, eta_s=eta,
                rollout=vllm_rollouts(list(sleep_lines)), completions=completions(metrics, completion_cap))


def seconds_text(s: float | None) -> str:
    """Seconds as people read them: '0.061 s', '4.3 s', '54 s', '12 min', '1 h 12 min', '2 d 3 h'."""
    if s is None:
        return "—"
    if s < 1:
        return f"{s:.2g} s"
    if s < 10:
        return f"{s:.1f} s"
    if round(s) < 100:
        return f"{s:.0f} s"
    minutes = round(s / 60)
    if minutes < 60:
        return f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours} h {minutes} min" if minutes else f"{hours} h"
    days, hours = divmod(hours, 24)
    return f"{days} d {hours} h" if hours else f"{days} d"
