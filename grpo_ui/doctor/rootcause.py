"""Root cause of a failed run: the first failing rank and node, its error line and the lines before it.

torchrun ends a failed node's log with a summary whose "Root Cause (first observed failure)" entry names the rank,
its exit code or signal and the time; across nodes the earliest such time wins (then the earliest time-stamped error
line, then node order). The error line is the failing rank's exception line, or torchrun's report of its death when
a signal killed it — never a line of ms-swift's argument dump such as ``ignore_args_error=False,``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

CONTEXT_LINES = 30
ROOT_CAUSE = "Root Cause (first observed failure):"
FIELD = re.compile(r"^\s*(time|host|rank|exitcode|traceback)\s*:\s*(.*)$")
RANK_FIELD = re.compile(r"(\d+)\s*\(local_rank:\s*(\d+)\)")
TORCHRUN_TIME = re.compile(r"(\d{4})-(\d\d)-(\d\d)_(\d\d):(\d\d):(\d\d)")
# glog-style stamps of torch's C++ and elastic lines: "[E1124 12:29:22.462000 …" or "E1124 12:29:22.462000 18607 …"
GLOG_TIME = re.compile(r"(?:^|\]:?\[?|^\[)[EWIF](\d\d)(\d\d) (\d\d):(\d\d):(\d\d(?:\.\d+)?)")
ELASTIC_FAILED = re.compile(r"failed \(exitcode: (-?\d+)\) local_rank: (\d+) \(pid: (\d+)\)")
# what a rank dies of when another one died first (torchrun's stop signal, a peer's socket closing): within the same
# second, such a failure is not the first one
CONSEQUENCE = re.compile(r"SIGTERM|Connection closed by peer|Connection reset by peer|remote worker crashing|"
                         r"NCCL communicator was aborted")
RANK_PREFIX = re.compile(r"^\[(?:rank|default)(\d+)\]:\s?")
TB_START = "Traceback (most recent call last):"
TB_CHAIN = ("During handling of the above exception", "The above exception was the direct cause")
ARGS_DUMP_START = re.compile(r"\bargs: \w+Arguments\($")
ARGS_DUMP_LINE = re.compile(r"^[A-Za-z_][\w.]*=.*,?$")
WARNING_LINE = re.compile(r"\bWARNING\b|\[WARNING|^(?:\[rank\d+\]:)?\[?W\d{4} |\bWarning:")
# an error line: an exception class, an ERROR level, an error: prefix, or the failure words torch and the kernel print
ERROR_LINE = re.compile(r"Traceback \(most recent call last\)|\b[A-Z]\w*(?:Error|Exception)\b(?!=)|\bERROR\b|\berror:|"
                        r"CUDA out of memory|"
                        r"Watchdog caught|Killed\b|Segmentation fault|failed \(exitcode")


@dataclass
class Failure:
    """Where a run failed first, as one node's log tells it."""

    node: str
    rank: int | None          # global rank
    local_rank: int | None
    host: str | None
    when: tuple | None        # (month, day, h, m, s): comparable across nodes (same year assumed)
    exit: str | None          # "exit code 1", "signal 6 (SIGABRT)"
    error: str                # the error line
    context: list[str]        # up to CONTEXT_LINES lines before it

    @property
    def where(self) -> str:
        rank = f", rank {self.rank} (local rank {self.local_rank})" if self.rank is not None else ""
        return f"{self.node}{rank}"


def args_dump_lines(lines: list[str]) -> set[int]:
    """Indexes of the lines of ms-swift's ``args: RLHFArguments(`` dump (one ``key=value,`` per line, then ``)``)."""
    out: set[int] = set()
    inside = False
    for i, line in enumerate(lines):
        inside = inside or bool(ARGS_DUMP_START.search(line))
        if inside:
            out.add(i)
            inside = line.strip() != ")"
    return out


def is_error_line(line: str) -> bool:
    return bool(ERROR_LINE.search(line)) and not ARGS_DUMP_LINE.match(line.strip()) and not WARNING_LINE.search(line)


