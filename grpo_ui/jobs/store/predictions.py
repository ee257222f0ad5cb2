"""What a job was launched with and what was measured against it: the memory estimate and the peaks its GPUs
reached, the step-time prediction (each, or why the job has none) and the pace measured."""

from __future__ import annotations

import json
import sqlite3
import time

from grpo_ui.jobs.store.database import Database, reads, writes
from grpo_ui.jobs.store.records import MemoryAtLaunch, MemoryPeak, TimeAtLaunch, Unavailable

PEAK_UPSERT = ("ON CONFLICT (job_id, host, gpu_index, source) DO UPDATE SET peak_gib = MAX(peak_gib, "
               "excluded.peak_gib), ts = excluded.ts")


class Predictions(Database):
    # memory: the estimate a job was launched with, and the peaks measured while it ran
    def set_memory_estimate(self, job_id: str, estimate: MemoryAtLaunch | Unavailable) -> None:
        self._put_prediction("memory_estimates", job_id, estimate)

    def memory_estimate(self, job_id: str) -> MemoryAtLaunch | Unavailable | None:
        """The estimate, why there was none, or None when nothing was kept (a job launched before grpo-ui kept
        estimates)."""
        return self._prediction("memory_estimates", job_id, MemoryAtLaunch)

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
    def memory_peaks(self, c: sqlite3.Connection, job_id: str) -> list[MemoryPeak]:
        return [MemoryPeak.of(r) for r in c.execute(
            "SELECT host, gpu_index, source, peak_gib, ts FROM memory_peaks WHERE job_id = ? "
            "ORDER BY host, gpu_index, source", (job_id,))]

    # step time: the prediction a job was launched with and its pace as measured
    def set_time_estimate(self, job_id: str, estimate: TimeAtLaunch | Unavailable) -> None:
        self._put_prediction("time_estimates", job_id, estimate)

    def time_estimate(self, job_id: str) -> TimeAtLaunch | Unavailable | None:
        """The prediction, why there was none, or None when nothing was kept (a job launched before grpo-ui
        predicted step times)."""
        return self._prediction("time_estimates", job_id, TimeAtLaunch)

    @writes
    def set_time_measured(self, c: sqlite3.Connection, job_id: str, measured: dict) -> None:
        """The job's pace as last measured (grpo_ui.jobs.time_loop.record_pace), replacing the one before."""
        c.execute("INSERT OR REPLACE INTO time_measured VALUES (?, ?, ?)", (job_id, json.dumps(measured), time.time()))

    @reads
    def time_measured(self, c: sqlite3.Connection, job_id: str) -> dict | None:
        row = c.execute("SELECT measured FROM time_measured WHERE job_id = ?", (job_id,)).fetchone()
        return json.loads(row[0]) if row else None

    # the predictions' tables: job_id, the prediction as JSON or why there is none, when it was kept
    @writes
    def _put_prediction(self, c: sqlite3.Connection, table: str, job_id: str,
                        kept: MemoryAtLaunch | TimeAtLaunch | Unavailable) -> None:
        document, why = (None, kept.why) if isinstance(kept, Unavailable) else (json.dumps(kept.document), None)
        c.execute(f"INSERT OR REPLACE INTO {table} VALUES (?, ?, ?, ?)", (job_id, document, why, time.time()))

    @reads
    def _prediction(self, c: sqlite3.Connection, table: str, job_id: str, kind: type):
        row = c.execute(f"SELECT estimate, unavailable FROM {table} WHERE job_id = ?", (job_id,)).fetchone()
        if row is None:
            return None
        return Unavailable(row["unavailable"]) if row["estimate"] is None else kind(json.loads(row["estimate"]))
