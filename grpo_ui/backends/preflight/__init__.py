"""Preflight: check every host in parallel before a launch, as findings (the same form as the validation rules)
plus one HostFacts record per node (facts.py: one probe per host; host.py: what the facts say; ports.py: the network
the job needs)."""

from __future__ import annotations

from grpo_ui.backends.preflight.facts import HostFacts, probe
from grpo_ui.backends.preflight.host import compat_findings, consistency, host_findings, py_spy_findings
from grpo_ui.backends.preflight.ports import port_checks
from grpo_ui.backends.remote.runner import parallel, runner_for
from grpo_ui.backends.remote.ssh import Pool, SshError, UnknownHostKey
from grpo_ui.core.findings import Finding, finding
from grpo_ui.spec.model import JobSpec
from grpo_ui.spec.resolve import Resolved, resolve

__all__ = ["HostFacts", "preflight"]


def preflight(job: JobSpec | Resolved, pool: Pool | None = None, progress=lambda host, msg: None
              ) -> tuple[list[HostFacts], list[Finding]]:
    """Check every node of a job (its spec or Resolved values) in parallel; returns per-node facts and findings."""
    eff = resolve(job)
    spec = eff.spec
    pool = pool or Pool()
    findings: list[Finding] = []

    def connect(i):
        progress(spec.cluster.nodes[i].host, "connecting")
        return runner_for(spec.cluster.nodes[i], pool)

    runners = {}
    facts: list[HostFacts] = []
    for i, r in parallel(connect, list(range(len(spec.cluster.nodes)))):
        node = spec.cluster.nodes[i]
        if isinstance(r, UnknownHostKey):
            findings.append(finding("PREFLIGHT-UNKNOWN-HOST-KEY", "error", f"cluster.nodes[{i}].host",
                                    f"{node.host} presented an unknown {r.key.get_name()} key {r.fingerprint}.",
                                    "Compare the fingerprint with `ssh-keygen -lf /etc/ssh/ssh_host_*_key.pub` on "
                                    "the machine, then trust it on the Cluster page."))
        elif isinstance(r, Exception):
            findings.append(finding("PREFLIGHT-UNREACHABLE", "error", f"cluster.nodes[{i}].host", str(r),
                                    "Check the host name, user, port and key of this node."))
        else:
            runners[i] = r
        facts.append(HostFacts(node.host, error=None if i in runners else str(r)))
    for i, res in parallel(lambda i: probe(spec, i, runners[i]), list(runners)):
        node = spec.cluster.nodes[i]
        if isinstance(res, Exception):
            facts[i].error = str(res)
            findings.append(finding("PREFLIGHT-UNREACHABLE", "error", f"cluster.nodes[{i}].host", str(res),
                                    "Check the connection to this node."))
            continue
        facts[i] = res
        progress(node.host, "checked")
        res.findings = host_findings(eff, i, res) + compat_findings(spec, i, res)
        findings += res.findings
    findings += consistency(spec, facts)
    findings += py_spy_findings(spec, runners, progress)
    try:
        findings += port_checks(eff, runners)
    except SshError as e:
        findings.append(finding("PREFLIGHT-UNREACHABLE", "error", "cluster.nodes", str(e), "Check the connection."))
    return facts, findings
