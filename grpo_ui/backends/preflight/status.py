"""What the Cluster page says about each host: the worst of its latest connection test and its latest preflight,
and whether either was made on a cluster that has changed since (stale: kept, and marked so)."""

from __future__ import annotations

from dataclasses import dataclass, field

from grpo_ui.backends.preflight.facts import HostFacts
from grpo_ui.checks.steps import HostCheck
from grpo_ui.core.findings import Finding
from grpo_ui.spec.cluster import Node
from grpo_ui.spec.model import JobSpec
from grpo_ui.spec.yaml_io import spec_to_yaml

CONNECTION = ("host", "user", "port", "identity_file", "address")  # what a connection test depends on


def connection_of(node: Node) -> dict:
    return node.model_dump(include=set(CONNECTION))


@dataclass(frozen=True)
class ConnectionTest:
    """A connection test of one node: ok, refused (detail: why) or an unknown host key (ok None)."""

    ok: bool | None
    detail: str
    node: dict  # the node's connection settings when tested


@dataclass(frozen=True)
class PreflightRun:
    """One preflight: its facts (one per node, in cluster order; none on Slurm), findings, and the spec it checked."""

    facts: list[HostFacts]
    findings: list[Finding]
    spec_yaml: str
    nodes: list[dict] = field(default_factory=list)

    @classmethod
    def of(cls, spec: JobSpec, facts: list[HostFacts], findings: list[Finding]) -> PreflightRun:
        return cls(facts, findings, spec_to_yaml(spec), [connection_of(n) | {"role": n.role, "gpus": n.gpus}
                                                          for n in spec.cluster.nodes])

    def stale(self, spec: JobSpec) -> str | None:
        """Why this run no longer describes ``spec`` (None: it does)."""
        if [connection_of(n) | {"role": n.role, "gpus": n.gpus} for n in spec.cluster.nodes] != self.nodes:
            return "the hosts changed since this preflight"
        if spec_to_yaml(spec) != self.spec_yaml:
            return "the draft changed since this preflight"
        return None


@dataclass(frozen=True)
class HostStatus:
    check: HostCheck
    text: str  # the status column: ✓ / ⚠ / ✗ / ? and what says so


def _node_findings(run: PreflightRun, index: int, facts: HostFacts | None) -> list[Finding]:
    """The findings of one node: the ones its facts produced, and those naming its fields (ports, py-spy)."""
    mine = f"cluster.nodes[{index}]"
    named = [f for f in run.findings if any(p == mine or p.startswith((f"{mine}.", f"{mine}[")) for p in f.fields)]
    return list(dict.fromkeys([*(facts.findings if facts else []), *named]))


def host_status(spec: JobSpec, index: int, test: ConnectionTest | None, run: PreflightRun | None) -> HostStatus:
    """The worst of node ``index``'s latest connection test and preflight; a result made on other settings than
    the node's now is stale (shown, marked)."""
    node = spec.cluster.nodes[index]
    if test is not None and test.node != connection_of(node):
        test = None  # tested under other settings: says nothing about this node now
    stale = run.stale(spec) if run is not None else None
    facts = run.facts[index] if run is not None and not stale and index < len(run.facts) else None
    found = _node_findings(run, index, facts) if run is not None and not stale else []
    if test is not None and test.ok is not True:
        return HostStatus("failed", "✗ " + (test.detail if test.ok is False else "unknown host key: trust it below"))
    if facts is not None and facts.error:
        return HostStatus("failed", f"✗ preflight: {facts.error}")
    errors = [f for f in found if f.severity == "error"]
    if errors:
        return HostStatus("failed", f"✗ preflight: {errors[0].id}: {errors[0].message}" + (
            f" (+{len(errors) - 1} more)" if len(errors) > 1 else ""))
    if stale and run is not None and run.facts:
        return HostStatus("stale", f"? {stale}: run it again" + (" (connection ✓)" if test else ""))
    warnings = [f for f in found if f.severity == "warning"]
    if facts is not None and warnings:
        return HostStatus("warning", f"⚠ preflight: {warnings[0].id}: {warnings[0].message}")
    if facts is not None:
        return HostStatus("passed", "✓ preflight passed")
    if test is not None:
        return HostStatus("passed", "✓ reached")
    return HostStatus("untested", "")


def cluster_checks(spec: JobSpec, tests: dict[str, ConnectionTest], run: PreflightRun | None) -> dict[str, HostCheck]:
    """Each host's check for the step indicator. On Slurm the nodes' hosts are not used: the login node stands for
    the cluster, checked by the Slurm preflight."""
    if spec.cluster.backend == "slurm":
        if run is None:
            return {spec.cluster.login: "untested"}
        if run.stale(spec):
            return {spec.cluster.login: "stale"}
        worst = "failed" if any(f.severity == "error" for f in run.findings) else "passed"
        return {spec.cluster.login: worst}
    return {n.host: host_status(spec, i, tests.get(n.host), run).check for i, n in enumerate(spec.cluster.nodes)}
