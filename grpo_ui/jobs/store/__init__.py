"""The job store: one SQLite file (WAL) with the drafts, the jobs and their nodes, what each job wrote (log windows,
metrics, completions, alerts), its GPU telemetry, and the memory and step-time predictions it was launched with next
to what was measured.

The app and the CLI can stop at any time; everything needed to pick a job up again lives here. One class per concern
(jobs.py, logs.py, gpus.py, predictions.py) returning typed records (records.py) over one database (database.py: every method reads or writes through
``@reads`` / ``@writes``, one short transaction per write); the schema is versioned and migrated when the file is
opened (schema.py). The file is 0600 in a directory only its owner may write to; a database that cannot be used
(corrupt, locked, unwritable, written by a newer release) is a StoreError that names the file and the way out.
"""

from __future__ import annotations

from grpo_ui.jobs.store.database import db_path
from grpo_ui.jobs.store.errors import DuplicateJob, StoreError
from grpo_ui.jobs.store.gpus import GpuRecords
from grpo_ui.jobs.store.jobs import JobRecords
from grpo_ui.jobs.store.logs import LogRecords
from grpo_ui.jobs.store.predictions import Predictions
from grpo_ui.jobs.store.records import (
    ACTIVE,
    ENDED,
    GpuProcess,
    Job,
    JobState,
    LogLine,
    MemoryAtLaunch,
    MemoryPeak,
    Node,
    RoleAtLaunch,
    StoredAlert,
    StoredDraft,
    TimeAtLaunch,
    Unavailable,
)

__all__ = ["ACTIVE", "ENDED", "DuplicateJob", "GpuProcess", "Job", "JobState", "LogLine", "MemoryAtLaunch",
           "MemoryPeak", "Node", "RoleAtLaunch", "Store", "StoreError", "StoredAlert", "StoredDraft", "TimeAtLaunch", "Unavailable",
           "db_path"]


class Store(JobRecords, LogRecords, GpuRecords, Predictions):
    """The whole store: ``Store(path)`` opens (and, once, upgrades) the file; every thread gets its own connection."""
