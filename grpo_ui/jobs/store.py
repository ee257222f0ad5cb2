"""SQLite store (WAL) for job drafts, jobs, their nodes, log offsets, metric and GPU samples, alerts, and the memory
and step-time predictions each job was launched with next to what was measured.

The app and the CLI can stop at any time; everything needed to pick a job up again lives here. The database file is
0600 in a directory only its owner may write to; a database that cannot be used (corrupt, locked, unwritable) is a
StoreError that names the file and the way out.
"""

from __future__ import annotations

import functools
import json
import os
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from grpo_ui.core.errors import UserError
from grpo_ui.core.private import data_dir_path, private_dir, private_file, safe_parent
from grpo_ui.spec.names import check_name

SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    id TEXT PRIMARY KEY, name TEXT NOT NULL, spec_yaml TEXT NOT NULL, state TEXT NOT NULL,
    created REAL NOT NULL, started REAL, ended REAL, error TEXT);
CREATE TABLE IF NOT EXISTS nodes (
    job_id TEXT NOT NULL, node_index INTEGER NOT NULL, host TEXT NOT NULL, role TEXT NOT NULL, node_rank INTEGER,
    script TEXT NOT NULL, pid INTEGER, run_dir TEXT, exit_code INTEGER, state TEXT NOT NULL,
    PRIMARY KEY (job_id, node_index));
CREATE TABLE IF NOT EXISTS log_offsets (
    job_id TEXT NOT NULL, node_index INTEGER NOT NULL, path TEXT NOT NULL, offset INTEGER NOT NULL,
    PRIMARY KEY (job_id, node_index, path));
CREATE TABLE IF NOT EXISTS job_meta (
    job_id TEXT NOT NULL, key TEXT NOT NULL, value TEXT NOT NULL, PRIMARY KEY (job_id, key));
CREATE TABLE IF NOT EXISTS log_lines (
    job_id TEXT NOT NULL, node_index INTEGER NOT NULL, seq INTEGER NOT NULL, text TEXT NOT NULL, ts REAL NOT NULL,
    PRIMARY KEY (job_id, node_index, seq));
CREATE TABLE IF NOT EXISTS metrics (
    job_id TEXT NOT NULL, step INTEGER NOT NULL, key TEXT NOT NULL, value REAL, ts REAL NOT NULL,
    PRIMARY KEY (job_id, step, key));
CREATE TABLE IF NOT EXISTS completions (
    job_id TEXT NOT NULL, step INTEGER, data TEXT NOT NULL, ts REAL NOT NULL);
CREATE TABLE IF NOT EXISTS gpu_samples (
    job_id TEXT, host TEXT NOT NULL, gpu_index INTEGER NOT NULL, ts REAL NOT NULL, util REAL, mem_used REAL,
    mem_total REAL, power REAL, power_limit REAL, temp REAL, sm_clock REAL);
CREATE INDEX IF NOT EXISTS gpu_samples_job ON gpu_samples (job_id, ts);
CREATE TABLE IF NOT EXISTS gpu_processes (
    job_id TEXT, host TEXT NOT NULL, gpu_index INTEGER, gpu_uuid TEXT, pid INTEGER NOT NULL, used_mib REAL,
    ts REAL NOT NULL);
CREATE INDEX IF NOT EXISTS gpu_processes_job ON gpu_processes (job_id, host);
CREATE TABLE IF NOT EXISTS memory_estimates (
    job_id TEXT PRIMARY KEY, estimate TEXT NOT NULL, created REAL NOT NULL);
CREATE TABLE IF NOT EXISTS memory_peaks (
    job_id TEXT NOT NULL, host TEXT NOT NULL, gpu_index INTEGER NOT NULL, source TEXT NOT NULL, peak_gib REAL NOT NULL,
    ts REAL NOT NULL, PRIMARY KEY (job_id, host, gpu_index, source));
CREATE TABLE IF NOT EXISTS time_estimates (
    job_id TEXT PRIMARY KEY, estimate TEXT NOT NULL, created REAL NOT NULL);
CREATE TABLE IF NOT EXISTS time_measured (
    job_id TEXT PRIMARY KEY, measured TEXT NOT NULL, updated REAL NOT NULL);
CREATE TABLE IF NOT EXISTS drafts (
    id INTEGER PRIMARY KEY AUTOINCREMENT, name TEXT NOT NULL, spec_yaml TEXT NOT NULL, version INTEGER NOT NULL,
    updated REAL NOT NULL);
