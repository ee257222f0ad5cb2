"""The launch plan: a job resolved once before anything starts. Validation findings, the memory estimate and the
step-time prediction kept for the closed loop, the rendered bundle and each node's part in it are computed here, once; the Launch page and the CLI
show the plan and launch exactly it, and the backend receives it and does only backend work (no re-validation, no
re-estimate, no make-it-fit search).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from grpo_ui.checks.check import check
from grpo_ui.core.errors import UserError
from grpo_ui.core.findings import Finding
from grpo_ui.knowledge import hub
from grpo_ui.knowledge.catalog import from_hf_config
from grpo_ui.launch.render import Bundle, render, run_dir, secrets_file
from grpo_ui.memory.estimate import estimate_spec
from grpo_ui.memory.report import UnknownModel
from grpo_ui.spec.model import JobSpec
from grpo_ui.spec.names import check_name
from grpo_ui.spec.resolve import Resolved, resolve
from grpo_ui.timing.predict import predict_spec


def estimate_at_launch(job: JobSpec | Resolved, read_config=None) -> dict:
    """The estimate to store with a launch (MemoryReport.to_dict()). A model neither the catalogue nor the caller
    (``resolve(spec, arch)``) knows is read from its config.json through ``read_config(model path)`` (on node 0,
    where the job runs); what still fails is stored as {"error": …}."""
    eff = resolve(job)
    try:
        return estimate_spec(eff).to_dict()
    except UnknownModel as e:
        if read_config is None:
            return {"error": str(e)}
        model = eff.spec.train.model
        try:
            arch = from_hf_config(read_config(model), model.rstrip("/").split("/")[-1])
            return estimate_spec(resolve(eff, arch)).to_dict()
        except (ValueError, UserError) as node_error:  # not there, not JSON, or node 0 unreachable
            return {"error": f"{e} On node 0: {node_error}"}
    except ValueError as e:  # an unknown GPU, an unreadable DeepSpeed/FSDP config
        return {"error": str(e)}


def time_at_launch(job: JobSpec | Resolved) -> dict:
    """The step-time prediction to store with a launch: the CLI's ``time`` object (TimeReport.to_dict()) with its
    assumptions, or {"error": why there is none} (no GPU speed facts, an unknown model)."""
    try:
        report = predict_spec(job)
    except ValueError as e:
        return {"error": str(e)}
    return {**report.to_dict(), "assumptions": report.assumptions}


def _with_hub_arch(eff: Resolved) -> Resolved:
    """A hub id the catalogue lacks gets its architecture from the job's hub (cached); when the hub cannot give it,
    node 0's config.json may (estimate_at_launch)."""
    if eff.arch is not None:
        return eff
    try:
        return resolve(eff, hub.lookup(eff.spec.train.model, eff.use_hf))
    except hub.HubError:
        return eff


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
    spec: JobSpec
    resolved: Resolved           # the job's effective values, computed once for all of the below
    bundle: Bundle
    findings: list[Finding]      # validation (ms-swift's rules, render, memory, the backend's spec checks)
    estimate: dict               # MemoryReport.to_dict(), or {"error": why there is none}
    time: dict                   # the step-time prediction (time_at_launch), or {"error": why there is none}
    nodes: list[PlannedNode]     # trainers and rollout servers, in cluster.nodes order
    run_dir: str                 # the job's run directory on every node

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
    eff = _with_hub_arch(resolve(spec, arch))
    bundle = render(eff, job_id)
    nodes, rank = [], 0
    for i, node in enumerate(spec.cluster.nodes):
        if i in bundle.node_files:
            nodes.append(PlannedNode(i, "trainer", rank, node.host, bundle.node_files[i]))
            rank += 1
        elif i in bundle.rollout_files:
            nodes.append(PlannedNode(i, "rollout", None, node.host, bundle.rollout_files[i]))
    return LaunchPlan(job_id, spec, eff, bundle, check(eff), estimate_at_launch(eff, read_config),
                      time_at_launch(eff), nodes, run_dir(spec, job_id))
