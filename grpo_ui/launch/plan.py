"""The launch plan: a job assessed once before anything starts (grpo_ui.checks.assess: validation findings, the memory
estimate and the step-time prediction kept for the closed loop), the rendered bundle and each node's part in it,
computed here, once; the Launch page and the CLI
show the plan and launch exactly it, and the backend receives it and does only backend work (no re-validation, no
re-estimate, no make-it-fit search).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from grpo_ui.checks.assess import Assessment, assess
from grpo_ui.core.errors import UserError
from grpo_ui.core.findings import Finding
from grpo_ui.knowledge import hub
from grpo_ui.knowledge.catalog import ModelArch, from_hf_config
from grpo_ui.launch.render import Bundle, render, run_dir
from grpo_ui.launch.runfiles import NodeFiles
from grpo_ui.spec.model import JobSpec
from grpo_ui.spec.names import check_name
from grpo_ui.spec.resolve import Resolved, resolve

DRIVER = -1  # the number of a job's driver (what runs the nodes: a Ray job's) among its nodes, its log's in the store


def default_job_id(spec: JobSpec) -> str:
    """A job's id when the user names none: <name>-<YYYYmmdd-HHMMSS> (it names the job's run directory)."""
    return f"{spec.name}-{time.strftime('%Y%m%d-%H%M%S')}"


def assessment_at_launch(spec: JobSpec, arch: ModelArch | None = None,
                         read_config: Callable[[str], dict] | None = None) -> tuple[Assessment, dict]:
    """The job's assessment as it will run, and the memory estimate to keep with the job (MemoryReport.to_dict(), or
    {"error": why there is none}). A model neither the catalogue nor the caller (``arch``) knows is read from its
    config.json on the job's hub (cached), else through ``read_config(model path)`` (on node 0, where the job runs),
    and only then assessed again."""
    model = spec.train.model
    if arch is None and model and (eff := resolve(spec)).arch is None:
        try:
            arch = hub.lookup(model, eff.use_hf)
        except hub.HubError:  # offline, gated, or not on the hub: node 0 may have it
            pass
    a = assess(spec, arch)
    if a.memory is None and read_config is not None and model and a.resolved.arch is None:
        try:
            a = assess(spec, from_hf_config(read_config(model), model.rstrip("/").split("/")[-1]))
        except (ValueError, UserError) as node_error:  # not there, not JSON, or node 0 unreachable
            return a, {"error": f"{a.memory_error} On node 0: {node_error}"}
    return a, a.memory.to_dict() if a.memory else {"error": a.memory_error}


def time_at_launch(a: Assessment) -> dict:
    """The step-time prediction kept with a launch: the CLI's ``time`` object (TimeReport.to_dict()) with its
    assumptions, or {"error": why there is none} (no GPU speed facts, an unknown model)."""
    if a.time is None:
        return {"error": a.time_error}
    return {**a.time.to_dict(), "assumptions": a.time.assumptions}


@dataclass(frozen=True)
class PlannedNode:
    """One entry of cluster.nodes and its files in the run directory (its script from the bundle; in ms-swift's Ray
    mode it has none: Ray starts the roles' workers there, and its files are the secrets file they read)."""

    index: int                              # in spec.cluster.nodes
    files: NodeFiles                        # its role and number (a trainer's NODE_RANK), and so its files' names
    host: str                               # as the spec names it (on Slurm the scheduler picks the machine)

    @property
    def role(self) -> Literal["trainer", "rollout"]:
        return self.files.role

    @property
    def rank(self) -> int | None:
        """NODE_RANK of a trainer."""
        return self.files.number if self.role == "trainer" else None

    @property
    def script(self) -> str:
        return self.files.script

    @property
    def log(self) -> str:
        return self.files.log

    @property
    def secrets(self) -> str:
        return self.files.secrets


@dataclass(frozen=True)
class LaunchPlan:
    job_id: str
    assessment: Assessment       # the job's values, findings and memory report, computed once for all of the below
    bundle: Bundle
    estimate: dict               # the memory estimate kept with the job: MemoryReport.to_dict(), or {"error": why}
    nodes: list[PlannedNode]     # trainers and rollout servers, in cluster.nodes order (ms-swift's Ray mode: the
    #                              nodes Ray places its roles on, each without a script of its own; bundle.ray runs)
    run_dir: str                 # the job's run directory on every node

    @property
    def spec(self) -> JobSpec:
        return self.assessment.spec

    @property
    def resolved(self) -> Resolved:
        return self.assessment.resolved

    @property
    def time(self) -> dict:
        """The step-time prediction kept with the job (time_at_launch)."""
        return time_at_launch(self.assessment)

    @property
    def findings(self) -> list[Finding]:
        """Validation: ms-swift's rules, the command lines, memory, the backend's spec checks."""
        return self.assessment.findings

    @property
    def errors(self) -> list[Finding]:
        """The errors that hold the launch (Assessment.blocked) unless overridden with a reason."""
        return self.assessment.errors

    def role(self, role: str) -> list[PlannedNode]:
        return [n for n in self.nodes if n.role == role]


def make_plan(spec: JobSpec, job_id: str | None = None, arch=None,
              read_config: Callable[[str], dict] | None = None) -> LaunchPlan:
    """Resolve the job once. ``job_id`` defaults to default_job_id (SpecError when it cannot name a directory);
    ``arch`` is a model architecture the user supplied; ``read_config`` reads the model's config.json where the job
    runs, for a model the catalogue lacks."""
    job_id = check_name(job_id or default_job_id(spec))
    a, estimate = assessment_at_launch(spec, arch, read_config)
    bundle = render(a, job_id)
    if bundle.ray:  # one driver (bundle.ray) and no script per node: Ray places the roles on the cluster's nodes
        files = {i: NodeFiles(role, k) for role in ("trainer", "rollout") for k, (i, _) in enumerate(spec.numbered(role))}
    else:
        files = {i: NodeFiles.of_script(script) for i, script in {**bundle.node_files, **bundle.rollout_files}.items()}
    nodes = [PlannedNode(i, files[i], node.host) for i, node in enumerate(spec.cluster.nodes) if i in files]
    return LaunchPlan(job_id, a, bundle, estimate, nodes, run_dir(spec, job_id))
