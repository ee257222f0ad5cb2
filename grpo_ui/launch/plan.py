"""The launch plan: a job assessed once before anything starts (grpo_ui.checks.assess: validation findings, the memory
estimate kept for the closed loop), the rendered bundle and each node's part in it, computed here, once; the Launch page and the CLI
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
from grpo_ui.knowledge.catalog import ModelArch, from_hf_config
from grpo_ui.launch.render import Bundle, render, run_dir, secrets_file
from grpo_ui.spec.model import JobSpec
from grpo_ui.spec.names import check_name
from grpo_ui.spec.resolve import Resolved


def assessment_at_launch(spec: JobSpec, arch: ModelArch | None = None,
                         read_config: Callable[[str], dict] | None = None) -> tuple[Assessment, dict]:
    """The job's assessment as it will run, and the memory estimate to keep with the job (MemoryReport.to_dict(), or
    {"error": why there is none}). A model neither the catalogue nor the caller (``arch``) knows is read from its
    config.json through ``read_config(model path)`` (on node 0, where the job runs), and only then assessed again."""
    a = assess(spec, arch)
    model = spec.train.model
    if a.memory is None and read_config is not None and model and a.resolved.arch is None:
        try:
            a = assess(spec, from_hf_config(read_config(model), model.rstrip("/").split("/")[-1]))
        except (ValueError, UserError) as node_error:  # not there, not JSON, or node 0 unreachable
            return a, {"error": f"{a.memory_error} On node 0: {node_error}"}
    return a, a.memory.to_dict() if a.memory else {"error": a.memory_error}


@dataclass(frozen=True)
class PlannedNode:
    """One entry of cluster.nodes and its script in the bundle."""

    index: int                              # in spec.cluster.nodes
    role: Literal["trainer", "rollout"]
    rank: int | None                        # NODE_RANK of a trainer
    host: str                               # as the spec names it (on Slurm the scheduler picks the machine)
    script: str                             # node_<rank>.sh or rollout_<k>.sh

    @property
    def log(self) -> str:
        return self.script.removesuffix(".sh") + ".log"

    @property
    def exit_file(self) -> str:
        k = self.script.removeprefix("rollout_").removesuffix(".sh")
        return f"exit_code.{self.rank}" if self.role == "trainer" else f"exit_code.rollout{k}"

    @property
    def secrets(self) -> str:
        return secrets_file(self.script)


@dataclass(frozen=True)
class LaunchPlan:
    job_id: str
    assessment: Assessment       # the job's values, findings and memory report, computed once for all of the below
    bundle: Bundle
    estimate: dict               # the memory estimate kept with the job: MemoryReport.to_dict(), or {"error": why}
    nodes: list[PlannedNode]     # trainers and rollout servers, in cluster.nodes order
    run_dir: str                 # the job's run directory on every node

    @property
    def spec(self) -> JobSpec:
        return self.assessment.spec

    @property
    def resolved(self) -> Resolved:
        return self.assessment.resolved

    @property
    def findings(self) -> list[Finding]:
        """Validation: ms-swift's rules, the command lines, memory, the backend's spec checks."""
        return self.assessment.findings

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == "error"]

    def role(self, role: str) -> list[PlannedNode]:
        return [n for n in self.nodes if n.role == role]


def make_plan(spec: JobSpec, job_id: str | None = None, arch=None,
              read_config: Callable[[str], dict] | None = None) -> LaunchPlan:
    """Resolve the job once. ``job_id`` defaults to <name>-<timestamp> (SpecError when it cannot name a directory);
    ``arch`` is a model architecture the user supplied; ``read_config`` reads the model's config.json where the job
    runs, for a model the catalogue lacks."""
    job_id = check_name(job_id or f"{spec.name}-{time.strftime('%Y%m%d-%H%M%S')}")
    a, estimate = assessment_at_launch(spec, arch, read_config)
    bundle = render(a, job_id)
    nodes, rank = [], 0
    for i, node in enumerate(spec.cluster.nodes):
        if i in bundle.node_files:
            nodes.append(PlannedNode(i, "trainer", rank, node.host, bundle.node_files[i]))
            rank += 1
        elif i in bundle.rollout_files:
            nodes.append(PlannedNode(i, "rollout", None, node.host, bundle.rollout_files[i]))
    return LaunchPlan(job_id, a, bundle, estimate, nodes, run_dir(spec, job_id))
