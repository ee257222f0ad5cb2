"""The doctor's side of the door: its report on any logs — pasted, uploaded or files, whole or excerpts, one per
process — in the form the Diagnose page and ``doctor`` show (a stored job's logs: Workspace.report)."""

from __future__ import annotations

from grpo_ui.doctor.diagnose import Report, report
from grpo_ui.doctor.logfiles import LogFileError, from_texts, snapshot

__all__ = ["LogFileError", "Report", "report_of_files", "report_of_texts"]


def report_of_texts(texts: dict[str, bytes | str]) -> Report:
    """The report on logs given as texts, each named (a file's name, 'pasted log')."""
    return report(from_texts(texts))


def report_of_files(paths: list[str], job=None, quiet_for: float | None = None) -> Report:
    """The report on log files (LogFileError when one cannot be read); ``job`` is the spec they ran, ``quiet_for``
    how long ago they last grew (default: the newest file's modification time)."""
    return report(snapshot(paths, job, quiet_for))
