"""The jobs side of the door: one stored job as the pages and ``status`` show it (``JobView``: read from the store,
never written — following a job is the watcher's work, grpo_ui.jobs.follow), the records and types they read, and
the calibration rows a job's measurements make."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

from grpo_ui.backends.base import Handle
from grpo_ui.doctor.curves import extra_curves
from grpo_ui.doctor.rootcause import first_error_index
from grpo_ui.doctor.stacks import RankStack, parse_dumps
from grpo_ui.jobs import memory_loop, time_loop
from grpo_ui.jobs.follow import STACKS, STACKS_AT, PollResult, log_streams
from grpo_ui.jobs.service import HANDLE, STATUS, LaunchError, override_note
from grpo_ui.jobs.specs import job_spec
from grpo_ui.jobs.store import (
    GpuProcess,
    Job,
    JobState,
    LogLine,
    MemoryAtLaunch,
    Node,
    Store,
    StoredAlert,
    TimeAtLaunch,
    Unavailable,
)
from grpo_ui.jobs.time_loop import StepTimeSummary
from grpo_ui.launch.plan import DRIVER
from grpo_ui.spec.layout import engine_words, layout_words

__all__ = ["DRIVER", "BackendWords", "GpuProcess", "Job", "JobState", "JobView", "LaunchError", "LogLine", "LogStream", "MemoryAtLaunch",
           "Node", "PollResult", "Stacks", "StepTimeSummary", "StoredAlert", "TimeAtLaunch", "Unavailable",
           "first_error_index", "predictions_of", "significant"]


@dataclass(frozen=True)
class BackendWords:
    """What the job's backend last said of it while it waits or runs (e.g. "Slurm job 12: PENDING (Priority)")."""

    detail: str
    reason: str | None
    queue_position: int | None  # 1 = next to start in its queue


@dataclass(frozen=True)
class LogStream:
    """One log of a job as Monitor lists it: its driver's (a Ray job's) or a node's, by its stream number."""

    stream: int
    label: str


@dataclass(frozen=True)
class Stacks:
    """The py-spy dumps of every rank the watcher (or the user) last took, and when."""

    taken_at: float
    ranks: list[RankStack]


