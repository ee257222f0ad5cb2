"""Root cause of a failed run: the first failing process — node (or log file), rank or process — its error line and
the lines before it.

torchrun ends a failed node's log with a summary whose "Root Cause (first observed failure)" entry names the rank,
its exit code or signal and the time; the error line is then that rank's first exception line, or torchrun's report
of its death when a signal killed it. A log without that summary (an excerpt, a rollout server's log, another
trainer's) gives its first error as events.py reads it: its first cause or death report, else its first consequence.
Across logs the earliest wins (to the second), then a cause over a consequence over noise, then the first log
given. Never a line of ms-swift's argument dump such as ``ignore_args_error=False,``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from grpo_ui.doctor.events import ROLE_ORDER, Event, args_dump_lines, first_failure, scan
from grpo_ui.doctor.lines import parse
from grpo_ui.doctor.signatures import CAUSE

CONTEXT_LINES = 30
ROOT_CAUSE = "Root Cause (first observed failure):"
FIELD = re.compile(r"^\s*(time|host|rank|exitcode|traceback)\s*:\s*(.*)$")
RANK_FIELD = re.compile(r"(\d+)\s*\(local_rank:\s*(\d+)\)")
TORCHRUN_TIME = re.compile(r"(\d{4})-(\d\d)-(\d\d)_(\d\d):(\d\d):(\d\d)")
ARGS_DUMP_LINE = re.compile(r"^[A-Za-z_][\w.]*=.*,?$")
WARNING_LINE = re.compile(r"\bWARNING\b|\[WARNING|^(?:\[rank\d+\]:)?\[?W\d{4} |\bWarning:")
# an error line: an exception class, an ERROR level, an error: prefix, or the failure words torch and the kernel print
ERROR_LINE = re.compile(r"Traceback \(most recent call last\)|\b[A-Z]\w*(?:Error|Exception)\b(?!=)|\bERROR\b|\berror:|"
                        r"CUDA out of memory|"
                        r"Watchdog caught|Killed\b|Segmentation fault|failed \(exitcode")


@dataclass
class Failure:
    """Where a run failed first, as one log tells it."""

    node: str
    rank: int | None          # global rank
    local_rank: int | None
    host: str | None
    when: tuple | None        # (month, day, h, m, s): comparable across nodes (same year assumed)
    exit: str | None          # "exit code 1", "signal 6 (SIGABRT)"
    error: str                # the error line
    context: list[str]        # up to CONTEXT_LINES lines before it
    event: Event | None = None  # what the error line is, when the doctor knows it
    process: str | None = None  # the process that printed it (a Ray actor, a vLLM worker)
    summary: bool = False     # named by torchrun's failure summary

    @property
    def where(self) -> str:
        parts = [self.node] + ([self.process] if self.process else [])
        if self.rank is not None:
            parts.append(f"rank {self.rank}" + (f" (local rank {self.local_rank})" if self.local_rank is not None
                                                else ""))
        elif self.local_rank is not None:
            parts.append(f"local rank {self.local_rank}")
        return ", ".join(parts)

    @property
    def role(self) -> int:
        return ROLE_ORDER[self.event.sig.role] if self.event else ROLE_ORDER[CAUSE]


def is_error_line(line: str) -> bool:
    return bool(ERROR_LINE.search(line)) and not ARGS_DUMP_LINE.match(line.strip()) and not WARNING_LINE.search(line)


def first_error_index(lines: list[str]) -> int | None:
    """The first error line of a log, skipping the argument dump."""
    dump = args_dump_lines(lines)
    return next((i for i, line in enumerate(lines) if i not in dump and is_error_line(line)), None)


def _stamp(text: str) -> tuple | None:
    m = TORCHRUN_TIME.search(text)
    return tuple(int(x) for x in m.groups()[1:]) if m else None


def torchrun_root_cause(lines: list[str]) -> dict | None:
    """The fields of torchrun's root-cause entry (time, host, rank, local_rank, exitcode, traceback), if any."""
    start = next((i for i in range(len(lines) - 1, -1, -1) if ROOT_CAUSE in lines[i]), None)
    if start is None:
        return None
    fields: dict = {}
    for line in lines[start + 1:start + 12]:
        if line.startswith("="):
            break
        if m := FIELD.match(line):
            fields[m[1]] = m[2].strip()
    if m := RANK_FIELD.search(fields.get("rank", "")):
        fields["rank"], fields["local_rank"] = int(m[1]), int(m[2])
    else:
        fields["rank"] = fields["local_rank"] = None
    return fields


def _from_torchrun(node: str, lines: list[str], cause: dict, events: list[Event]) -> Failure:
    rank, local = cause["rank"], cause["local_rank"]
    code = cause.get("exitcode", "")
    signal = re.search(r"Signal (\d+) \((\w+)\)", cause.get("traceback", ""))
    exit_text = f"signal {signal[1]} ({signal[2]})" if signal else f"exit code {code.split()[0]}" if code else None
    raised = [e for e in events if e.exception and e.sig.role == CAUSE]
    own = [e for e in raised if e.rank == rank] or [e for e in raised if e.rank is None]
    died = [e for e in events if e.local_rank == local and e.exit]
    # torch prefixes a rank's traceback with its global rank; killed by a signal, the rank wrote no error of its
    # own: then torchrun's line reporting its death
    found = own[0] if own and not signal else died[0] if died else None
    # without a line of its own, the summary's entry is the evidence: its "rank :" field names who failed
    heading = next(i for i in range(len(lines) - 1, -1, -1) if ROOT_CAUSE in lines[i])
    named = next((k for k in range(heading + 1, min(len(lines), heading + 12))
                  if (m := FIELD.match(lines[k])) and m[1] == "rank"), heading)
    at = found.index if found else named
    return Failure(node, rank, local, cause.get("host"), _stamp(cause.get("time", "")), exit_text, lines[at],
                   lines[max(0, at - CONTEXT_LINES):at], found, summary=True)


def node_failure(node: str, lines: list[str], events: list[Event] | None = None) -> Failure | None:
    """Where this log says the run failed first; None when it shows no failure."""
    events = scan(node, lines) if events is None else events
    cause = torchrun_root_cause(lines)
    if cause:
        return _from_torchrun(node, lines, cause, events)
    first = first_failure(events)
    if first is None:
        return None
    return Failure(node, first.rank, first.local_rank, None, first.line.stamp or _nearest_stamp(lines, first.index),
                   first.exit, lines[first.index], lines[max(0, first.index - CONTEXT_LINES):first.index], first,
                   first.line.process)


def _nearest_stamp(lines: list[str], i: int, reach: int = CONTEXT_LINES) -> tuple | None:
    """The time of the closest line before ``lines[i]`` that has one, else of the closest after it (a traceback
    carries no time; the launcher's lines around it do)."""
    for k in [*range(i - 1, max(-1, i - reach - 1), -1), *range(i + 1, min(len(lines), i + reach + 1))]:
        if stamp := parse(lines[k]).stamp:
            return stamp
    return None


def root_cause(logs: dict[str, list[str]], events: dict[str, list[Event]] | None = None) -> Failure | None:
    """The first failure across the logs (given in node order): the earliest to the second, then a cause over a
    consequence over noise, then the first log."""
    events = events or {}
    found = [f for node, lines in logs.items() if (f := node_failure(node, lines, events.get(node)))]
    if not found:
        return None
    order = {node: k for k, node in enumerate(logs)}
    return min(found, key=lambda f: (f.when is None, f.when[:4] + (int(f.when[4]),) if f.when else (), f.role,
                                     order[f.node]))
