"""The one way a value reaches a shell: scripts, remote commands and probes all quote through this module.

``quote`` makes any value one bash word, ``path`` does the same for a path (anchoring ``~/…`` and relative paths at
the login's home), and ``join`` turns an argv list into a command line. Nothing else in grpo-ui calls shlex.quote.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable


def quote(value) -> str:
    """Any value → one bash word that expands to exactly ``str(value)``."""
    return shlex.quote(str(value))


def path(p: str) -> str:
    """A path as one bash word. ``~/…`` and relative paths start at the login's home directory, as SSH and SFTP
    read them, so a later ``cd`` cannot change what they mean and a leading '-' is never taken for an option."""
    if p.startswith("/"):
        return quote(p)
    if p == "~":
        return '"$HOME"'
    return '"$HOME"/' + quote(p.removeprefix("~/"))


def join(argv: Iterable) -> str:
    """An argv list → a command line that runs exactly that argv."""
    return " ".join(quote(a) for a in argv)
