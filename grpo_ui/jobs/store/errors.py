"""What the job store raises: a database that cannot be used, and a job id that is taken."""

from __future__ import annotations

from pathlib import Path

from grpo_ui.core.errors import UserError


class StoreError(UserError):
    """The job database cannot be used; the message names the file and what to do (by default: what a locked or a
    damaged file needs)."""

    def __init__(self, path: Path, what: str, hint: str | None = None):
        self.path = path
        if hint is None and ("locked" in what or "busy" in what):
            hint = ("another grpo-ui (app or CLI) is holding it: let it finish or stop it, or point GRPO_UI_DB at "
                    "another file")
        elif hint is None:
            hint = (f"if it is damaged, move it aside (mv {path} {path}.bad; its -wal and -shm files too) and grpo-ui "
                    "starts a new one; jobs still running on the nodes keep running, but this app forgets them")
        super().__init__(f"the job database {path} cannot be used ({what}): {hint}.")


class DuplicateJob(UserError):
    """A job id that is taken (ids name run directories on the nodes)."""
