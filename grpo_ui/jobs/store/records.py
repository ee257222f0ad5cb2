"""What the job store returns, as types: a job's state and its groups, the job, its nodes and alerts, log lines,
drafts, the GPU processes listed, the peaks measured, and the predictions a job was launched with — or, as a type of
its own, why it has none (``Unavailable``)."""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, fields
from enum import StrEnum
from typing import NamedTuple, Self


class JobState(StrEnum):
    """A job's state in the store: pending → preflight (when asked) → starting (handed to its backend; queued on
    Slurm) → running → succeeded / failed / stopped. Stored as its text."""

    PENDING = "pending"
    PREFLIGHT = "preflight"
    STARTING = "starting"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    STOPPED = "stopped"

    @property
    def active(self) -> bool:
        """Not ended: the watcher follows it and a restart re-attaches it."""
        return not self.ended

    @property
    def ended(self) -> bool:
        return self in (JobState.SUCCEEDED, JobState.FAILED, JobState.STOPPED)

    @property
    def launched(self) -> bool:
        """Handed to its backend and not ended (queued or running): it can be polled and stopped."""
        return self in (JobState.STARTING, JobState.RUNNING)


ACTIVE = tuple(s for s in JobState if s.active)
ENDED = tuple(s for s in JobState if s.ended)


class Row:
    """A record read from one table row, field by column name (a column a later release adds is ignored by this
    one's records until they name it)."""

    @classmethod
    def of(cls, row: sqlite3.Row) -> Self:
        return cls(**{f.name: row[f.name] for f in fields(cls)})  # type: ignore[call-arg]


@dataclass(frozen=True)
class Job(Row):
    id: str
    name: str
    spec_yaml: str        # the spec as launched: it never changes once stored (jobs.specs parses it once)
    state: JobState
    created: float
    started: float | None  # when it was first seen running
    ended: float | None
    error: str | None     # why it failed (its root cause), or a note on what could not be verified

    def __post_init__(self):
        object.__setattr__(self, "state", JobState(self.state))


@dataclass(frozen=True)
class Node(Row):
    """One entry of the job's cluster.nodes as launched: where it runs and how it is."""

    job_id: str
    node_index: int        # in spec.cluster.nodes
    host: str              # the machine (on Slurm: "(not allocated)" until the scheduler places it)
    role: str              # trainer | rollout
    node_rank: int | None  # NODE_RANK of a trainer
    script: str
    pid: int | None
    run_dir: str
    exit_code: int | None
    state: str             # the backend's node state (grpo_ui.backends.base.NodeState)

    @property
    def label(self) -> str:
        return f"node {self.node_index} ({self.host})"


@dataclass(frozen=True)
class StoredAlert(Row):
    """A doctor's alert on a job: its first and last sighting."""

    job_id: str
    alert_id: str
    severity: str
    message: str
    evidence: str | None
    fix: str | None
    first_seen: float
    last_seen: float


@dataclass(frozen=True)
class StoredDraft(Row):
    id: int
    name: str
    spec_yaml: str
    version: int  # each save adds one: a save from an older version is refused
    updated: float


@dataclass(frozen=True)
class GpuProcess(Row):
    """A process holding memory on one of the job's GPUs, as the latest listing of its host showed it."""

    host: str
    gpu_index: int | None
    gpu_uuid: str | None
    pid: int
    used_mib: float | None
    ts: float


@dataclass(frozen=True)
class MemoryPeak(Row):
    """The highest memory a GPU of the job reached, by one source: 'nvidia-smi' (used memory) or 'memory(GiB)' (rank
    0's logged torch memory)."""

    host: str
    gpu_index: int
    source: str
    peak_gib: float
    ts: float


class LogLine(NamedTuple):
    seq: int    # the line's number in the node's log (every line counted once, kept or not)
    text: str
    ts: float   # when it was stored


@dataclass(frozen=True)
class Unavailable:
    """Why a job has no prediction of one kind (memory, step time) kept with it."""

    why: str


@dataclass(frozen=True)
class RoleAtLaunch:
    role: str                     # trainer | rollout
    peak_gib: float               # what must fit
    expected_gib: float | None    # what nvidia-smi should show (with torch's cache)
    verdict: str | None
    peak_phase: str | None = None  # the phase the peak is in


@dataclass(frozen=True)
class Prediction:
    """A prediction a job was launched with, as the document its model wrote."""

    document: dict

    @classmethod
    def kept(cls, document: dict) -> Self | Unavailable:
        """The launch plan's document as the store keeps it: the prediction, or why there is none (the plan's
        ``{"error": why}``)."""
        return Unavailable(document["error"]) if "error" in document else cls(document)


@dataclass(frozen=True)
class MemoryAtLaunch(Prediction):
    """The memory estimate a job was launched with: each GPU role's peak, and the whole report as stored
    (grpo_ui.memory.report.MemoryReport.to_dict())."""

    @property
    def roles(self) -> list[RoleAtLaunch]:
        return [RoleAtLaunch(r["role"], r["peak_gib"], r.get("expected_gib"), r.get("verdict"), r.get("peak_phase"))
                for r in self.document.get("roles", [])]

    def role(self, name: str) -> RoleAtLaunch | None:
        return next((r for r in self.roles if r.role == name), None)


@dataclass(frozen=True)
class TimeAtLaunch(Prediction):
    """The step-time prediction a job was launched with (grpo_ui.timing.report.TimeReport.to_dict() and its
    assumptions)."""

    @property
    def step_s(self) -> float:
        return self.document["step_s"]

    @property
    def range(self) -> tuple[float, float] | None:
        return tuple(self.document["range"]) if self.document.get("range") else None

    @property
    def total_h(self) -> float | None:
        return self.document.get("total_h")

    @property
    def steps(self) -> int | None:
        return self.document.get("steps")

    @property
    def gpu_hours(self) -> float | None:
        return self.document.get("gpu_hours")