CREATE TABLE IF NOT EXISTS alerts (
    job_id TEXT NOT NULL, alert_id TEXT NOT NULL, severity TEXT NOT NULL, message TEXT NOT NULL, evidence TEXT,
    fix TEXT, first_seen REAL NOT NULL, last_seen REAL NOT NULL, PRIMARY KEY (job_id, alert_id));
"""
ACTIVE = ("pending", "preflight", "starting", "running")


def db_path() -> Path:
    """GRPO_UI_DB, else grpo-ui.db in the app's data directory (GRPO_UI_HOME, else ~/.local/share/grpo-ui)."""
    return Path(os.environ.get("GRPO_UI_DB") or data_dir_path() / "grpo-ui.db")


class StoreError(UserError):
    """The job database cannot be used; the message names the file and what to do."""

    def __init__(self, path: Path, error: Exception):
        self.path = path
        what = str(error)
        if "locked" in what or "busy" in what:
            hint = ("another grpo-ui (app or CLI) is holding it: let it finish or stop it, or point GRPO_UI_DB at "
                    "another file")
        else:
            hint = (f"if it is damaged, move it aside (mv {path} {path}.bad; its -wal and -shm files too) and grpo-ui "
                    "starts a new one; jobs still running on the nodes keep running, but this app forgets them")
        super().__init__(f"the job database {path} cannot be used ({what}): {hint}.")


class DuplicateJob(UserError):
    pass


def _db_errors(method):
    """Store methods raise StoreError, never a bare sqlite3 error."""
    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        try:
            return method(self, *args, **kwargs)
        except sqlite3.Error as e:
            raise StoreError(self.path, e) from None
    return wrapper


