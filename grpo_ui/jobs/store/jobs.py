"""The store's jobs and their nodes, the facts learnt about a job while watching it (job meta), and the drafts a
job starts from."""

from __future__ import annotations

import sqlite3
import time

from grpo_ui.jobs.store.database import Database, reads, writes
from grpo_ui.jobs.store.errors import DuplicateJob
from grpo_ui.jobs.store.records import ACTIVE, Job, JobState, Node, StoredDraft
from grpo_ui.spec.names import check_name


class JobRecords(Database):
    # drafts: the configs being edited, each saved compare-and-set on its version (two browser tabs on one draft)
    @writes
    def create_draft(self, c: sqlite3.Connection, name: str, spec_yaml: str) -> int:
        return c.execute("INSERT INTO drafts (name, spec_yaml, version, updated) VALUES (?, ?, 1, ?)",
                         (name, spec_yaml, time.time())).lastrowid

    @reads
    def draft(self, c: sqlite3.Connection, draft_id: int) -> StoredDraft | None:
        row = c.execute("SELECT * FROM drafts WHERE id = ?", (draft_id,)).fetchone()
        return StoredDraft.of(row) if row else None

    @reads
    def drafts(self, c: sqlite3.Connection) -> list[StoredDraft]:
        """Every draft, the latest saved first."""
        return [StoredDraft.of(r) for r in c.execute("SELECT * FROM drafts ORDER BY updated DESC, id DESC")]

    @writes
    def save_draft(self, c: sqlite3.Connection, draft_id: int, spec_yaml: str, version: int) -> int | None:
        """Store the draft's new text if it is still at ``version``: its new version, or None when another editor
        saved it since (nothing written) or it was deleted."""
        done = c.execute("UPDATE drafts SET spec_yaml = ?, version = version + 1, updated = ? WHERE id = ? AND "
                         "version = ?", (spec_yaml, time.time(), draft_id, version)).rowcount
        return version + 1 if done else None

    @writes
    def rename_draft(self, c: sqlite3.Connection, draft_id: int, name: str) -> None:
        c.execute("UPDATE drafts SET name = ? WHERE id = ?", (name, draft_id))

    @writes
    def delete_draft(self, c: sqlite3.Connection, draft_id: int) -> None:
        c.execute("DELETE FROM drafts WHERE id = ?", (draft_id,))

    # jobs
    @writes
    def create_job(self, c: sqlite3.Connection, job_id: str, name: str, spec_yaml: str,
                   state: JobState = JobState.PENDING) -> None:
        """A new job; DuplicateJob when the id is taken (ids name run directories on the nodes)."""
        check_name(job_id)
        if not c.execute("INSERT INTO jobs (id, name, spec_yaml, state, created) VALUES (?, ?, ?, ?, ?) "
                         "ON CONFLICT (id) DO NOTHING", (job_id, name, spec_yaml, state, time.time())).rowcount:
            raise DuplicateJob(f"a job with id {job_id!r} already exists: pick another job id (it names the run "
                               "directory on every node)")

    @writes
    def set_job(self, c: sqlite3.Connection, job_id: str, **fields) -> None:
        cols = ", ".join(f"{k} = ?" for k in fields)
        c.execute(f"UPDATE jobs SET {cols} WHERE id = ?", (*fields.values(), job_id))

    @reads
    def job(self, c: sqlite3.Connection, job_id: str) -> Job | None:
        row = c.execute("SELECT * FROM jobs WHERE id = ?", (job_id,)).fetchone()
        return Job.of(row) if row else None

    @reads
    def jobs(self, c: sqlite3.Connection, active_only: bool = False) -> list[Job]:
        """Every job (or the active ones), the latest created first."""
        where = f" WHERE state IN ({', '.join('?' * len(ACTIVE))})" if active_only else ""
        return [Job.of(r) for r in c.execute(f"SELECT * FROM jobs{where} ORDER BY created DESC",
                                             ACTIVE if active_only else ())]

    # nodes
    @writes
    def add_node(self, c: sqlite3.Connection, job_id: str, node_index: int, host: str, role: str,
                 node_rank: int | None, script: str, run_dir: str) -> None:
        c.execute("INSERT INTO nodes (job_id, node_index, host, role, node_rank, script, run_dir, state) "
                  "VALUES (?, ?, ?, ?, ?, ?, ?, 'pending')", (job_id, node_index, host, role, node_rank, script, run_dir))

    @writes
    def set_node(self, c: sqlite3.Connection, job_id: str, node_index: int, **fields) -> None:
        cols = ", ".join(f"{k} = ?" for k in fields)
        c.execute(f"UPDATE nodes SET {cols} WHERE job_id = ? AND node_index = ?", (*fields.values(), job_id, node_index))

    @reads
    def nodes(self, c: sqlite3.Connection, job_id: str) -> list[Node]:
        return [Node.of(r) for r in c.execute("SELECT * FROM nodes WHERE job_id = ? ORDER BY node_index", (job_id,))]

    # facts learnt about a job while watching it
    @reads
    def meta(self, c: sqlite3.Connection, job_id: str, key: str) -> str | None:
        """A fact learnt about a job while watching it (e.g. where rank 0 writes logging.jsonl)."""
        row = c.execute("SELECT value FROM job_meta WHERE job_id = ? AND key = ?", (job_id, key)).fetchone()
        return row[0] if row else None

    @writes
    def set_meta(self, c: sqlite3.Connection, job_id: str, key: str, value: str | None) -> None:
        """Set a fact, or forget it (None)."""
        if value is None:
            c.execute("DELETE FROM job_meta WHERE job_id = ? AND key = ?", (job_id, key))
        else:
            c.execute("INSERT OR REPLACE INTO job_meta VALUES (?, ?, ?)", (job_id, key, value))
