"""The execution-backend interface: what grpo-ui asks of any place that runs a job (SSH hosts, Slurm, later
Kubernetes or Ray).

A backend instance is one job spec bound to a way of running it. It does backend work only: it receives the
rendered bundle, starts it and returns a handle, a JSON-able dict the caller stores with the job and hands back
later, so a restarted app can poll and stop the job again. It never touches the store; job rows, log offsets,
metrics and alerts are the caller's.

Nodes are numbered by their index in ``spec.cluster.nodes`` (trainer rank r is the r-th trainer entry).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Literal

from grpo_ui.findings import Finding
from grpo_ui.remote.runner import Runner
from grpo_ui.remote.ssh import Pool
from grpo_ui.render import Bundle
from grpo_ui.spec import JobSpec

JobState = Literal["queued", "running", "succeeded", "failed", "stopped"]
NodeState = Literal["pending", "running", "succeeded", "failed", "stopped"]


class BackendError(Exception):
    """A backend could not do what was asked; the message names the host or job and what to do."""


@dataclass
class NodeStatus:
    index: int              # in spec.cluster.nodes
    role: Literal["trainer", "rollout"]
    rank: int | None        # NODE_RANK of a trainer
    host: str | None        # the machine it runs on, once known
    state: NodeState
    exit_code: int | None = None
    log: str = ""           # its log file, readable with Backend.read


@dataclass
class JobStatus:
    state: JobState
    detail: str = ""                   # the backend's own words, e.g. "PENDING (Priority)" or "TIMEOUT"
    nodes: list[NodeStatus] = field(default_factory=list)
    reason: str | None = None          # why it waits, while queued
    queue_position: int | None = None  # 1 = next to start in its queue, while queued
    error: str | None = None           # when failed: which node failed first, its exit code and log tail


class Backend(ABC):
    """One way of running a job. Implementations: ``grpo_ui.backends.slurm.SlurmBackend`` (the SSH launcher,
    ``grpo_ui.remote.launcher``, is to follow)."""

    name: str

    def __init__(self, spec: JobSpec, pool: Pool | None = None):
        self.spec = spec
        self.pool = pool or Pool()  # SSH connections, shared with the caller's other work

    @abstractmethod
    def prepare(self, bundle: Bundle) -> list[Finding]:
        """Preflight: what would make the job fail or wait, as findings (errors block the start)."""

    @abstractmethod
    def start(self, bundle: Bundle, secrets: dict[str, str]) -> dict:
        """Start the job; returns its handle. Raises BackendError with the reason, leaving nothing running."""

    @abstractmethod
    def poll(self, handle: dict) -> JobStatus:
        """The job's state now, per node; the root cause once it failed."""

    @abstractmethod
    def stop(self, handle: dict, grace: float = 10.0) -> dict[str, str]:
        """Stop the job and verify nothing of it is left; returns what happened per node (or job component).
        Raises BackendError when it cannot verify that."""

    @abstractmethod
    def runner(self, node: int) -> Runner:
        """A Runner that sees the node's files: the node itself, or a machine sharing its file system."""

    def read(self, handle: dict, node: int, path: str, offset: int, limit: int) -> bytes:
        """Bytes of one of the node's files (logs, logging.jsonl) from ``offset``; b'' when it does not exist."""
        return self.runner(node).read(path, offset, limit)
