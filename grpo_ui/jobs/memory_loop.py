"""The memory estimate's closed loop: the estimate a job was launched with, the peak each of its GPUs reached
(nvidia-smi's used memory per GPU, ms-swift's logged memory(GiB) from the rank that logs: Resolved.logging_rank), side by side, and those pairs written as
calibration rows (the format of tests/data/memory_measurements.jsonl) so users can contribute them."""

from __future__ import annotations

import time

from grpo_ui.jobs.specs import job_spec
from grpo_ui.jobs.store import MemoryAtLaunch, RoleAtLaunch, Store, Unavailable
from grpo_ui.spec.model import JobSpec
from grpo_ui.spec.resolve import Resolved, resolve

EXPORTED = "grpo-ui export"  # the calibration rows' 'added' value


def placement(store: Store, job_id: str, spec: JobSpec) -> dict[int, tuple[str, list[int]]]:
    """Nodes whose machine the backend chose (Slurm) and whose GPUs were sampled there: node index → (host, the GPUs
    sampled there in index order, i.e. the allocation's). Nodes on the spec's own hosts are not listed."""
    sampled = store.sampled_gpus(job_id)
    return {n.node_index: (n.host, sampled[n.host]) for n in store.nodes(job_id)
            if n.host != spec.cluster.nodes[n.node_index].host and n.host in sampled}


def gpu_roles(job: JobSpec | Resolved, placed: dict[int, tuple[str, list[int]]] | None = None
              ) -> dict[tuple[str, int], tuple[str, int | None]]:
    """(host, GPU index) → (role, global rank) for every GPU the job (its spec or Resolved values) uses: trainer GPUs
    in torchrun's rank order (node rank × processes per node + local rank; Ray mode: Resolved.node_order's); vLLM's own GPUs (rollout nodes, ms-swift
    3.2–3.4's spare GPUs) have no rank. ``placed``: where the backend put nodes (``placement``)."""
    eff = resolve(job)
    out: dict[tuple[str, int], tuple[str, int | None]] = {}
    place = {rank: k for k, rank in enumerate(eff.node_order)}  # Ray mode: ms-swift's order, else NODE_RANK's
    ranks = {i: place[rank] for rank, (i, _) in enumerate(eff.spec.numbered("trainer"))}
    for i, node in enumerate(eff.spec.cluster.nodes):
        host, gpus = (placed or {}).get(i, (node.host, node.gpus))
        for local, gpu in enumerate(gpus):
            trainer = i in ranks and local < eff.nproc_per_node
            out[(host, gpu)] = ("trainer", ranks[i] * eff.nproc_per_node + local) if trainer else ("rollout", None)
    return out


def record_peaks(store: Store, job_id: str, job: JobSpec | Resolved) -> None:
    """Raise the job's stored peaks to its latest samples (ms-swift logs memory(GiB) on the logging rank's GPU: swift
    rlhf's rank 0, node 0's first GPU; megatron rlhf's last rank, the last node's last GPU, the most any GPU of its
    model-parallel group reserved)."""
    eff = resolve(job)
    roles = gpu_roles(eff, placement(store, job_id, eff.spec))
    writer = next(((host, gpu) for (host, gpu), (_, rank) in roles.items() if rank == eff.logging_rank), None)
    store.update_memory_peaks(job_id, writer)


def comparison(store: Store, job_id: str, job: JobSpec | Resolved) -> list[dict]:
    """One row per GPU of the job (its spec or Resolved values): its role and rank, the estimate's peak for that role
    (what must fit) and what nvidia-smi should show (with torch's cache), and the measured peaks."""
    eff = resolve(job)
    est = store.memory_estimate(job_id)
    peaks = {(p.host, p.gpu_index, p.source): p.peak_gib for p in store.memory_peaks(job_id)}
    rows = []
    for (host, gpu), (role, rank) in gpu_roles(eff, placement(store, job_id, eff.spec)).items():
        r = est.role(role) if isinstance(est, MemoryAtLaunch) else None
        rows.append({"host": host, "GPU": gpu, "role": role, "rank": rank, "estimated peak GiB": r and r.peak_gib,
                     "expected on nvidia-smi GiB": r and r.expected_gib,
                     "nvidia-smi peak GiB": _round(peaks.get((host, gpu, "nvidia-smi"))),
                     "memory(GiB) logged": _round(peaks.get((host, gpu, "memory(GiB)")))})
    return rows


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 2)


