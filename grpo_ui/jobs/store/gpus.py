"""The GPU telemetry the store keeps per job: nvidia-smi's samples of each GPU the job owns, and the processes
holding GPU memory on each host (the latest listing)."""

from __future__ import annotations

import sqlite3

from grpo_ui.jobs.store.database import Database, reads, writes
from grpo_ui.jobs.store.records import GpuProcess

SAMPLE_KEYS = ("host", "gpu_index", "ts", "util", "mem_used", "mem_total", "power", "power_limit", "temp", "sm_clock")


class GpuRecords(Database):
    @writes
    def add_gpu_samples(self, c: sqlite3.Connection, job_id: str | None, samples: list[dict]) -> None:
        """Samples as grpo_ui.backends.remote.gpu produces them (host, gpu_index, ts, util, mem_used, …)."""
        c.executemany("INSERT INTO gpu_samples VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                      [(job_id, *(s.get(k) for k in SAMPLE_KEYS)) for s in samples])

    @reads
    def gpu_samples(self, c: sqlite3.Connection, job_id: str, since: float = 0.0) -> list[dict]:
        return [dict(r) for r in c.execute("SELECT * FROM gpu_samples WHERE job_id = ? AND ts >= ? ORDER BY ts",
                                           (job_id, since))]

    @reads
    def sampled_gpus(self, c: sqlite3.Connection, job_id: str) -> dict[str, list[int]]:
        """host → the GPUs (indices, ascending) the job's samples came from."""
        out: dict[str, list[int]] = {}
        for host, gpu in c.execute("SELECT DISTINCT host, gpu_index FROM gpu_samples WHERE job_id = ? "
                                   "ORDER BY host, gpu_index", (job_id,)):
            out.setdefault(host, []).append(gpu)
        return out

    @writes
    def set_gpu_processes(self, c: sqlite3.Connection, job_id: str | None, snapshot: dict) -> None:
        """The processes holding GPU memory on one host now (a snapshot from grpo_ui.backends.remote.gpu), replacing
        the last."""
        c.execute("DELETE FROM gpu_processes WHERE job_id IS ? AND host = ?", (job_id, snapshot["host"]))
        c.executemany("INSERT INTO gpu_processes VALUES (?, ?, ?, ?, ?, ?, ?)",
                      [(job_id, snapshot["host"], p["gpu_index"], p["gpu_uuid"], p["pid"], p["used_mib"],
                        snapshot["ts"]) for p in snapshot["processes"]])

    @reads
    def gpu_processes(self, c: sqlite3.Connection, job_id: str) -> list[GpuProcess]:
        return [GpuProcess.of(r) for r in c.execute(
            "SELECT host, gpu_index, gpu_uuid, pid, used_mib, ts FROM gpu_processes WHERE job_id = ? "
            "ORDER BY host, gpu_index, used_mib DESC", (job_id,))]