class Store:
    """One SQLite file; one connection per thread; every write is its own short transaction (or joins the one
    ``claim`` holds)."""

    def __init__(self, path: str | Path | None = None, timeout: float = 30.0):
        self.path = Path(path or db_path())
        self.timeout = timeout
        if self.path == data_dir_path() / "grpo-ui.db":  # in grpo-ui's own directory
            private_dir(self.path.parent)
        else:
            safe_parent(self.path)
        for suffix in ("", "-wal", "-shm"):  # SQLite creates -wal and -shm with the database file's mode
            if suffix == "" or self.path.with_name(self.path.name + suffix).exists():
                private_file(self.path.with_name(self.path.name + suffix))
        self._local = threading.local()
        self._open()

    @_db_errors
    def _open(self) -> None:
        c = self.conn()
        c.execute("PRAGMA journal_mode=WAL")
        c.executescript(SCHEMA)

    def conn(self) -> sqlite3.Connection:
        c = getattr(self._local, "conn", None)
        if c is None:
            c = sqlite3.connect(self.path, timeout=self.timeout, isolation_level=None)  # transactions: _write
            c.row_factory = sqlite3.Row
            c.execute(f"PRAGMA busy_timeout={int(self.timeout * 1000)}")
            c.execute("PRAGMA synchronous=NORMAL")  # with WAL: durable across app crashes, fewer fsyncs
            self._local.conn = c
        return c

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """One write transaction (taking the write lock at once); inside ``claim`` it joins that one instead."""
        c = self.conn()
        if c.in_transaction:
            yield c
            return
        c.execute("BEGIN IMMEDIATE")
        try:
            yield c
        except BaseException:
            c.rollback()
            raise
        c.commit()

    # drafts: the configs being edited, each saved compare-and-set on its version (two browser tabs on one draft)
    def create_draft(self, name: str, spec_yaml: str) -> int:
        with self._write() as c:
            return c.execute("INSERT INTO drafts (name, spec_yaml, version, updated) VALUES (?, ?, 1, ?)",
                             (name, spec_yaml, time.time())).lastrowid

    def draft(self, draft_id: int) -> dict | None:
        row = self.conn().execute("SELECT * FROM drafts WHERE id = ?", (draft_id,)).fetchone()
        return dict(row) if row else None

    def drafts(self) -> list[dict]:
        """Every draft, the latest saved first."""
        return [dict(r) for r in self.conn().execute("SELECT * FROM drafts ORDER BY updated DESC, id DESC")]

    def save_draft(self, draft_id: int, spec_yaml: str, version: int) -> int | None:
        """Store the draft's new text if it is still at ``version``: its new version, or None when another editor
        saved it since (nothing written) or it was deleted."""
        with self._write() as c:
            done = c.execute("UPDATE drafts SET spec_yaml = ?, version = version + 1, updated = ? "
                             "WHERE id = ? AND version = ?", (spec_yaml, time.time(), draft_id, version)).rowcount
        return version + 1 if done else None

    def rename_draft(self, draft_id: int, name: str) -> None:
        with self._write() as c:
            c.execute("UPDATE drafts SET name = ? WHERE id = ?", (name, draft_id))

    def delete_draft(self, draft_id: int) -> None:
        with self._write() as c:
            c.execute("DELETE FROM drafts WHERE id = ?", (draft_id,))

    # jobs
    def create_job(self, job_id: str, name: str, spec_yaml: str, state: str = "pending") -> None:
        """A new job; DuplicateJob when the id is taken (ids name run directories on the nodes)."""
        check_name(job_id)
        try:
            with self._write() as c:
                c.execute("INSERT INTO jobs (id, name, spec_yaml, state, created) VALUES (?, ?, ?, ?, ?)",
                          (job_id, name, spec_yaml, state, time.time()))
        except sqlite3.IntegrityError:
            raise DuplicateJob(f"a job with id {job_id!r} already exists: pick another job id (it names the run "
                               "directory on every node)") from None

    def set_job(self, job_id: str, **fields) -> None:
        cols = ", ".join(f"{k} = ?" for k in fields)
        with self._write() as c:
            c.execute(f"UPDATE jobs SET {cols} WHERE id = ?", (*fields.values(), job_id))

    def job(self, job_id: str) -> dict | None:
        row = self.conn().execute("SELECT * FROM jobs WHERE id = ?", (job_id,)).fetchone()
        return dict(row) if row else None

    def jobs(self, active_only: bool = False) -> list[dict]:
        sql = "SELECT * FROM jobs" + (f" WHERE state IN {ACTIVE}" if active_only else "") + " ORDER BY created DESC"
        return [dict(r) for r in self.conn().execute(sql)]

    # nodes
    def add_node(self, job_id: str, node_index: int, host: str, role: str, node_rank: int | None, script: str,
                 run_dir: str) -> None:
        with self._write() as c:
            c.execute("INSERT INTO nodes (job_id, node_index, host, role, node_rank, script, run_dir, state) "
                      "VALUES (?, ?, ?, ?, ?, ?, ?, 'pending')", (job_id, node_index, host, role, node_rank, script,
                                                                    run_dir))

    def set_node(self, job_id: str, node_index: int, **fields) -> None:
        cols = ", ".join(f"{k} = ?" for k in fields)
        with self._write() as c:
            c.execute(f"UPDATE nodes SET {cols} WHERE job_id = ? AND node_index = ?",
                      (*fields.values(), job_id, node_index))

    def nodes(self, job_id: str) -> list[dict]:
        return [dict(r) for r in self.conn().execute(
            "SELECT * FROM nodes WHERE job_id = ? ORDER BY node_index", (job_id,))]

    # monitoring
    def offset(self, job_id: str, node_index: int, path: str) -> int:
        row = self.conn().execute("SELECT offset FROM log_offsets WHERE job_id = ? AND node_index = ? AND path = ?",
                                  (job_id, node_index, path)).fetchone()
        return row[0] if row else 0

    @contextmanager
    def claim(self, job_id: str, node_index: int, path: str, old: int, new: int) -> Iterator[bool]:
        """Compare-and-set of a file's read offset: yields True when it was still ``old`` (it is now ``new``, and the
        block's writes — the lines read between the two — commit with it), False when another watcher moved it
        first (it stored those lines; the block must write nothing)."""
        try:
            with self._write() as c:
                if self.offset(job_id, node_index, path) != old:
                    yield False
                    return
                c.execute("INSERT OR REPLACE INTO log_offsets VALUES (?, ?, ?, ?)", (job_id, node_index, path, new))
                yield True
        except sqlite3.Error as e:
            raise StoreError(self.path, e) from None

    def meta(self, job_id: str, key: str) -> str | None:
        """A fact learnt about a job while watching it (e.g. where rank 0 writes logging.jsonl)."""
        row = self.conn().execute("SELECT value FROM job_meta WHERE job_id = ? AND key = ?", (job_id, key)).fetchone()
        return row[0] if row else None

    def set_meta(self, job_id: str, key: str, value: str | None) -> None:
        """Set a fact, or forget it (None)."""
        with self._write() as c:
            if value is None:
                c.execute("DELETE FROM job_meta WHERE job_id = ? AND key = ?", (job_id, key))
            else:
                c.execute("INSERT OR REPLACE INTO job_meta VALUES (?, ?, ?)", (job_id, key, value))

    def add_log_lines(self, job_id: str, node_index: int, lines: list[str], keep: int = 5000) -> None:
        """Append lines to the node's window, keeping the last ``keep`` (the full log stays on the node)."""
        if not lines:
            return
        now = time.time()
        with self._write() as c:
            last = c.execute("SELECT COALESCE(MAX(seq), 0) FROM log_lines WHERE job_id = ? AND node_index = ?",
                             (job_id, node_index)).fetchone()[0]
            c.executemany("INSERT INTO log_lines VALUES (?, ?, ?, ?, ?)",
                          [(job_id, node_index, last + k + 1, t, now) for k, t in enumerate(lines)])
            c.execute("DELETE FROM log_lines WHERE job_id = ? AND node_index = ? AND seq <= ?",
                      (job_id, node_index, last + len(lines) - keep))

    def log_lines(self, job_id: str, node_index: int, last: int = 200, contains: str | None = None) -> list[tuple]:
        """(seq, text, ts) of the last ``last`` lines of the window, optionally only those containing a string."""
        sql = "SELECT seq, text, ts FROM log_lines WHERE job_id = ? AND node_index = ?"
        args: list = [job_id, node_index]
        if contains:
            sql += " AND instr(text, ?) > 0"
            args.append(contains)
        rows = self.conn().execute(sql + " ORDER BY seq DESC LIMIT ?", (*args, last)).fetchall()
        return [tuple(r) for r in reversed(rows)]

    def add_metrics(self, job_id: str, step: int, values: dict[str, float], ts: float | None = None) -> bool:
        """Store one logged step; a step stored before (from stdout, then from logging.jsonl) gets the new values
        and keeps its first time. True when the step is new."""
        ts = ts or time.time()
        with self._write() as c:
            known = c.execute("SELECT 1 FROM metrics WHERE job_id = ? AND step = ? LIMIT 1", (job_id, step)).fetchone()
            c.executemany("INSERT INTO metrics VALUES (?, ?, ?, ?, ?) ON CONFLICT (job_id, step, key) DO UPDATE "
                          "SET value = excluded.value", [(job_id, step, k, v, ts) for k, v in values.items()])
        return known is None

    def metrics(self, job_id: str, keys: tuple[str, ...] | None = None) -> dict[str, list[tuple[int, float]]]:
        """key → [(step, value)] in step order; every key, or only ``keys``."""
        sql, args = "SELECT step, key, value FROM metrics WHERE job_id = ?", [job_id]
        if keys is not None:
            sql += f" AND key IN ({', '.join('?' * len(keys))})"
            args += keys
        out: dict[str, list[tuple[int, float]]] = {}
        for r in self.conn().execute(sql + " ORDER BY step", args):
            out.setdefault(r["key"], []).append((r["step"], r["value"]))
        return out

    def step_times(self, job_id: str) -> list[tuple[int, float]]:
        """(step, when it was first stored) of every logged step, in step order."""
        return [tuple(r) for r in self.conn().execute(
            "SELECT step, MIN(ts) FROM metrics WHERE job_id = ? GROUP BY step ORDER BY step", (job_id,))]

    def add_completions(self, job_id: str, rows: list[dict], keep: int = 500) -> None:
        """The latest sampled completions (completions.jsonl rows), at most ``keep`` per job."""
        now = time.time()
        with self._write() as c:
            c.executemany("INSERT INTO completions VALUES (?, ?, ?, ?)",
                          [(job_id, r.get("step"), json.dumps(r), now) for r in rows])
            c.execute("DELETE FROM completions WHERE job_id = ? AND rowid NOT IN (SELECT rowid FROM completions "
                      "WHERE job_id = ? ORDER BY rowid DESC LIMIT ?)", (job_id, job_id, keep))

    def completions(self, job_id: str, last: int = 20) -> list[dict]:
        rows = self.conn().execute("SELECT data FROM completions WHERE job_id = ? ORDER BY rowid DESC LIMIT ?",
                                   (job_id, last)).fetchall()
        return [json.loads(r[0]) for r in reversed(rows)]

    def add_gpu_samples(self, job_id: str | None, samples: list[dict]) -> None:
        """Samples as produced by monitor.gpu (host, gpu_index, ts, util, mem_used, …)."""
        keys = ("host", "gpu_index", "ts", "util", "mem_used", "mem_total", "power", "power_limit", "temp", "sm_clock")
        with self._write() as c:
            c.executemany("INSERT INTO gpu_samples VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                          [(job_id, *(s.get(k) for k in keys)) for s in samples])

    def gpu_samples(self, job_id: str, since: float = 0.0) -> list[dict]:
        return [dict(r) for r in self.conn().execute(
            "SELECT * FROM gpu_samples WHERE job_id = ? AND ts >= ? ORDER BY ts", (job_id, since))]

    def sampled_gpus(self, job_id: str) -> dict[str, list[int]]:
        """host → the GPUs (indices, ascending) the job's samples came from."""
        out: dict[str, list[int]] = {}
        for host, gpu in self.conn().execute("SELECT DISTINCT host, gpu_index FROM gpu_samples WHERE job_id = ? "
                                             "ORDER BY host, gpu_index", (job_id,)):
            out.setdefault(host, []).append(gpu)
        return out

    def set_gpu_processes(self, job_id: str | None, snapshot: dict) -> None:
        """The processes holding GPU memory on one host now (a snapshot from monitor.gpu), replacing the last."""
        with self._write() as c:
            c.execute("DELETE FROM gpu_processes WHERE job_id IS ? AND host = ?", (job_id, snapshot["host"]))
            c.executemany("INSERT INTO gpu_processes VALUES (?, ?, ?, ?, ?, ?, ?)",
                          [(job_id, snapshot["host"], p["gpu_index"], p["gpu_uuid"], p["pid"], p["used_mib"],
                            snapshot["ts"]) for p in snapshot["processes"]])

    def gpu_processes(self, job_id: str) -> list[dict]:
        return [dict(r) for r in self.conn().execute(
            "SELECT host, gpu_index, gpu_uuid, pid, used_mib, ts FROM gpu_processes WHERE job_id = ? "
            "ORDER BY host, gpu_index, used_mib DESC", (job_id,))]

    # memory: the estimate a job was launched with, and the peaks measured while it ran
    def set_memory_estimate(self, job_id: str, estimate: dict) -> None:
        self._put_document("memory_estimates", job_id, estimate)

    def memory_estimate(self, job_id: str) -> dict | None:
        return self._document("memory_estimates", "estimate", job_id)

    def update_memory_peaks(self, job_id: str, rank0: tuple[str, int] | None) -> None:
        """Raise the stored peaks to what the samples show: nvidia-smi's used memory per GPU (gpu_samples, MiB) and
        rank 0's logged memory(GiB) (the metrics; ms-swift logs it on global rank 0 only) on ``rank0`` (host, GPU)."""
        now = time.time()
        upsert = ("ON CONFLICT (job_id, host, gpu_index, source) DO UPDATE SET peak_gib = MAX(peak_gib, "
                  "excluded.peak_gib), ts = excluded.ts")
        with self.conn() as c:
            c.execute("INSERT INTO memory_peaks SELECT job_id, host, gpu_index, 'nvidia-smi', MAX(mem_used) / 1024.0, ? "
                      "FROM gpu_samples WHERE job_id = ? AND mem_used IS NOT NULL GROUP BY host, gpu_index "
                      + upsert, (now, job_id))
            if rank0:
                c.execute("INSERT INTO memory_peaks SELECT job_id, ?, ?, 'memory(GiB)', MAX(value), ? FROM metrics "
                          "WHERE job_id = ? AND key = 'memory(GiB)' AND value IS NOT NULL GROUP BY job_id " + upsert,
                          (*rank0, now, job_id))

    def memory_peaks(self, job_id: str) -> list[dict]:
        return [dict(r) for r in self.conn().execute(
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

    # one JSON document per job (the tables above: job_id, the document, when it was written)
    def _put_document(self, table: str, job_id: str, document: dict) -> None:
        with self._write() as c:
            c.execute(f"INSERT OR REPLACE INTO {table} VALUES (?, ?, ?)", (job_id, json.dumps(document), time.time()))

    def _document(self, table: str, column: str, job_id: str) -> dict | None:
        row = self.conn().execute(f"SELECT {column} FROM {table} WHERE job_id = ?", (job_id,)).fetchone()
        return json.loads(row[0]) if row else None

    def upsert_alert(self, job_id: str, alert_id: str, severity: str, message: str, evidence: str, fix: str) -> None:
        now = time.time()
        with self._write() as c:
            c.execute("INSERT INTO alerts VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (job_id, alert_id) DO UPDATE "
                      "SET severity = excluded.severity, message = excluded.message, evidence = excluded.evidence, "
                      "fix = excluded.fix, last_seen = excluded.last_seen",
                      (job_id, alert_id, severity, message, evidence, fix, now, now))

    def alerts(self, job_id: str) -> list[dict]:
        return [dict(r) for r in self.conn().execute(
            "SELECT * FROM alerts WHERE job_id = ? ORDER BY first_seen", (job_id,))]


for _name, _method in list(vars(Store).items()):
    if callable(_method) and not _name.startswith("_") and _name not in ("conn", "claim"):
        setattr(Store, _name, _db_errors(_method))
