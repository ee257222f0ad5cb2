"""What a user sees when something fails: their own mistakes with the message that says what to do, anything else
as an error id while the traceback goes to the server's log only."""

from __future__ import annotations

import logging
import secrets

log = logging.getLogger("grpo_ui")


class UserError(Exception):
    """A problem the user can fix (a bad field, an unreachable host, a database in the way); the message names it
    and says what to do, so it is shown as it is."""


def report(exc: BaseException) -> str:
    """Log ``exc`` with its traceback under a new error id; returns the id."""
    error_id = secrets.token_hex(4)
    log.error("error %s: %s", error_id, exc, exc_info=exc)
    return error_id


def describe(exc: Exception) -> str:
    """The text for the user: a UserError's own message, else an error id (the traceback is logged, never shown)."""
    if isinstance(exc, UserError):
        return str(exc)
    return f"Something went wrong (error id {report(exc)}); the details are logged under that id."
