"""Series derived from what ms-swift logs, for the Monitor's extra curves and the doctor's trend rules.

ms-swift 4.x logs per step ``step_time`` (TRL's timer around the training step: rollout generation, reward scoring,
forward and backward of the step's micro-batches) and its own clock (``train_speed(s/it)``, see pace.py);
its finer timers go to wandb/swanlab only. So a step splits into the time inside the training step and the rest
(optimizer step, logging, checkpoint saves, data loading). Memory per rank comes from the GPU samples of each node
(nvidia-smi), peak per step.
"""

from __future__ import annotations

import bisect

from grpo_ui.doctor import pace

Series = list[tuple[int, float]]


def wall_per_step(metrics: dict[str, Series]) -> Series:
    """Wall seconds per optimizer step over each logged interval, the first logged step's own first (ms-swift's
    clock, see doctor.pace)."""
    start, points = pace.clock(metrics)
    if not points:
        return []
    (first, at), found = points[0], pace.intervals(points)
    return [(first, at / (first - start))] + [(i.step, i.seconds) for i in found]


def step_phases(metrics: dict[str, Series]) -> dict[str, Series]:
    """Per logged step: seconds inside the training step (rollout, reward, forward/backward) and the rest."""
    inside = dict(metrics.get("step_time", []))
    wall = dict(wall_per_step(metrics))
    steps = sorted(set(inside) & set(wall))
    return {"rollout + reward + forward/backward (step_time)": [(k, inside[k]) for k in steps],
            "optimizer, logging, saves (rest of the step)": [(k, max(wall[k] - inside[k], 0.0)) for k in steps]}


def rollout_throughput(metrics: dict[str, Series], completions_per_step: int | None = None) -> Series:
    """Completion tokens per second of step time: mean completion length × completions per step (1 when unknown:
    then per completion) / step_time."""
    length = dict(metrics.get("completions/mean_length", []))
    seconds = dict(metrics.get("step_time", [])) or dict(wall_per_step(metrics))
    n = completions_per_step or 1
    return [(k, length[k] * n / seconds[k]) for k in sorted(set(length) & set(seconds)) if seconds[k] > 0]


def memory_per_gpu(samples: list[dict], step_times: list[tuple[int, float]]) -> dict[str, Series]:
    """Peak GPU memory (MiB) of each host/GPU during each logged step: the samples after the previous step's log
    time, up to this one's (``step_times``: (step, when logged), in order)."""
    ends = [t for _, t in step_times]
    peaks: dict[str, dict[int, float]] = {}
    for g in samples:
        k = bisect.bisect_left(ends, g["ts"])
        if k < len(ends) and g.get("mem_used") is not None:
            per_step = peaks.setdefault(f"{g['host']}/GPU {g['gpu_index']}", {})
            step = step_times[k][0]
            per_step[step] = max(per_step.get(step, 0.0), g["mem_used"])
    return {key: sorted(per_step.items()) for key, per_step in sorted(peaks.items())}


def extra_curves(metrics: dict[str, Series], samples: list[dict], step_times: list[tuple[int, float]],
                 completions_per_step: int | None = None) -> dict[str, dict[str, Series]]:
    """The Monitor's extra charts, each a title → {series name → [(step, value)]}; empty series are left out."""
    unit = "tokens/s" if completions_per_step else "tokens/s per completion"
    memory = {k + " (MiB)": v for k, v in memory_per_gpu(samples, step_times).items()}
    if metrics.get("memory(GiB)"):
        memory["rank 0 peak reserved (GiB, ms-swift)"] = metrics["memory(GiB)"]
    charts = {"rollout throughput": {f"completion {unit} of step time": rollout_throughput(metrics,
                                                                                          completions_per_step)},
              "time per step (s)": step_phases(metrics),
              "memory per rank": memory}
    return {title: {k: v for k, v in series.items() if v} for title, series in charts.items()}