def _config(spec: JobSpec) -> dict:
    """A spec's training and rollout settings that differ from the defaults (and whether and how it uses vLLM), with
    its layout, as a calibration row's config."""
    nodes = spec.trainer_nodes()
    cfg = {"swift_version": spec.swift_version, **spec.train.model_dump(mode="json", exclude_defaults=True),
           **spec.rollout.model_dump(mode="json", exclude_defaults=True),
           # always said: a calibration row that names no vLLM setting is read as colocated vLLM
           "use_vllm": spec.rollout.use_vllm, "vllm_mode": spec.rollout.vllm_mode,
           "nodes": len(nodes), "gpus_per_node": len(nodes[0].gpus) if nodes else 1}
    if spec.env:
        cfg["env"] = dict(spec.env)
    return cfg


def export_rows(store: Store, job_ids: list[str]) -> list[dict]:
    """Calibration rows for the jobs' trainer GPUs: the highest nvidia-smi peak (compare 'peak') and the logging
    rank's memory(GiB) (compare 'torch'), each with the estimate the job was launched with."""
    out = []
    for job_id in job_ids:
        job = store.job(job_id)
        if not job:
            continue
        eff = job_spec(job)
        spec = eff.spec
        record_peaks(store, job_id, eff)
        est = store.memory_estimate(job_id)
        trainer = (est.role("trainer") if isinstance(est, MemoryAtLaunch) else None) or RoleAtLaunch("trainer", None,
                                                                                                   None, None)
        ranks = {key for key, (role, _) in gpu_roles(eff, placement(store, job_id, spec)).items() if role == "trainer"}
        peaks = [p for p in store.memory_peaks(job_id) if (p.host, p.gpu_index) in ranks]
        launched = time.strftime("%Y-%m-%d", time.localtime(job.started or job.created))
        node0 = spec.trainer_nodes()[0]
        base = {"kind": "grpo", "workload": "grpo", "config": _config(spec), "gpu": node0.gpu_model,
                "source": f"grpo-ui job {job_id} on {', '.join(n.host for n in spec.trainer_nodes())}, launched "
                          f"{launched} (exported from its store)", "added": EXPORTED,
                "estimated_gib": trainer.peak_gib, "expected_gib": trainer.expected_gib}
        verdict = est.why if isinstance(est, Unavailable) else f"grpo-ui {trainer.verdict}"
        note = (f"Estimate at launch: {trainer.peak_gib} GiB needed, {trainer.expected_gib} GiB expected on "
                f"nvidia-smi ({verdict}). Sequence lengths are the job's limits; the longest batch of the run may "
                "have been shorter.")
        smi = [p for p in peaks if p.source == "nvidia-smi"]
        if smi:
            top = max(smi, key=lambda p: p.peak_gib)
            out.append({**base, "id": f"grpoui-{job_id}-nvidia-smi", "measured_gib": round(top.peak_gib, 3),
                        "unit": "MiB", "measures": f"nvidia-smi memory.used, highest of {len(smi)} trainer GPU(s) "
                        f"({top.host} GPU {top.gpu_index})", "compare": "peak", "notes": note})
        torch = [p for p in peaks if p.source == "memory(GiB)"]
        if torch:
            out.append({**base, "id": f"grpoui-{job_id}-memory", "measured_gib": round(torch[0].peak_gib, 3),
                        "unit": "GiB", "measures": "memory(GiB) (torch max_memory_reserved) of global rank "
                        f"{eff.logging_rank}",
                        "compare": "torch", "notes": note})
    return out
