"""What a job was launched with and what was measured against it: the memory estimate and the peaks its GPUs
reached, the step-time prediction and the pace measured — one JSON document per job for each of the three
documents (job id, the document, when it was written)."""

from __future__ import annotations

import json
import sqlite3
import time

from grpo_ui.jobs.store.database import Database, reads, writes

PEAK_UPSERT = ("ON CONFLICT (job_id, host, gpu_index, source) DO UPDATE SET peak_gib = MAX(peak_gib, "
               "excluded.peak_gib), ts = excluded.ts")


class Predictions(Database):
    # memory: the estimate a job was launched with, and the peaks measured while it ran
    def set_memory_estimate(self, job_id: str, estimate: dict) -> None:
        self._put_document("memory_estimates", job_id, estimate)

    def memory_estimate(self, job_id: str) -> dict | None:
        return self._document("memory_estimates", "estimate", job_id)

    @writes
    def update_memory_peaks(self, c: sqlite3.Connection, job_id: str, rank0: tuple[str, int] | None) -> None:
        """Raise the stored peaks to what the samples show: nvidia-smi's used memory per GPU (gpu_samples, MiB) and
        rank 0's logged memory(GiB) (the metrics; ms-swift logs it on global rank 0 only) on ``rank0`` (host, GPU)."""
        now = time.time()
        c.execute("INSERT INTO memory_peaks SELECT job_id, host, gpu_index, 'nvidia-smi', MAX(mem_used) / 1024.0, ? "
                  "FROM gpu_samples WHERE job_id = ? AND mem_used IS NOT NULL GROUP BY host, gpu_index " + PEAK_UPSERT,
                  (now, job_id))
        if rank0:
            c.execute("INSERT INTO memory_peaks SELECT job_id, ?, ?, 'memory(GiB)', MAX(value), ? FROM metrics "
                      "WHERE job_id = ? AND key = 'memory(GiB)' AND value IS NOT NULL GROUP BY job_id " + PEAK_UPSERT,
                      (*rank0, now, job_id))

    @reads
    def memory_peaks(self, c: sqlite3.Connection, job_id: str) -> list[dict]:
        return [dict(r) for r in c.execute(
            "SELECT host, gpu_index, source, peak_gib, ts FROM memory_peaks WHERE job_id = ? "
            "ORDER BY host, gpu_index, source", (job_id,))]

    # step time: the prediction a job was launched with (timing's dict, or {"error": why}) and its measured pace
    def set_time_estimate(self, job_id: str, estimate: dict) -> None:
        self._put_document("time_estimates", job_id, estimate)

    def time_estimate(self, job_id: str) -> dict | None:
        return self._document("time_estimates", "estimate", job_id)

    def set_time_measured(self, job_id: str, measured: dict) -> None:
        """The job's pace as last measured (doctor.pace.Pace.to_dict()), replacing the one before."""
        self._put_document("time_measured", job_id, measured)

    def time_measured(self, job_id: str) -> dict | None:
        return self._document("time_measured", "measured", job_id)

    @writes
    def _put_document(self, c: sqlite3.Connection, table: str, job_id: str, document: dict) -> None:
        c.execute(f"INSERT OR REPLACE INTO {table} VALUES (?, ?, ?)", (job_id, json.dumps(document), time.time()))

    @reads
    def _document(self, c: sqlite3.Connection, table: str, column: str, job_id: str) -> dict | None:
        row = c.execute(f"SELECT {column} FROM {table} WHERE job_id = ?", (job_id,)).fetchone()
        return json.loads(row[0]) if row else None
