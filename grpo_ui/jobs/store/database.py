"""The job database's file and connections, and the one way every store method reaches them: ``@reads`` or
``@writes``.

A method marked ``@writes`` runs as one transaction (BEGIN IMMEDIATE: the write lock is taken at once, so two
processes never interleave half-writes), or joins the one a surrounding ``claim`` holds; a method marked ``@reads``
sees the last committed state. Either gets the thread's connection as its first argument after ``self``, and neither
lets a bare sqlite3 error out: the caller gets a StoreError naming the file and what to do. Opening the file brings
its schema up to this release's (grpo_ui.jobs.store.schema) before anything else reads it.
"""

from __future__ import annotations

import functools
import os
import sqlite3
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Concatenate, ParamSpec, TypeVar

from grpo_ui.core.private import data_dir_path, private_dir, private_file, safe_parent
from grpo_ui.jobs.store import schema
from grpo_ui.jobs.store.errors import StoreError

P = ParamSpec("P")
R = TypeVar("R")


def db_path() -> Path:
    """GRPO_UI_DB, else grpo-ui.db in the app's data directory (GRPO_UI_HOME, else ~/.local/share/grpo-ui)."""
    return Path(os.environ.get("GRPO_UI_DB") or data_dir_path() / "grpo-ui.db")


class Database:
    """One SQLite file (WAL); one connection per thread, opened on first use."""

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
        try:
            schema.upgrade(self.conn(), self.path)  # first: a file this release cannot read is left as it is
            self.conn().execute("PRAGMA journal_mode=WAL")
        except sqlite3.Error as e:
            raise StoreError(self.path, str(e)) from None

    def conn(self) -> sqlite3.Connection:
        c = getattr(self._local, "conn", None)
        if c is None:
            c = sqlite3.connect(self.path, timeout=self.timeout, isolation_level=None)  # transactions: transaction()
            c.row_factory = sqlite3.Row
            c.execute(f"PRAGMA busy_timeout={int(self.timeout * 1000)}")
            c.execute("PRAGMA synchronous=NORMAL")  # with WAL: durable across app crashes, fewer fsyncs
            self._local.conn = c
        return c

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """One write transaction (taking the write lock at once); inside another one (``claim``) it joins it. A
        sqlite3 error becomes a StoreError."""
        c = self.conn()
        try:
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
        except sqlite3.Error as e:
            raise StoreError(self.path, str(e)) from None


def writes(method: Callable[Concatenate[Database, sqlite3.Connection, P], R]) -> Callable[Concatenate[Database, P], R]:
    """The store method runs in one write transaction (``Database.transaction``) and gets its connection."""
    @functools.wraps(method)
    def run(self: Database, *args: P.args, **kwargs: P.kwargs) -> R:
        with self.transaction() as c:
            return method(self, c, *args, **kwargs)
    return run


def reads(method: Callable[Concatenate[Database, sqlite3.Connection, P], R]) -> Callable[Concatenate[Database, P], R]:
    """The store method reads through the thread's connection; a sqlite3 error becomes a StoreError."""
    @functools.wraps(method)
    def run(self: Database, *args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return method(self, self.conn(), *args, **kwargs)
        except sqlite3.Error as e:
            raise StoreError(self.path, str(e)) from None
    return run