def first_error_index(lines: list[str]) -> int | None:
    """The first error line of a log, skipping the argument dump."""
    dump = args_dump_lines(lines)
    return next((i for i, line in enumerate(lines) if i not in dump and is_error_line(line)), None)


def _stamp(line: str) -> tuple | None:
    if m := TORCHRUN_TIME.search(line):
        return tuple(int(x) for x in m.groups()[1:5]) + (float(m[6]),)
    if m := GLOG_TIME.search(line):
        return tuple(int(x) for x in m.groups()[:4]) + (float(m[5]),)
    return None


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


def traceback_span(lines: list[str], i: int) -> tuple[list[int], int | None]:
    """Indexes of the traceback that starts at ``lines[i]`` through its exception line (chained exceptions
    followed), and the rank that printed it when torchrun prefixed its lines; other ranks' lines are left out."""
    m = RANK_PREFIX.match(lines[i])
    prefix, rank = (m[0], int(m[1])) if m else ("", None)
    own = [k for k in range(i + 1, len(lines)) if lines[k].startswith(prefix)]
    span = [i]
    for n, k in enumerate(own):
        span.append(k)
        body = lines[k][len(prefix):]
        if not body.strip() or body[0] in " \t" or body.startswith((TB_START, *TB_CHAIN)):
            continue  # a frame, its code and carets, or the hand-over to a chained exception
        after = next((b for j in own[n + 1:] if (b := lines[j][len(prefix):]).strip()), "")
        if not after.startswith(TB_CHAIN):
            break  # the exception line
    return span, rank


def exception_line(lines: list[str], rank: int | None) -> int | None:
    """Index of the exception line that ends the first traceback printed by ``rank`` (lines prefixed ``[rankN]:``,
    or any traceback when ``rank`` is None)."""
    for i, line in enumerate(lines):
        m = RANK_PREFIX.match(line)
        if TB_START in line and (rank is None or not m or int(m[1]) == rank):
            return traceback_span(lines, i)[0][-1]
    return None


def node_failure(node: str, lines: list[str]) -> Failure | None:
    """Where this node's log says the run failed first; None when it shows no failure."""
    cause = torchrun_root_cause(lines)
    if cause:
        rank, local = cause["rank"], cause["local_rank"]
        code = cause.get("exitcode", "")
        signal = re.search(r"Signal (\d+) \((\w+)\)", cause.get("traceback", ""))
        exit_text = f"signal {signal[1]} ({signal[2]})" if signal else f"exit code {code.split()[0]}" if code else None
        at = exception_line(lines, rank) if not signal else None  # torch prefixes tracebacks with the global rank
        if at is None:  # killed by a signal, or no traceback: torchrun's line reporting the death
            at = next((i for i, line in enumerate(lines) if (m := ELASTIC_FAILED.search(line))
                       and int(m[2]) == local), None)
        if at is None:
            at = next(i for i in range(len(lines) - 1, -1, -1) if ROOT_CAUSE in lines[i])
        return Failure(node, rank, local, cause.get("host"), _stamp(cause.get("time", "")), exit_text, lines[at],
                       lines[max(0, at - CONTEXT_LINES):at])
    at = exception_line(lines, None)
    if at is None:
        return None
    m = RANK_PREFIX.match(lines[at])
    stamps = [s for line in lines[:at + 1] if is_error_line(line) and (s := _stamp(line))]
    return Failure(node, int(m[1]) if m else None, None, None, stamps[0] if stamps else None, None, lines[at],
                   lines[max(0, at - CONTEXT_LINES):at])


def root_cause(logs: dict[str, list[str]]) -> Failure | None:
    """The first failure across the nodes' logs (given in node order): the earliest, then one that is not a
    consequence of another, then the first node."""
    found = [f for node, lines in logs.items() if (f := node_failure(node, lines))]
    if not found:
        return None
    order = {node: k for k, node in enumerate(logs)}
    return min(found, key=lambda f: (f.when is None, f.when or (), bool(CONSEQUENCE.search(f"{f.exit} {f.error}")),
                                     order[f.node]))
