"""A job's GPU samples kept as running aggregates while they arrive, for the doctor's pass every few seconds over
hundreds of GPUs (issue 32: 64 hosts × 8 GPUs): what a pass used to compute by re-reading the samples from the store —
each GPU's duty cycle over the last DUTY_WINDOW_S, and each GPU's memory peak per logged step — at the cost of the
samples that came and went since the last pass. ``activity`` and curves.memory_per_gpu stay the definitions (and the
tests' references).

A GPU turns busy at ≥ BUSY % utilisation and idle below IDLE (hysteresis in between, which starts afresh at the
window's first sample); each interval between two samples counts as the state at its start, capped at MAX_GAP_S.
"""

from __future__ import annotations

import bisect
import itertools
import threading
from collections import deque
from dataclasses import dataclass

BUSY, IDLE = 40.0, 10.0   # utilisation %: a GPU turns busy at ≥ BUSY and idle below IDLE (hysteresis between)
DUTY_WINDOW_S = 300.0
MIN_SPAN_S = 120.0        # less evidence than this after start-up says nothing
MAX_GAP_S = 10.0          # a longer gap between samples (channel reconnecting) counts as this long
PEAK_STEPS = 8            # logged steps whose memory peaks the doctor judges (MEMORY-CLIMBING)


@dataclass
class Activity:
    """One GPU over the window: the share of time busy, how often it switched busy ↔ idle, its stretch lengths."""

    host: str
    gpu: int
    span: float
    duty: float
    switches: int
    busy_s: list[float]
    idle_s: list[float]


def _stretches(points: list[tuple[float, float]]) -> list[list]:
    """[busy?, seconds] of consecutive intervals in one state, of (ts, util) points in time order."""
    stretches: list[list] = []
    busy = points[0][1] >= BUSY
    for (ta, ua), (tb, _) in itertools.pairwise(points):
        busy = ua >= BUSY or (busy and ua >= IDLE)
        dt = min(tb - ta, MAX_GAP_S)
        if stretches and stretches[-1][0] == busy:
            stretches[-1][1] += dt
        else:
            stretches.append([busy, dt])
    return stretches


def _started(points: list[tuple[float, float]], first_step_at: float | None) -> list[tuple[float, float]]:
    """The points without an idle stretch that opens the window and ends before any step was logged (start-up:
    loading the model)."""
    first_busy = next((k for k, (_, util) in enumerate(points) if util >= BUSY), len(points))
    started = first_step_at is not None and (first_busy == len(points) or first_step_at < points[first_busy][0])
    return points[first_busy:] if first_busy and not started else points


def _activity(host: str, gpu: int, points: list[tuple[float, float]], first_step_at: float | None) -> Activity | None:
    points = _started(points, first_step_at)
    if len(points) < 2 or points[-1][0] - points[0][0] < MIN_SPAN_S:
        return None
    stretches = _stretches(points)
    span = sum(t for _, t in stretches)
    return Activity(host, gpu, span, sum(t for b, t in stretches if b) / span, len(stretches) - 1,
                    [t for b, t in stretches if b], [t for b, t in stretches if not b])


def activity(rows: list[dict], first_step_at: float | None, now: float) -> Activity | None:
    """Duty cycle of one GPU's samples (sorted by time) over the last DUTY_WINDOW_S. None when there is too little
    left to judge."""
    points = [(r["ts"], r["util"]) for r in rows if r["ts"] >= now - DUTY_WINDOW_S and r.get("util") is not None]
    return _activity(rows[0]["host"], rows[0]["gpu_index"], points, first_step_at) if points else None


