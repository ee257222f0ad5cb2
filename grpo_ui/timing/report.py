"""What the step-time prediction says: seconds per optimizer step by phase, the run's steps, hours, GPU-hours and
cost, the range the model's measured error gives, and what it assumed (with the field that changes each)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

# The order phases are shown in, and what each holds (seconds per optimizer step: a round's time ÷ the optimizer
# steps it feeds).
PHASES = {
    "rollout": "generation (vLLM or generate()); with async_generate only what training does not hide",
    "reward": "reward models' forwards and the latency of reward functions that call out",
    "old_logprobs": "the old policy's log-probs, one forward per micro-batch",
    "ref_logprobs": "the reference's log-probs (a reference model, or LoRA's adapter off)",
    "train": "forward, backward, recomputation, the sharding engine's collectives, the optimizer",
    "weight_sync": "the updated weights to vLLM (gathered, sent, loaded)",
    "sleep_wake": "a colocated vLLM put to sleep and woken (sleep_level)",
    "offload": "offload_model / offload_optimizer to host memory and back",
    "overhead": "the rest of a round: data loading, templates, metrics",
}
# The model's own error on runs its fit has not seen: for each source of the step-time fit set
# (tests/data/time_measurements.jsonl's fit rows ms-swift can run), the constants fitted on those rows are fitted again
# without that source and its rows predicted with them; the measured seconds per step were between these multiples of
# that prediction for 8 in 10 of the rows, nominally (their 10th and 90th percentiles; bench/time_calibration.ranges,
# the rule is that module's docstring). Given the mean completion length: over the rows that publish it, predicted
# with it; assumed (timing.lengths' prior): over every fit-set row predicted as if it gave none, so the range also
# holds the prior's error. Held-out and fresh rows never set them.
RANGE_GIVEN = (0.66, 1.94)
RANGE_ASSUMED = (0.41, 2.53)
# (runs within, runs), as counted: of the fit-set runs each range was measured on, and of the fresh splits' rows of a
# shape ms-swift can run (sources collected after the model was built, never fitted on; they measure the range, they
# never set it). bench/time_accuracy.py prints them per split; tests/test_timing.py keeps all of these equal to what
# the rule gives.
RANGE_WITHIN = {"given": (15, 19), "assumed": (17, 23), "unseen": (18, 25)}


@dataclass
class TimeReport:
    """One prediction. ``phases`` and ``step_s`` are per optimizer step (ms-swift's global_step); a generation round
    takes ``round_s`` and feeds ``steps_per_round`` of them (less than one when a step spans several rounds)."""

    step_s: float
    phases: dict[str, float]
    round_s: float
    steps_per_round: float
    steps: int | None
    gpus: int
    price: float | None
    assumptions: list[str]
    length_given: bool = True    # the mean completion came from the user (else timing.lengths assumed it)
    details: dict[str, float] = field(default_factory=dict)

    @property
    def total_h(self) -> float | None:
        return None if self.steps is None else self.steps * self.step_s / 3600

    @property
    def gpu_hours(self) -> float | None:
        return None if self.total_h is None else self.total_h * self.gpus

    @property
    def cost(self) -> float | None:
        return None if self.gpu_hours is None or self.price is None else self.gpu_hours * self.price

    @property
    def range(self) -> tuple[float, float]:
        """Where the measured seconds per step are likely to be: wider when the completion length is assumed."""
        low, high = RANGE_GIVEN if self.length_given else RANGE_ASSUMED
        return self.step_s * low, self.step_s * high

    @property
    def range_share(self) -> float:
        """The share of the published runs ``range`` was measured on that fell within it (RANGE_WITHIN)."""
        within, runs = RANGE_WITHIN["given" if self.length_given else "assumed"]
        return within / runs

    @property
    def range_meaning(self) -> str:
        """What ``range`` is, in words: how many published runs fell within it, out of sample."""
        within, runs = RANGE_WITHIN["given" if self.length_given else "assumed"]
        unseen_within, unseen = RANGE_WITHIN["unseen"]
        which, how = (" that give their completion length", "") if self.length_given else (
            "", " and as if its completion length were unknown")
        return (f"{within} of the {runs} published GRPO runs the model is fitted on{which} measured within this range, "
                f"each predicted by the model fitted without its own source's runs{how}; of {unseen} published runs "
                f"collected after the model was built and never fitted on, {unseen_within} fell within the range "
                "they were given")

    def to_dict(self) -> dict:
        """The CLI's ``time`` object (its contract): step_s, phases_s (adding up to step_s), steps, total_h,
        gpu_hours, cost, range, range_share (the share of the published runs it was measured on that fell within it),
        range_meaning (``range`` in words)."""
        def r(x):
            return None if x is None else round(x, 3)
        return {"step_s": r(self.step_s), "phases_s": {k: r(v) for k, v in self.phases.items()},
                "steps": self.steps, "total_h": r(self.total_h), "gpu_hours": r(self.gpu_hours), "cost": r(self.cost),
                "range": [r(x) for x in self.range], "range_share": round(self.range_share, 2),
                "range_meaning": self.range_meaning}


def duration(seconds: float) -> str:
    """3.2 s, 14 min, 5.3 h, 2.1 days."""
    if seconds < 90:
        return f"{seconds:.1f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    if seconds < 48 * 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} days"


def format_time(report: TimeReport) -> str:
    low, high = report.range
    n = report.steps_per_round
    rounds = f"one generation round ({duration(report.round_s)}) feeds {n:g} step(s)" if n >= 1 else (
        f"one step takes {1 / n:g} generation rounds of {duration(report.round_s)}")
    lines = [f"time per optimizer step: {duration(report.step_s)} (range {duration(low)} – {duration(high)}); {rounds}"]
    width = max(len(k) for k in PHASES)
    lines += [f"  {name:<{width}} {seconds:9.2f} s  {PHASES[name]}" for name, seconds in report.phases.items()
              if seconds >= 0.005]
    if report.steps is None:
        lines.append("run: length unknown")
    else:
        cost = f", cost {report.cost:,.0f}" if report.cost is not None else ""
        lines.append(f"run: {report.steps:,} steps, {duration(report.total_h * 3600)}, "
                     f"{report.gpu_hours:,.0f} GPU-hours on {report.gpus} GPUs{cost}")
    lines.append(f"range: {report.range_meaning}")
    lines += [f"assumes {a}" for a in report.assumptions]
    return "\n".join(lines)


def run_steps(max_steps: int, rows: int | None, prompts_per_round: float, steps_per_round: float,
              epochs: float) -> int | None:
    """ms-swift's optimizer steps for the run: max_steps when set (> 0), else epochs × the rounds one epoch's
    prompts make (each prompt is one of a round's generation_batch ÷ num_generations) × the steps each round feeds;
    None when the dataset's size is unknown."""
    if max_steps > 0:
        return max_steps
    if rows is None:
        return None
    return math.ceil(epochs * math.ceil(rows / prompts_per_round) * steps_per_round)
