"""What a job's spec alone says about running it on Slurm (no cluster needed); the Slurm backend's preflight checks
the cluster itself."""

from __future__ import annotations

from grpo_ui.core.findings import Finding, finding
from grpo_ui.spec.model import JobSpec

NODE_LOCAL = ("/tmp", "/var/tmp", "/dev/shm", "/scratch/local")


def slurm_findings(spec: JobSpec) -> list[Finding]:
    """What the spec alone says about a Slurm job (no cluster needed)."""
    trainers = spec.trainer_nodes()
    if spec.cluster.backend != "slurm" or not trainers:
        return []
    gpus = len(trainers[0].gpus)
    out = [finding("SLURM-NODE-HOSTS", "info", "cluster.nodes",
                   f"Slurm picks the machines: the {len(trainers)} trainer node entries ask for {len(trainers)} "
                   f"node(s) with {gpus} GPU(s) each; their hosts, users and ports are not used.",
                   "List one trainer entry per node you want, each with the GPU ids a node gives the job.")]
    wanted = spec.slurm.gpus_per_node
    if wanted and wanted != gpus:
        out.append(finding("SLURM-GPUS-MISMATCH", "error", ("slurm.gpus_per_node", "cluster.nodes"),
                           f"Slurm would give each node {wanted} GPU(s) but NPROC_PER_NODE is {gpus} (the trainer "
                           "nodes' GPU ids); ms-swift needs one process per visible GPU.",
                           f"Clear slurm.gpus_per_node (it then asks for {gpus}), or give each trainer node "
                           f"{wanted} GPU ids.", {"slurm.gpus_per_node": None}))
    if spec.cluster.run_root.startswith(NODE_LOCAL):
        out.append(finding("SLURM-RUN-ROOT-LOCAL", "warning", "cluster.run_root",
                           f"run_root {spec.cluster.run_root} is usually local to each machine, but the login node "
                           "reads every node's log and exit code there.",
                           "Use a directory on a shared file system, e.g. ~/.grpo-ui/runs on a shared home."))
    return out
