"""The job database's schema, as ordered migrations: the file's ``PRAGMA user_version`` says how many of them it has
had, and opening it runs the ones it lacks, in order, in one transaction, after a copy of the file is made beside it.

A release that changes the schema appends one migration (never edits a released one), so the job history of every
user, and the jobs running while they upgrade, carry over. A file written by a newer release (a version above
``LATEST``) is refused, never read with this release's idea of its columns.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path

from grpo_ui.core.private import private_file
from grpo_ui.jobs.store.errors import StoreError


def baseline(c: sqlite3.Connection) -> None:
    """Version 1: the tables as every release before versioning made them (grpo-ui 15245c0 and earlier, whose files
    are at version 0 with these tables already there: IF NOT EXISTS adopts them as they are)."""
    for statement in (
        "CREATE TABLE IF NOT EXISTS jobs (id TEXT PRIMARY KEY, name TEXT NOT NULL, spec_yaml TEXT NOT NULL, "
        "state TEXT NOT NULL, created REAL NOT NULL, started REAL, ended REAL, error TEXT)",
        "CREATE TABLE IF NOT EXISTS nodes (job_id TEXT NOT NULL, node_index INTEGER NOT NULL, host TEXT NOT NULL, "
        "role TEXT NOT NULL, node_rank INTEGER, script TEXT NOT NULL, pid INTEGER, run_dir TEXT, exit_code INTEGER, "
        "state TEXT NOT NULL, PRIMARY KEY (job_id, node_index))",
        "CREATE TABLE IF NOT EXISTS log_offsets (job_id TEXT NOT NULL, node_index INTEGER NOT NULL, path TEXT NOT NULL, "
        "offset INTEGER NOT NULL, PRIMARY KEY (job_id, node_index, path))",
        "CREATE TABLE IF NOT EXISTS job_meta (job_id TEXT NOT NULL, key TEXT NOT NULL, value TEXT NOT NULL, "
        "PRIMARY KEY (job_id, key))",
        "CREATE TABLE IF NOT EXISTS log_lines (job_id TEXT NOT NULL, node_index INTEGER NOT NULL, seq INTEGER NOT NULL, "
        "text TEXT NOT NULL, ts REAL NOT NULL, PRIMARY KEY (job_id, node_index, seq))",
        "CREATE TABLE IF NOT EXISTS metrics (job_id TEXT NOT NULL, step INTEGER NOT NULL, key TEXT NOT NULL, "
        "value REAL, ts REAL NOT NULL, PRIMARY KEY (job_id, step, key))",
        "CREATE TABLE IF NOT EXISTS completions (job_id TEXT NOT NULL, step INTEGER, data TEXT NOT NULL, "
        "ts REAL NOT NULL)",
        "CREATE TABLE IF NOT EXISTS gpu_samples (job_id TEXT, host TEXT NOT NULL, gpu_index INTEGER NOT NULL, "
        "ts REAL NOT NULL, util REAL, mem_used REAL, mem_total REAL, power REAL, power_limit REAL, temp REAL, "
        "sm_clock REAL)",
        "CREATE INDEX IF NOT EXISTS gpu_samples_job ON gpu_samples (job_id, ts)",
        "CREATE TABLE IF NOT EXISTS gpu_processes (job_id TEXT, host TEXT NOT NULL, gpu_index INTEGER, gpu_uuid TEXT, "
        "pid INTEGER NOT NULL, used_mib REAL, ts REAL NOT NULL)",
        "CREATE INDEX IF NOT EXISTS gpu_processes_job ON gpu_processes (job_id, host)",
        "CREATE TABLE IF NOT EXISTS memory_estimates (job_id TEXT PRIMARY KEY, estimate TEXT NOT NULL, "
        "created REAL NOT NULL)",
        "CREATE TABLE IF NOT EXISTS memory_peaks (job_id TEXT NOT NULL, host TEXT NOT NULL, gpu_index INTEGER NOT NULL, "
        "source TEXT NOT NULL, peak_gib REAL NOT NULL, ts REAL NOT NULL, PRIMARY KEY (job_id, host, gpu_index, source))",
        "CREATE TABLE IF NOT EXISTS time_estimates (job_id TEXT PRIMARY KEY, estimate TEXT NOT NULL, "
        "created REAL NOT NULL)",
        "CREATE TABLE IF NOT EXISTS time_measured (job_id TEXT PRIMARY KEY, measured TEXT NOT NULL, "
        "updated REAL NOT NULL)",
        "CREATE TABLE IF NOT EXISTS drafts (id INTEGER PRIMARY KEY AUTOINCREMENT, name TEXT NOT NULL, "
        "spec_yaml TEXT NOT NULL, version INTEGER NOT NULL, updated REAL NOT NULL)",
        "CREATE TABLE IF NOT EXISTS alerts (job_id TEXT NOT NULL, alert_id TEXT NOT NULL, severity TEXT NOT NULL, "
        "message TEXT NOT NULL, evidence TEXT, fix TEXT, first_seen REAL NOT NULL, last_seen REAL NOT NULL, "
        "PRIMARY KEY (job_id, alert_id))",
    ):
        c.execute(statement)  # one by one: executescript would commit the migration's transaction half-way


def unavailable_apart(c: sqlite3.Connection) -> None:
    """Version 2: a job launched without a prediction keeps why in a column of its own (``unavailable``) instead of
    an ``{"error": why}`` document in the prediction's place; exactly one of the two is set."""
    for table in ("memory_estimates", "time_estimates"):
        rows = c.execute(f"SELECT job_id, estimate, created FROM {table}").fetchall()
        c.execute(f"DROP TABLE {table}")
        c.execute(f"CREATE TABLE {table} (job_id TEXT PRIMARY KEY, estimate TEXT, unavailable TEXT, "
                  "created REAL NOT NULL, CHECK ((estimate IS NULL) != (unavailable IS NULL)))")
        for job_id, text, created in rows:
            document = json.loads(text)
            why = document["error"] if "error" in document else None
            c.execute(f"INSERT INTO {table} VALUES (?, ?, ?, ?)",
                      (job_id, None if why is not None else text, why, created))