class _Gpu:
    """One GPU's window: its samples, and the intervals between those with a utilisation as runs of one state
    ([busy?, seconds, intervals]) with their totals — what ``activity`` computes, kept up to date sample by
    sample. Each point keeps the state its interval has; when the window's first point leaves, the next one starts
    the hysteresis afresh, which can turn a prefix of busy intervals idle."""

    def __init__(self, host: str, gpu: int):
        self.host, self.gpu = host, gpu
        self.samples: deque[dict] = deque()
        self.points: deque[list] = deque()  # [ts, util, busy?]
        self.runs: deque[list] = deque()    # [busy?, seconds, intervals]
        self.busy_points = 0                # points at ≥ BUSY: where start-up may end

    def add(self, sample: dict) -> None:
        if self.samples and sample["ts"] < self.samples[-1]["ts"]:
            self._rebuild([*self.samples, sample])
            return
        self.samples.append(sample)
        util = sample.get("util")
        if util is None:
            return
        if self.points:
            ts, prev_util, prev_busy = self.points[-1]
            self._close(prev_busy, min(sample["ts"] - ts, MAX_GAP_S))
            busy = util >= BUSY or (prev_busy and util >= IDLE)
        else:
            busy = util >= BUSY
        self.points.append([sample["ts"], util, busy])
        self.busy_points += util >= BUSY

    def _close(self, busy: bool, dt: float) -> None:
        if self.runs and self.runs[-1][0] == busy:
            self.runs[-1][1] += dt
            self.runs[-1][2] += 1
        else:
            self.runs.append([busy, dt, 1])

    def expire(self, before: float) -> None:
        while self.samples and self.samples[0]["ts"] < before:
            self.samples.popleft()
        while self.points and self.points[0][0] < before:
            self._drop_first()

    def _drop_first(self) -> None:
        ts, util, _ = self.points.popleft()
        self.busy_points -= util >= BUSY
        if self.points:
            self._shrink_first(min(self.points[0][0] - ts, MAX_GAP_S), 1)
            self._restart()

    def _shrink_first(self, dt: float, intervals: int) -> None:
        self.runs[0][1] -= dt
        self.runs[0][2] -= intervals
        if self.runs[0][2] == 0:
            self.runs.popleft()

    def _restart(self) -> None:
        """The new first point starts the hysteresis afresh: points held busy only by their predecessors turn idle
        (between IDLE and BUSY), up to the first that is busy by itself."""
        moved, count = 0.0, 0
        for k, point in enumerate(self.points):
            if not point[2] or point[1] >= BUSY:
                break
            point[2] = False
            if k + 1 < len(self.points):  # its interval, when the next point closed it
                moved += min(self.points[k + 1][0] - point[0], MAX_GAP_S)
                count += 1
        if count:
            self._shrink_first(moved, count)
            if self.runs and not self.runs[0][0]:
                self.runs[0][1] += moved
                self.runs[0][2] += count
            else:
                self.runs.appendleft([False, moved, count])

    def _rebuild(self, samples: list[dict]) -> None:
        """From scratch, for a sample older than the newest (a clock that stepped back)."""
        self.__init__(self.host, self.gpu)
        for s in sorted(samples, key=lambda s: s["ts"]):
            self.add(s)

    def activity(self, first_step_at: float | None) -> Activity | None:
        """``activity`` of the window, from the runs. A start-up stretch that opens the window is the first run
        (idle up to the first busy point, which starts the hysteresis afresh either way): left out, it leaves the
        other runs as they are."""
        if len(self.points) < 2:
            return None
        first_ts, runs = self.points[0][0], list(self.runs)
        if self.points[0][1] < BUSY and self.busy_points:
            first_busy = runs[0][2]  # the first run holds the intervals of the points before the first busy one
            if first_step_at is None or first_step_at >= self.points[first_busy][0]:
                first_ts, runs = self.points[first_busy][0], runs[1:]
        elif self.points[0][1] < BUSY and first_step_at is None:
            return None  # nothing busy yet and no step logged: still starting
        span = sum(t for _, t, _ in runs)
        if self.points[-1][0] - first_ts < MIN_SPAN_S or not span:
            return None
        return Activity(self.host, self.gpu, span, sum(t for b, t, _ in runs if b) / span, len(runs) - 1,
                        [t for b, t, _ in runs if b], [t for b, t, _ in runs if not b])


