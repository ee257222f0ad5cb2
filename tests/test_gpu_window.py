"""The GPU duty cycle kept as running aggregates (doctor.gpu_window.GpuWindow, fed sample by sample as the telemetry
channels deliver them) against re-reading the window's samples every pass (doctor.gpu_window.activity, what the doctor's
pass did before issue 32): the same figures for every GPU and the same GPU-UNDERUSED alert, pass after pass, on
the same samples — busy, idle and in-between utilisations (the hysteresis), gaps longer than MAX_GAP_S, samples
without a utilisation, a start-up stretch, a first step logged before, inside and after the window, and GPUs that
stop reporting."""

import random

import pytest

from grpo_ui.doctor import curves
from grpo_ui.doctor.diagnose import diagnose
from grpo_ui.doctor.gpu_window import BUSY, DUTY_WINDOW_S, IDLE, PEAK_STEPS, GpuWindow, activity
from grpo_ui.doctor.snapshot import Snapshot

T0 = 1_700_000_000.0


def samples(seed: int, gpus: int = 6, seconds: int = 900) -> list[dict]:
    """1 Hz samples of a few GPUs on two hosts whose utilisation wanders between phases: steady work, colocate
    oscillation, idle, values between IDLE and BUSY, gaps, missing utilisation, a GPU that stops."""
    rng = random.Random(seed)
    out = []
    for g in range(gpus):
        host, index = f"h{g % 2}", g
        t, phase = T0 + rng.random(), rng.choice(["busy", "swing", "idle", "between"])
        stop = T0 + rng.choice([seconds, seconds, 500])
        while t < stop:
            if rng.random() < 0.02:
                phase = rng.choice(["busy", "swing", "idle", "between"])
            if rng.random() < 0.01:
                t += rng.uniform(10, 40)  # the channel reconnecting
            util = {"busy": rng.uniform(60, 100), "idle": rng.uniform(0, 5), "between": rng.uniform(IDLE, BUSY),
                    "swing": rng.choice([95.0, 2.0, 25.0])}[phase]
            out.append({"host": host, "gpu_index": index, "ts": t, "util": None if rng.random() < 0.02 else util,
                        "mem_used": 1000.0, "power": 300.0, "power_limit": 700.0})
            t += rng.uniform(0.8, 1.2)
    return sorted(out, key=lambda s: s["ts"])


def reread(rows: list[dict], first_step_at, now):
    """The pass before issue 32: every GPU's samples of the window, re-read and judged."""
    per_gpu: dict[tuple, list[dict]] = {}
    for r in rows:
        if r["ts"] >= now - DUTY_WINDOW_S:
            per_gpu.setdefault((r["host"], r["gpu_index"]), []).append(r)
    found = [a for rs in per_gpu.values() if (a := activity(rs, first_step_at, now))]
    return sorted(found, key=lambda a: (a.host, a.gpu)), len(per_gpu)


def figures(found):
    return [(a.host, a.gpu, round(a.span, 6), round(a.duty, 9), a.switches, [round(x, 6) for x in a.busy_s],
             [round(x, 6) for x in a.idle_s]) for a in found]


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("first_step", [None, T0 - 3600, T0 + 200, T0 + 600])
def test_running_aggregates_equal_the_reread_pass_after_pass(seed, first_step):
    rows = samples(seed)
    window, k = GpuWindow(), 0
    for now in [T0 + 30 + 3 * n for n in range(300)]:
        while k < len(rows) and rows[k]["ts"] <= now:
            window.add(rows[k])
            k += 1
        kept, sampled = window.activities(first_step, now)
        expected, count = reread(rows[:k], first_step, now)
        assert figures(sorted(kept, key=lambda a: (a.host, a.gpu))) == figures(expected), now
        assert sampled == count


@pytest.mark.parametrize("seed", range(4))
def test_the_same_gpu_underused_alert_from_either(seed):
    rows = samples(seed, gpus=8)
    window, k = GpuWindow(), 0
    for now in [T0 + 320 + 7 * n for n in range(80)]:
        while k < len(rows) and rows[k]["ts"] <= now:
            window.add(rows[k])
            k += 1
        both = [{a.id: a for a in diagnose(Snapshot(now=now, first_step_at=T0 - 3600, **kw))}.get("GPU-UNDERUSED")
                for kw in ({"gpu_window": window}, {"gpu": [r for r in rows[:k] if r["ts"] >= now - DUTY_WINDOW_S]})]
        assert both[0] == both[1], now


def test_a_sample_older_than_the_newest_is_placed_by_its_time():
    rows = samples(1, gpus=2, seconds=400)
    window = GpuWindow(rows[:-40] + rows[-20:])
    for r in rows[-40:-20]:  # late arrivals
        window.add(r)
    now = rows[-1]["ts"]
    assert figures(sorted(window.activities(None, now)[0], key=lambda a: (a.host, a.gpu))) == \
        figures(reread(rows, None, now)[0])


def memory_samples(seed: int, seconds: int = 1500) -> list[dict]:
    rng = random.Random(seed)
    return sorted(({"host": f"h{g % 2}", "gpu_index": g, "ts": T0 + t + rng.random(), "util": 50.0,
                    "mem_used": None if rng.random() < 0.03 else rng.uniform(1000, 80000)}
                   for g in range(4) for t in range(seconds) if rng.random() < 0.97), key=lambda s: s["ts"])


@pytest.mark.parametrize("seed", range(6))
def test_memory_peaks_per_step_equal_the_reread(seed):
    """The watcher's MEMORY-CLIMBING input: each GPU's peak per step over the last steps, kept as the samples
    arrive, against curves.memory_per_gpu over the samples since the PEAK_STEPS-th last step (the re-read)."""
    rows = memory_samples(seed)
    rng = random.Random(seed)
    logged, t, step = [], T0, 0
    while t < T0 + 1500:  # steps stored by the watcher at irregular times, some in the same pass
        t += rng.choice([3.0, 20.0, 45.0, 90.0])
        step += 1
        logged.append((step, t))
        if rng.random() < 0.2:
            step += 1
            logged.append((step, t))
    window, k = GpuWindow(), 0
    for now in [T0 + 3 * n for n in range(1, 500)]:
        while k < len(rows) and rows[k]["ts"] <= now:
            window.add(rows[k])
            k += 1
        steps = [(s, at) for s, at in logged if at <= now]
        since = steps[-PEAK_STEPS][1] if len(steps) > PEAK_STEPS else 0.0
        expected = curves.memory_per_gpu([r for r in rows[:k] if r["ts"] > since or not since], steps)
        assert window.step_peaks(steps) == expected, now


def test_a_restarted_watcher_reads_the_peaks_of_earlier_steps_once():
    rows = memory_samples(3, seconds=600)
    steps = [(s, T0 + 40 * s) for s in range(1, 14)]
    late = GpuWindow([r for r in rows if r["ts"] >= T0 + 400])  # what the window holds after a restart
    reads = []

    def history(since):
        reads.append(since)
        return [r for r in rows if r["ts"] >= since]
    since = steps[-PEAK_STEPS][1]
    expected = curves.memory_per_gpu([r for r in rows if r["ts"] > since], steps)
    assert late.step_peaks(steps, history) == expected and late.step_peaks(steps, history) == expected
    assert reads == [since]