class JobView:
    """One stored job, read for a page or ``status``: its records, its measurements next to what was predicted at
    launch, and what its state means (the launch never reached the nodes, it was launched despite errors)."""

    def __init__(self, store: Store, job: Job):
        self.store, self.job = store, job

    @property
    def id(self) -> str:
        return self.job.id

    def nodes(self) -> list[Node]:
        return self.store.nodes(self.id)

    def metrics(self) -> dict[str, list[tuple[int, float]]]:
        return self.store.metrics(self.id)

    def step_times(self) -> list[tuple[int, float]]:
        return self.store.step_times(self.id)

    def alerts(self) -> list[StoredAlert]:
        return self.store.alerts(self.id)

    def log_lines(self, stream: int, last: int) -> list[LogLine]:
        """The last lines of one log: a node's (its index) or the driver's (LogStream.stream)."""
        return self.store.log_lines(self.id, stream, last)

    def log_streams(self) -> list[LogStream]:
        """The job's logs: its driver's first where it has one (a Ray job; in ms-swift's Ray mode it holds what Ray's
        workers print, the nodes having no log of their own), then each node's."""
        eff, nodes = job_spec(self.job), {n.node_index: n for n in self.nodes()}
        driver = "driver · the Ray job" + (" (with what ms-swift's Ray workers print)" if eff.ray else "")
        return [LogStream(s, driver if s == DRIVER else (
            f"node {s} · {nodes[s].host} · {nodes[s].role}"
            + (f" rank {nodes[s].node_rank}" if nodes[s].role == "trainer" else "")))
            for s in log_streams(eff, list(nodes.values()))]

    @property
    def link(self) -> tuple[str, str] | None:
        """(what it is, its address) of the job's page outside grpo-ui, once it was started: a Ray job's on the Ray
        dashboard; None for the others."""
        kept = self.store.meta(self.id, HANDLE)
        handle = Handle.from_json(kept) if kept else None
        return (handle.link_label, handle.link) if handle and handle.link else None

    @property
    def step_word(self) -> str:
        """What the trainer counts steps as: megatron rlhf's iterations (its 'iteration N/M'), swift rlhf's steps."""
        return "Iteration" if job_spec(self.job).megatron else "Step"

    def completions(self, last: int) -> list[dict]:
        return self.store.completions(self.id, last)

    def gpu_samples(self, last_s: float) -> list[dict]:
        """The GPU samples of the last ``last_s`` seconds."""
        return self.store.gpu_samples(self.id, time.time() - last_s)

    def extra_curves(self, last_s: float) -> dict[str, dict[str, list[tuple[int, float]]]]:
        """Rollout throughput, time per step by phase and memory per rank over the steps of the last ``last_s``
        seconds (grpo_ui.doctor.curves)."""
        return extra_curves(self.metrics(), self.gpu_samples(last_s), self.step_times())

    def gpu_processes(self) -> list[tuple[str, GpuProcess]]:
        """(the node it belongs to, 'node 0 · h0'; the host for a host no node has) and each process holding GPU
        memory, as the latest listing per host showed it."""
        label = {n.host: f"node {n.node_index} · {n.host}" for n in self.nodes()}
        return [(label.get(p.host, p.host), p) for p in self.store.gpu_processes(self.id)]

    def backend_words(self) -> BackendWords | None:
        kept = self.store.meta(self.id, STATUS)
        return BackendWords(**json.loads(kept)) if kept else None

    @property
    def never_started(self) -> bool:
        """It failed before anything ran on its nodes (they were never reached, or preflight refused them)."""
        return self.job.state == JobState.FAILED and not self.store.meta(self.id, HANDLE)

    @property
    def override_note(self) -> str | None:
        """The errors it was launched despite and the reason given, as a sentence; None when there were none."""
        return override_note(self.store, self.id)

    def stacks(self) -> Stacks | None:
        text = self.store.meta(self.id, STACKS)
        return Stacks(float(self.store.meta(self.id, STACKS_AT) or 0), parse_dumps(text)) if text else None

    # what it was launched with, next to what was measured
    def memory_table(self) -> list[dict]:
        """One row per GPU of the job: its role and rank, the estimate at launch and the peaks measured
        (grpo_ui.jobs.memory_loop.comparison)."""
        return memory_loop.comparison(self.store, self.id, job_spec(self.job))

    def no_memory_estimate(self) -> str | None:
        """Why the job was launched without a memory estimate (None when it has one, or none was kept)."""
        estimate = self.store.memory_estimate(self.id)
        return estimate.why if isinstance(estimate, Unavailable) else None

    def step_time(self) -> StepTimeSummary:
        return time_loop.summary(self.store, self.id, job_spec(self.job))

    def history_row(self) -> dict:
        """The job as History's table lists it: outcome, time, steps, final reward and KL, memory and step time
        (predicted at launch and measured) and its alerts."""
        job, m = self.job, self.metrics()
        estimate = self.store.memory_estimate(self.id)
        trainer = estimate.role("trainer") if isinstance(estimate, MemoryAtLaunch) else None
        peaks = [p.peak_gib for p in self.store.memory_peaks(self.id)]
        pace = time_loop.comparison(self.store, self.id)
        eff = job_spec(job)
        return {"job": job.id, "name": job.name, "state": job.state, "backend": eff.spec.cluster.backend,
                "engine": engine_words(eff), "layout": layout_words(eff),
                "started": time.strftime("%Y-%m-%d %H:%M", time.localtime(job.started or job.created)),
                "minutes": round(((job.ended or time.time()) - (job.started or job.created)) / 60, 1),
                "steps": int(m["max_steps"][-1][0]) if m.get("max_steps") else 0,
                "reward": significant(m["reward"][-1][1]) if m.get("reward") else None,
                "kl": significant(m["kl"][-1][1]) if m.get("kl") else None,
                "estimate GiB": trainer and trainer.peak_gib, "measured GiB": round(max(peaks), 1) if peaks else None,
                **{column: significant(value or None, 3) for column, value in (  # 0 and none alike: not measured
                    ("predicted s/step", pace.predicted and pace.predicted.step_s),
                    ("measured s/step", pace.measured and pace.measured["median_s"]),
                    ("predicted h", pace.predicted_total_s and pace.predicted_total_s / 3600),
                    ("measured h", pace.measured_total_s and pace.measured_total_s / 3600))},
                "alerts": ", ".join(a.alert_id for a in self.alerts()) or "—"}


def significant(value: float | None, digits: int = 4) -> float | None:
    """A metric as people read it, to ``digits`` significant digits (0.1235, 54.13, 1.235e-06); None stays None."""
    return None if value is None else float(f"{value:.{digits}g}")


def predictions_of(plan) -> tuple[MemoryAtLaunch | Unavailable, TimeAtLaunch | Unavailable]:
    """The memory estimate and the step-time prediction a launch plan keeps with the job (or why there is none)."""
    return MemoryAtLaunch.kept(plan.estimate), TimeAtLaunch.kept(plan.time)
