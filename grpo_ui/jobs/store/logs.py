"""What a job wrote, as the store keeps it: the read offset of each file followed (advanced compare-and-set), a
window of each node's log, the metrics rank 0 logged, the sampled completions, and the doctor's alerts on them."""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager

from grpo_ui.jobs.store.database import Database, reads, writes
from grpo_ui.jobs.store.records import LogLine, StoredAlert


class LogRecords(Database):
    @reads
    def offset(self, c: sqlite3.Connection, job_id: str, node_index: int, path: str) -> int:
        row = c.execute("SELECT offset FROM log_offsets WHERE job_id = ? AND node_index = ? AND path = ?",
                        (job_id, node_index, path)).fetchone()
        return row[0] if row else 0

    @contextmanager
    def claim(self, job_id: str, node_index: int, path: str, old: int, new: int) -> Iterator[bool]:
        """Compare-and-set of a file's read offset: yields True when it was still ``old`` (it is now ``new``, and the
        block's writes — the lines read between the two — commit with it), False when another watcher moved it
        first (it stored those lines; the block must write nothing)."""
        with self.transaction() as c:
            if self.offset(job_id, node_index, path) != old:
                yield False
                return
            c.execute("INSERT OR REPLACE INTO log_offsets VALUES (?, ?, ?, ?)", (job_id, node_index, path, new))
            yield True

    @writes
    def add_log_lines(self, c: sqlite3.Connection, job_id: str, node_index: int, lines: list[str],
                      keep: int = 5000) -> None:
        """Append lines to the node's window, keeping the last ``keep`` (the full log stays on the node)."""
        if not lines:
            return
        now = time.time()
        last = c.execute("SELECT COALESCE(MAX(seq), 0) FROM log_lines WHERE job_id = ? AND node_index = ?",
                         (job_id, node_index)).fetchone()[0]
        c.executemany("INSERT INTO log_lines VALUES (?, ?, ?, ?, ?)",
                      [(job_id, node_index, last + k + 1, t, now) for k, t in enumerate(lines)])
        c.execute("DELETE FROM log_lines WHERE job_id = ? AND node_index = ? AND seq <= ?",
                  (job_id, node_index, last + len(lines) - keep))

    @reads
    def log_lines(self, c: sqlite3.Connection, job_id: str, node_index: int, last: int = 200,
                  contains: str | None = None) -> list[LogLine]:
        """The last ``last`` lines of the window, optionally only those containing a string."""
        sql = "SELECT seq, text, ts FROM log_lines WHERE job_id = ? AND node_index = ?"
        args: list = [job_id, node_index]
        if contains:
            sql += " AND instr(text, ?) > 0"
            args.append(contains)
        rows = c.execute(sql + " ORDER BY seq DESC LIMIT ?", (*args, last)).fetchall()
        return [LogLine(*r) for r in reversed(rows)]

    @writes
    def add_metrics(self, c: sqlite3.Connection, job_id: str, step: int, values: dict[str, float],
                    ts: float | None = None) -> bool:
        """Store one logged step; a step stored before (from stdout, then from logging.jsonl) gets the new values
        and keeps its first time. True when the step is new."""
        ts = ts or time.time()
        known = c.execute("SELECT 1 FROM metrics WHERE job_id = ? AND step = ? LIMIT 1", (job_id, step)).fetchone()
        c.executemany("INSERT INTO metrics VALUES (?, ?, ?, ?, ?) ON CONFLICT (job_id, step, key) DO UPDATE "
                      "SET value = excluded.value", [(job_id, step, k, v, ts) for k, v in values.items()])
        return known is None

    @reads
    def metrics(self, c: sqlite3.Connection, job_id: str,
                keys: tuple[str, ...] | None = None) -> dict[str, list[tuple[int, float]]]:
        """key → [(step, value)] in step order; every key, or only ``keys``."""
        sql, args = "SELECT step, key, value FROM metrics WHERE job_id = ?", [job_id]
        if keys is not None:
            sql += f" AND key IN ({', '.join('?' * len(keys))})"
            args += keys
        out: dict[str, list[tuple[int, float]]] = {}
        for r in c.execute(sql + " ORDER BY step", args):
            out.setdefault(r["key"], []).append((r["step"], r["value"]))
        return out

    @reads
    def step_times(self, c: sqlite3.Connection, job_id: str) -> list[tuple[int, float]]:
        """(step, when it was first stored) of every logged step, in step order."""
        return [tuple(r) for r in c.execute(
            "SELECT step, MIN(ts) FROM metrics WHERE job_id = ? GROUP BY step ORDER BY step", (job_id,))]

    @writes
    def add_completions(self, c: sqlite3.Connection, job_id: str, rows: list[dict], keep: int = 500) -> None:
        """The latest sampled completions (completions.jsonl rows), at most ``keep`` per job."""
        now = time.time()
        c.executemany("INSERT INTO completions VALUES (?, ?, ?, ?)",
                      [(job_id, r.get("step"), json.dumps(r), now) for r in rows])
        c.execute("DELETE FROM completions WHERE job_id = ? AND rowid NOT IN (SELECT rowid FROM completions "
                  "WHERE job_id = ? ORDER BY rowid DESC LIMIT ?)", (job_id, job_id, keep))

    @reads
    def completions(self, c: sqlite3.Connection, job_id: str, last: int = 20) -> list[dict]:
        rows = c.execute("SELECT data FROM completions WHERE job_id = ? ORDER BY rowid DESC LIMIT ?",
                         (job_id, last)).fetchall()
        return [json.loads(r[0]) for r in reversed(rows)]

    # the doctor's alerts: one row per alert id, its first and last sighting
    @writes
    def upsert_alert(self, c: sqlite3.Connection, job_id: str, alert_id: str, severity: str, message: str,
                     evidence: str, fix: str) -> None:
        now = time.time()
        c.execute("INSERT INTO alerts VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (job_id, alert_id) DO UPDATE "
                  "SET severity = excluded.severity, message = excluded.message, evidence = excluded.evidence, "
                  "fix = excluded.fix, last_seen = excluded.last_seen",
                  (job_id, alert_id, severity, message, evidence, fix, now, now))

    @reads
    def alerts(self, c: sqlite3.Connection, job_id: str) -> list[StoredAlert]:
        return [StoredAlert.of(r) for r in c.execute("SELECT * FROM alerts WHERE job_id = ? ORDER BY first_seen",
                                                     (job_id,))]
