"""The execution-backend interface: what grpo-ui asks of any place that runs a job (SSH hosts, Slurm, Ray; later
Kubernetes).

A backend instance is one job spec bound to a way of running it. It does backend work only: it receives the launch
plan (grpo_ui.launch.plan: validated, estimated and rendered once), starts it and returns its Handle (SSH: each node's
pid, process group and start time; Slurm: the job id; Ray: the submission id and the Jobs API address), which the jobs service (grpo_ui.jobs.service) stores with the
job as JSON and hands back later, so a restarted app can poll and stop the job again. It never touches the store: job
rows, the state machine, root causes, log offsets, metrics and alerts are the service's.

Nodes are numbered by their index in ``spec.cluster.nodes`` (a trainer's NODE_RANK is its place among the trainer
entries: JobSpec.numbered); what runs the nodes (a Ray job's driver: Backend.job_log) by DRIVER (grpo_ui.launch.plan).
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import ClassVar, Literal

from grpo_ui.backends.preflight import HostFacts
from grpo_ui.backends.remote.runner import Runner
from grpo_ui.backends.remote.ssh import Pool
from grpo_ui.core.errors import UserError
from grpo_ui.core.findings import Finding
from grpo_ui.launch.plan import LaunchPlan
from grpo_ui.spec.model import JobSpec
from grpo_ui.spec.resolve import Resolved

JobState = Literal["queued", "running", "succeeded", "failed", "stopped"]
# unknown: the node could not be asked this time (its last known state stands)
NodeState = Literal["pending", "running", "succeeded", "failed", "lost", "stopped", "unknown"]
Progress = Callable[[str, str], None]  # (host, what happens now)
LogReader = Callable[[str, int, int], bytes]  # (path, offset, limit) → the bytes there, b"" past the end


class BackendError(UserError):
    """A backend could not do what was asked; the message names the host or job and what to do. ``nodes``: the
    nodes (indices) a failed start could not start."""

    def __init__(self, message: str, nodes: tuple[int, ...] = ()):
        super().__init__(message)
        self.nodes = nodes


@dataclass
class NodeStatus:
    index: int              # in spec.cluster.nodes
    role: Literal["trainer", "rollout"]
    rank: int | None        # NODE_RANK of a trainer
    host: str | None        # the machine it runs on, once known
    state: NodeState
    exit_code: int | None = None
    log: str = ""           # its log file, readable through Backend.runner(index)
    pid: int | None = None  # its root process, where the backend knows it
    why: str | None = None  # why it failed: "exit code 7", "process gone without an exit code (killed?)", …
    ended: float | None = None  # when it ended (its exit code's time), to tell which node failed first


@dataclass
class JobStatus:
    state: JobState
    detail: str = ""                   # the backend's own words, e.g. "Slurm job 12: PENDING (Priority)"
    nodes: list[NodeStatus] = field(default_factory=list)
    reason: str | None = None          # why it waits, while queued
    queue_position: int | None = None  # 1 = next to start in its queue, while queued
    error: str | None = None           # a failure no node accounts for, in the backend's words (and output)
    remains: str | None = None         # what of an ended job is left beside its nodes, for the service to stop
    #                                    (Backend.stop): the Ray cluster grpo-ui started for it, the secrets file
    #                                    ms-swift's Ray workers read


@dataclass
class Handle:
    """What a backend keeps of a started job to poll and stop it later, after a restart too: the job (the backend's
    id for it) and its run directory, and each backend's own (SshHandle, SlurmHandle). Stored with the job as JSON;
    ``to_json`` and ``Handle.from_json`` are the one place it is written and read, in the form the backends have
    always stored ({"backend": <its name>, ...}), so the rows of jobs launched before still load."""

    kinds: ClassVar[dict[str, type[Handle]]] = {}  # backend name → its Handle class
    backend: ClassVar[str]

    job: str
    run_dir: str

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        Handle.kinds[cls.backend] = cls

    def to_dict(self) -> dict:
        return {"backend": self.backend, **asdict(self)}

    @classmethod
    def from_dict(cls, data: dict) -> Handle:
        return cls(**data)

    def to_json(self) -> str:
        return json.dumps(self.to_dict())

    @staticmethod
    def from_json(text: str) -> Handle:
        data = json.loads(text)
        return Handle.kinds[data.pop("backend")].from_dict(data)


class Backend(ABC):
    """One way of running a job: ``grpo_ui.backends.ssh.SshBackend``, ``grpo_ui.backends.slurm.SlurmBackend``,
    ``grpo_ui.backends.ray.RayBackend``."""

    name: str
    places_nodes: bool = False  # the backend, not the spec, chooses each node's machine (known once it runs)

    def __init__(self, spec: JobSpec, pool: Pool | None = None):
        self.spec = spec
        self.pool = pool or Pool()  # SSH connections, shared with the caller's other work

    @abstractmethod
    def prepare(self, eff: Resolved, progress: Progress) -> tuple[list[HostFacts], list[Finding]]:
        """Preflight of the job (its effective values): facts about the machines, and what would make the job fail
        or wait as findings (errors block the start)."""

    @abstractmethod
    def start(self, plan: LaunchPlan, secrets: dict[str, str], progress: Progress,
              save: Callable[[Handle], None]) -> tuple[Handle, JobStatus]:
        """Start the job; returns its handle and its status once started. ``save(handle)`` is called whenever there
        is more to stop, so the service can stop a start that failed half-way or whose process died. Raises
        BackendError (or SshError)."""

    @abstractmethod
    def poll(self, handle: Handle) -> JobStatus:
        """The job's state now, per node. A node that failed says why and when."""

    @abstractmethod
    def stop(self, handle: Handle, grace: float = 10.0) -> dict[str, str]:
        """Stop whatever of the job runs and verify nothing of it is left; returns what happened per node (or job
        component). Raises BackendError when it cannot verify that."""

    @abstractmethod
    def runner(self, node: int) -> Runner:
        """A Runner that sees the node's files: the node itself, or a machine sharing its file system."""

    @abstractmethod
    def node_shell(self, handle: Handle, node: int, host: str) -> Runner:
        """A shell on the machine ``host`` that runs the node, with the job's environment there: the
        CUDA_VISIBLE_DEVICES its processes got. GPU telemetry and stack dumps run in it."""

    @abstractmethod
    def process_marker(self, handle: Handle, node: int) -> str:
        """An environment entry (NAME=value) every process of the node carries, and no other process."""

    @abstractmethod
    def launched_file(self, handle: Handle, node: int) -> str:
        """A file the start wrote where the node's files are: output newer than it belongs to this launch."""

    def job_log(self, handle: Handle) -> tuple[LogReader, str] | None:
        """The log of what runs the nodes, beside the nodes' own (Ray: the job's driver, through the Jobs API), as
        (read, path) for a LogTail; None when the job has none (SSH, Slurm)."""
        return None
