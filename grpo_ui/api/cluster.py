"""The machines' side of the door: the hosts of ~/.ssh/config, a connection test with explicit host-key trust, the
backend's preflight, and what the latest checks say about each host of a spec (the Cluster page's status column,
Configure's step indicator)."""

from __future__ import annotations

from collections.abc import Callable

import paramiko

from grpo_ui.backends.preflight import HostFacts
from grpo_ui.backends.preflight.status import (
    ConnectionTest,
    HostStatus,
    PreflightRun,
    cluster_checks,
    connection_of,
    host_status,
)
from grpo_ui.backends.ray import dashboard_address, ray_where
from grpo_ui.backends.remote.ssh import Pool, SshError, UnknownHostKey, ssh_config_path, trust_host_key
from grpo_ui.checks.steps import HostCheck
from grpo_ui.jobs.service import preflight, where
from grpo_ui.spec.cluster import Node
from grpo_ui.spec.model import JobSpec

__all__ = ["ConnectionTest", "HostCheck", "HostFacts", "HostStatus", "Pool", "PreflightRun", "UnknownHostKey",
           "check_connection", "cluster_checks", "connection_of", "dashboard_address", "facts_row", "host_status",
           "preflight", "ray_where", "ssh_hosts", "trust_host_key", "trust_unknown_keys", "where"]


def ssh_hosts() -> dict[str, str]:
    """The aliases of ~/.ssh/config (no patterns) and the host name each stands for."""
    path = ssh_config_path()
    if not path.exists():
        return {}
    config = paramiko.SSHConfig.from_path(str(path))
    return {h: config.lookup(h).get("hostname", h) for h in sorted(config.get_hostnames()) if not set(h) & set("*?!")}


def check_connection(pool: Pool, node: Node) -> tuple[ConnectionTest, UnknownHostKey | None]:
    """Log in to the node's host and run `hostname && uptime`: passed (its output), failed (why), or an unknown
    host key to show before trusting it (``ok`` None, the key's fingerprint; the key to trust is returned)."""
    try:
        res = pool.get(node.host, node.user, node.port, node.identity_file).run("hostname && uptime", 15)
        return ConnectionTest(True, res.out.strip(), connection_of(node)), None
    except UnknownHostKey as e:
        return ConnectionTest(None, e.fingerprint, connection_of(node)), e
    except SshError as e:
        return ConnectionTest(False, str(e), connection_of(node)), None


def trust_unknown_keys(spec: JobSpec, pool: Pool, say: Callable[[str], None]) -> None:
    """Add the host keys of the spec's machines (on Slurm its login node) that known_hosts lacks, each after saying
    its fingerprint; a machine that cannot be reached is left to preflight to report."""
    for node in [Node(host=spec.cluster.login)] if spec.cluster.backend == "slurm" else spec.cluster.nodes:
        if node.is_local:
            continue
        try:
            pool.get(node.host, node.user, node.port, node.identity_file)
        except UnknownHostKey as e:
            say(f"trusting {node.host}: {e.key.get_name()} {e.fingerprint}")
            trust_host_key(e.hostname, e.port, e.key)
        except Exception:  # noqa: BLE001 - preflight reports it properly
            pass


def facts_row(f: HostFacts, backend: str = "ssh") -> dict:
    """A host's preflight facts as a table row: "—" for what is not known, "not reached" for its GPUs when preflight
    could not reach it (not "none", which says it has no GPU). On the Ray backend also the node environment's Ray
    and, on a running cluster, the GPUs and CPUs Ray counts on the node."""
    gpus = ", ".join(f"{g['gpu_index']}: {g['name']} ({g['mem_used']:.0f}/{g['mem_total']:.0f} MiB)" for g in f.gpus)
    counted = f.ray_resources
    ray = {"ray": f.versions.get("ray"),
           "Ray GPU / CPU": f"{counted['GPU']:g} / {counted['CPU']:g}" if counted else None} if backend == "ray" else {}
    row = {"host": f.host, "python": f.python, "ms-swift": f.versions.get("ms-swift"), "torch": f.versions.get("torch"),
           "vllm": f.versions.get("vllm"), **ray, "driver": f.driver,
           "CUDA driver / torch": f"{f.driver_cuda or '—'} / {f.torch_cuda or 'CPU build'}" if f.python else None,
           "GPUs": gpus or ("none" if f.reachable else "not reached"),
           "disk free GiB": None if f.disk_free_gib is None else f"{f.disk_free_gib:.0f}"}
    return {k: "—" if v is None else v for k, v in row.items()} | {"error": f.error or ""}
