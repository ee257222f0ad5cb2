"""Resumable log tails by byte offset: no line lost or repeated across reconnects, tqdm's \\r updates folded to
their latest state, and a bounded window in memory (the full log stays on the node)."""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Callable

from grpo_ui.doctor.rootcause import first_error_index


def fold_cr(line: str) -> str:
    """A line holding carriage-return updates (tqdm) → the last state shown."""
    if "\r" not in line:
        return line
    parts = [p for p in line.split("\r") if p.strip()]
    return parts[-1] if parts else ""


class LogTail:
    """Tail of one file through ``read(path, offset, limit) -> bytes``; ``offset`` always sits at a line start.

    Persist ``offset`` after each poll: a new LogTail from that offset continues exactly where this one stopped.
    ``pending`` is the unfinished last line as shown now (tqdm's bar between metric lines): when it changes, the
    run is alive although no new line arrived.
    """

    def __init__(self, read: Callable[[str, int, int], bytes], path: str, offset: int = 0, chunk: int = 1 << 20):
        self.read, self.path, self.offset, self.chunk = read, path, offset, chunk
        self.pending = ""

    def poll(self, max_bytes: int = 8 << 20) -> list[str]:
        """Complete new lines (decoded, \\r-folded); an unfinished last line waits for its newline."""
        lines: list[str] = []
        budget = max_bytes
        while budget > 0:
            data = self.read(self.path, self.offset, min(self.chunk, budget))
            if not data:
                break
            end = data.rfind(b"\n")
            if end < 0:
                if len(data) < self.chunk:
                    self.pending = fold_cr(data.decode("utf-8", "replace"))
                    break  # a partial line: wait for the rest
                end = len(data) - 1  # one enormous line: deliver it in pieces rather than stall
            block = data[: end + 1]
            self.offset += len(block)
            budget -= len(block)
            lines += [fold_cr(x) for x in block.decode("utf-8", "replace").split("\n")[:-1]]
            self.pending = fold_cr(data[end + 1:].decode("utf-8", "replace"))
            if len(data) < self.chunk:
                break
        return lines


class LogWindow:
    """The last ``size`` lines of one node's log, with their line numbers, for the viewer and triage."""

    def __init__(self, size: int = 5000):
        self.lines: deque[tuple[int, str]] = deque(maxlen=size)
        self.count = 0

    def extend(self, lines: list[str]) -> None:
        for line in lines:
            self.count += 1
            self.lines.append((self.count, line))

    def last(self, n: int) -> list[str]:
        return [t for _, t in list(self.lines)[-n:]]

    def search(self, pattern: str, regex: bool = False) -> list[tuple[int, str]]:
        if regex:
            rx = re.compile(pattern)
            return [(i, t) for i, t in self.lines if rx.search(t)]
        return [(i, t) for i, t in self.lines if pattern in t]

    def first_error(self) -> tuple[int, str] | None:
        at = first_error_index([t for _, t in self.lines])  # never a line of ms-swift's argument dump
        return self.lines[at] if at is not None else None
