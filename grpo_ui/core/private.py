"""Files only their owner may read: grpo-ui's data directory (0700), the job database and the draft (0600).

Existing files and directories with looser modes are tightened when they are ours; anything else (another user's,
or a directory others may write to) is refused with a message that says what to do.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from grpo_ui.core.errors import UserError


class PrivateFileError(UserError):
    pass


def _owned(path: Path, st: os.stat_result) -> None:
    if st.st_uid != os.geteuid():
        raise PrivateFileError(f"{path} belongs to another user (uid {st.st_uid}): grpo-ui keeps its data only in "
                               "files of its own; point GRPO_UI_HOME / GRPO_UI_DB elsewhere.")


def private_dir(path: Path) -> Path:
    """grpo-ui's own directory, created 0700 or tightened to 0700."""
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    st = path.stat()
    _owned(path, st)
    if stat.S_IMODE(st.st_mode) & 0o077:
        path.chmod(0o700)
    return path


def safe_parent(path: Path) -> None:
    """A file's directory that is not grpo-ui's own (e.g. GRPO_UI_DB elsewhere): created 0700 when missing, left as it
    is when only its owner may write to it, refused when others may (they could replace the file)."""
    parent = path.parent
    if not parent.exists():
        private_dir(parent)
        return
    if stat.S_IMODE(parent.stat().st_mode) & 0o022:
        raise PrivateFileError(f"{parent} is writable by other users, so they could replace {path.name}: put it in a "
                               "directory only you can write to (e.g. the default ~/.local/share/grpo-ui).")


def private_file(path: Path) -> Path:
    """``path`` exists and is 0600 (created empty when missing, tightened when looser)."""
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600))
    except FileExistsError:
        st = path.lstat()
        if not stat.S_ISREG(st.st_mode):
            raise PrivateFileError(f"{path} is not a regular file (a link or a directory?): move it aside.") from None
        _owned(path, st)
        if stat.S_IMODE(st.st_mode) & 0o077:
            path.chmod(0o600)
    return path



def data_dir_path() -> Path:
    """Where the app's data directory is (GRPO_UI_HOME, else ~/.local/share/grpo-ui), without creating it."""
    return Path(os.environ.get("GRPO_UI_HOME") or Path.home() / ".local/share/grpo-ui")


def home() -> Path:
    """The app's data directory (the database, which holds the drafts), created 0700 or tightened to 0700."""
    return private_dir(data_dir_path())