class _Peaks:
    """One GPU's memory peak per logged step, as curves.memory_per_gpu bins the samples (a sample belongs to the
    first step logged at or after it): the samples after the last step boundary wait until the next is logged. A
    boundary is the time the watcher stored the step, so the older half of a long wait (no step for an hour) can
    be kept as its peak alone: no step will be stored before it."""

    OPEN_MAX = 3600

    def __init__(self):
        self.open: list[tuple[float, float]] = []  # (ts, MiB) after the last boundary taken
        self.peaks: dict[int, float] = {}

    def add(self, ts: float, mib: float, ends: list[float], steps: list[int]) -> None:
        k = bisect.bisect_left(ends, ts)
        if k < len(ends):
            self.peaks[steps[k]] = max(self.peaks.get(steps[k], 0.0), mib)
            return
        self.open.append((ts, mib))
        if len(self.open) > self.OPEN_MAX:
            older, self.open = self.open[:self.OPEN_MAX // 2], self.open[self.OPEN_MAX // 2:]
            self.open.insert(0, (max(t for t, _ in older), max(m for _, m in older)))

    def close(self, step: int, end: float) -> None:
        inside = [mib for ts, mib in self.open if ts <= end]
        if inside:
            self.peaks[step] = max(self.peaks.get(step, 0.0), *inside)
            self.open = [(ts, mib) for ts, mib in self.open if ts > end]

    def keep(self, steps: set[int]) -> None:
        self.peaks = {k: v for k, v in self.peaks.items() if k in steps}


class GpuWindow:
    """A job's GPU samples as running aggregates, per GPU: the last DUTY_WINDOW_S with their duty cycles, and the
    memory peak per logged step. ``add`` takes samples as they arrive (any thread); ``activities`` and ``recent``
    answer for a moment ``now``, ``step_peaks`` for the steps logged so far."""

    def __init__(self, rows: list[dict] = ()):
        self._gpus: dict[tuple[str, int], _Gpu] = {}
        self._peaks: dict[tuple[str, int], _Peaks] = {}
        self._ends: list[float] = []  # the step boundaries taken (when each step was logged), in order
        self._steps: list[int] = []
        self._history = False         # the peaks of steps logged before the window began were read once
        self._lock = threading.Lock()
        for row in sorted(rows, key=lambda r: r["ts"]):
            self.add(row)

    def add(self, sample: dict) -> None:
        key = (sample["host"], sample["gpu_index"])
        with self._lock:
            gpu = self._gpus.get(key) or self._gpus.setdefault(key, _Gpu(*key))
            gpu.add(sample)
            self._add_peak(key, sample)

    def _add_peak(self, key: tuple[str, int], sample: dict) -> None:
        if sample.get("mem_used") is not None:
            peaks = self._peaks.get(key) or self._peaks.setdefault(key, _Peaks())
            peaks.add(sample["ts"], sample["mem_used"], self._ends, self._steps)

    def step_peaks(self, step_times: list[tuple[int, float]], history=None) -> dict[str, list[tuple[int, float]]]:
        """Peak MiB of each host/GPU during each of the last PEAK_STEPS - 1 logged steps (all of them while fewer
        are logged), as curves.memory_per_gpu gives them from the samples since the PEAK_STEPS-th last step's log
        time (``step_times``: (step, when logged), in order). ``history(since)``: the stored samples from ``since``
        on, read once for the steps logged before this window began (a restarted app)."""
        with self._lock:
            if history is not None and not self._history and step_times:
                self._history = True
                first = step_times[-PEAK_STEPS][1] if len(step_times) > PEAK_STEPS else 0.0
                for sample in history(first):
                    self._add_peak((sample["host"], sample["gpu_index"]), sample)
            for step, end in step_times:
                if self._ends and end <= self._ends[-1]:
                    continue
                self._ends.append(end)
                self._steps.append(step)
                for peaks in self._peaks.values():
                    peaks.close(step, end)
            kept = {step for step, _ in step_times[-(PEAK_STEPS - 1):]} if len(step_times) > PEAK_STEPS else \
                {step for step, _ in step_times}
            out = {}
            for (host, gpu), peaks in sorted(self._peaks.items()):
                peaks.keep(set(self._steps[-2 * PEAK_STEPS:]))
                if series := sorted((k, v) for k, v in peaks.peaks.items() if k in kept):
                    out[f"{host}/GPU {gpu}"] = series
            return out

    def _expire(self, now: float) -> list[_Gpu]:
        with self._lock:
            for gpu in self._gpus.values():
                gpu.expire(now - DUTY_WINDOW_S)
            return [g for g in self._gpus.values() if g.samples]

    def activities(self, first_step_at: float | None, now: float) -> tuple[list[Activity], int]:
        """The duty cycle of every GPU with enough of the window to judge, and how many GPUs have samples in it."""
        gpus = self._expire(now)
        with self._lock:
            found = [a for g in gpus if (a := g.activity(first_step_at))]
        return found, len(gpus)

    def recent(self, now: float, seconds: float) -> list[dict]:
        """The samples of the last ``seconds`` (any GPU)."""
        with self._lock:
            return [s for g in self._gpus.values()
                    for s in itertools.takewhile(lambda s: s["ts"] >= now - seconds, reversed(g.samples))]