MIGRATIONS: list[Callable[[sqlite3.Connection], None]] = [baseline, unavailable_apart]  # migration k brings a file to version k + 1
LATEST = len(MIGRATIONS)


def version(c: sqlite3.Connection) -> int:
    return c.execute("PRAGMA user_version").fetchone()[0]


def upgrade(c: sqlite3.Connection, path: Path) -> None:
    """Bring the file to version LATEST: refuse a newer one; copy one that holds tables (``backup``), then run the
    migrations it lacks in one transaction (another process that got there first leaves nothing to do)."""
    found = version(c)
    if found > LATEST:
        raise StoreError(path, f"it was written by a newer grpo-ui (schema version {found}; this release reads "
                               f"versions up to {LATEST})",
                         "run the grpo-ui release that wrote it (or a newer one), or point GRPO_UI_DB at another "
                         "file; this one was left as it is")
    if found == LATEST:
        return
    copy = backup(c, path, found) if c.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchone() else None
    c.execute("BEGIN IMMEDIATE")
    try:
        found = version(c)  # as of holding the write lock
        for migrate in MIGRATIONS[found:]:
            migrate(c)
        if found < LATEST:
            c.execute(f"PRAGMA user_version = {LATEST}")
    except sqlite3.Error as e:
        c.rollback()
        raise StoreError(path, f"upgrading its schema from version {found} to {LATEST} failed: {e}",
                         f"nothing in it was changed; a copy from before the upgrade is {copy}") from None
    c.commit()


def backup(c: sqlite3.Connection, path: Path, found: int) -> Path:
    """A consistent copy of the database (its WAL included) beside it, owner-only: ``<file>.v<version>.bak``, with a
    time stamp when that name is taken."""
    copy = path.with_name(f"{path.name}.v{found}.bak")
    if copy.exists():
        copy = path.with_name(f"{path.name}.v{found}-{time.strftime('%Y%m%d-%H%M%S')}.bak")
    target = sqlite3.connect(private_file(copy))
    try:
        c.backup(target)
    finally:
        target.close()
    return copy
