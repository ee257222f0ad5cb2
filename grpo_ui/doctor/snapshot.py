"""What the doctor looks at (a Snapshot of one job) and what it says (Alerts), and the registry of its rules."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

from grpo_ui.core.findings import Finding, finding
from grpo_ui.doctor import liveness
from grpo_ui.doctor.events import Event, scan
from grpo_ui.doctor.gpu_window import GpuWindow
from grpo_ui.doctor.rootcause import Failure, root_cause
from grpo_ui.doctor.stacks import RankStack
from grpo_ui.spec.resolve import DEFAULT_BETA, GROUP_PORT, Resolved


@dataclass(frozen=True)
class Alert:
    id: str
    severity: str  # error / warning / info
    title: str
    explanation: str
    evidence: str
    fix: str
    where: str = ""  # node, rank or file the alert is about

    def finding(self) -> Finding:
        """The alert in the shape every check reports in (``format_findings`` prints it like ``validate``)."""
        evidence = "\n".join("      " + line for line in self.evidence.splitlines())
        return finding(self.id, self.severity, self.where or "job", f"{self.title}. {self.explanation}"
                       + (f"\n    evidence:\n{evidence}" if evidence else ""), self.fix)


@dataclass
class Snapshot:
    """What the doctor looks at for one job: the live watcher builds it from SQLite, the doctor command from log
    files."""

    metrics: dict[str, list[tuple[int, float]]] = field(default_factory=dict)  # key → [(step, value)]
    logs: dict[str, list[str]] = field(default_factory=dict)                   # node label → recent lines
    beta: float = DEFAULT_BETA
    now: float = 0.0
    last_step_at: float | None = None       # when the latest step was logged
    first_step_at: float | None = None      # when the first step was logged
    last_output_at: dict[str, float] = field(default_factory=dict)  # node label → last sign of progress
    started_at: float | None = None
    gpu: list[dict] = field(default_factory=list)  # samples: host, gpu_index, ts, util, mem_used, power, power_limit
    job_state: str = "running"
    job_error: str | None = None
    server_mode: bool = False
    settings: dict = field(default_factory=dict)  # the job's rollout/offload/data settings, for the fixes
    logging_steps: int = 1
    steps_per_generation: int = 1  # optimizer steps from one rollout to the next (Resolved.rollout_steps)
    group_ports: tuple[int, ...] = (GROUP_PORT,)  # the rollout servers' weight-sync group ports
    stacks: list[RankStack] = field(default_factory=list)  # py-spy stacks of the ranks (on a suspected hang)
    checkpoints: dict[str, list[str]] = field(default_factory=dict)  # checkpoint dir → files in it (where readable)
    gpu_by_step: dict[str, list[tuple[int, float]]] = field(default_factory=dict)  # host/GPU → peak MiB per step
    source: str = "job"     # "job": a run grpo-ui launched and follows; "logs": log files given to the doctor
    excerpt: bool = False   # the logs show no start of a run (a pasted excerpt): every step they show counts
    metric_lines: dict[int, list[str]] = field(default_factory=dict)  # step → the log lines its metrics came from
    gpu_window: GpuWindow | None = None  # the samples' running aggregates, where the caller keeps them (the watcher)

    @cached_property
    def gpus(self) -> GpuWindow:
        """The GPU samples of the last DUTY_WINDOW_S per GPU, with their duty cycles: the caller's running window,
        else one built from ``gpu``."""
        return self.gpu_window if self.gpu_window is not None else GpuWindow(self.gpu)

    @cached_property
    def sync_ports(self) -> frozenset[int]:
        """The rollout servers' weight-sync group ports: the run's own and the defaults of up to 8 servers."""
        return frozenset(self.group_ports) | {GROUP_PORT + k for k in range(8)}

    @cached_property
    def events(self) -> dict[str, list[Event]]:
        """The error lines of each node's log (events.py)."""
        return {node: scan(node, lines, self.sync_ports) for node, lines in self.logs.items()}

    @cached_property
    def first_failure(self) -> Failure | None:
        """The first error across the logs (rootcause.py), whatever the run's state."""
        return root_cause(self.logs, self.events)

    @property
    def root_cause(self) -> Failure | None:
        """Where a failed run failed first; None while it has not failed."""
        return self.first_failure if self.job_state == "failed" else None


def job_settings(eff: Resolved) -> dict:
    """The Snapshot fields a job's own values decide (a Resolved job)."""
    return {"beta": eff.beta, "logging_steps": eff.logging_steps, "steps_per_generation": eff.rollout_steps,
            "server_mode": eff.server, "group_ports": eff.group_ports}


RULES = []


def rule(fn):
    RULES.append(fn)
    return fn


def last(s: Snapshot, key: str, n: int) -> list[float]:
    return [v for _, v in s.metrics.get(key, [])[-n:]]


def overdue(s: Snapshot) -> tuple[float, float] | None:
    """(seconds silent, seconds allowed) when a running job has shown no sign of progress for longer than a healthy
    run would (see grpo_ui.doctor.liveness); None otherwise."""
    marks = [*s.last_output_at.values(), *(t for t in (s.last_step_at, s.started_at) if t)]
    if s.job_state != "running" or not s.now or not marks:
        return None
    bar = liveness.has_step_bar([line for lines in s.logs.values() for line in lines[-200:]])
    allowed = liveness.allowed_silence(liveness.expected_gap(s.metrics, s.logging_steps, s.steps_per_generation, bar))
    quiet = s.now - max(marks)
    return (quiet, allowed) if quiet > allowed else None
