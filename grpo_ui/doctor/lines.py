"""One log line as the doctor reads it: the message, with what printed it peeled off.

Lines reach users through many hands: torch prefixes a rank's output with ``[rank3]:``, its C++ side with a glog
stamp (``[E816 00:34:01.133 ProcessGroupNCCL.cpp:629]``), vLLM with ``ERROR 08-15 03:15:55 [file.py:56]``, ms-swift
with ``[INFO:swift]``, Python's logging with a date, Ray with the actor (``(WorkerDict pid=833, ip=…)``), vLLM
with its process (``(EngineCore_DP0 pid=413)``, ``(VllmWorker rank=3 pid=44710)``), docker
compose with the service (``vllm-1  | ``), terminals with colour codes, tqdm with a bar glued in front, log viewers
with box borders. ``parse`` peels these off in any order and keeps what they said: the rank, the process, the
level and the time.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]|^\[\d+(?:;\d+)*m")  # an escape, or its remnant at the start of a paste
BORDER = "│┃║"
# Each decoration, anchored at the start of what is left of the line; named groups say what it tells.
DECORATIONS = [
    re.compile(r"\[?(?:rank|default)(?P<rank>\d+)\]:\s?"),                       # torchrun's [rank3]: (or cut: rank3]:)
    # the process: Ray's actor (WorkerDict pid=1, ip=10.0.0.1), vLLM's (EngineCore_DP0 pid=4), (VllmWorker rank=3 pid=7)
    re.compile(r"\((?P<process>[A-Za-z_][\w.:-]*(?:,? \w+=[\w.:-]+)*)\)\s"),
    re.compile(r"[\w.-]+ +\| (?=\S)"),                                             # docker compose: vllm-1  |
    re.compile(r"(?P<level>DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL) (?P<month>\d\d)-(?P<day>\d\d) "
               r"(?P<time>\d\d:\d\d:\d\d(?:\.\d+)?) (?:\[[^\]]*\]|[\w.]+:\d+\])\s?"),  # vLLM
    re.compile(r"\[?(?P<level>[EWIF])?(?:(?P<md>\d{3,4}) (?P<time>\d\d:\d\d:\d\d(?:\.\d+)?)(?: +\d+)?)? ?"
               r"[\w./<>-]+\.(?:cpp|cc|hpp|h|py):\d+\]\s?"),       # glog, torch: [E816 00:34:01.1 File.cpp:629]
    re.compile(r"\[(?P<level>DEBUG|INFO|WARNING|ERROR):[\w.]+\]\s?"),              # ms-swift: [INFO:swift]
    # dates (docker's --timestamps: RFC 3339 with a zone), with the level where logging's format puts it:
    # "%(asctime)s - %(levelname)s - %(name)s -" (open-r1, transformers' examples), "… - %(name)s - %(levelname)s -",
    # loguru's "… | LEVEL | name |"
    re.compile(r"\[?\d{4}-(?P<month>\d\d)-(?P<day>\d\d)[ T_](?P<time>\d\d:\d\d:\d\d)(?:[,.]\d+)?(?:Z|[+-]\d\d:?\d\d)?\]?"
               r"(?: - (?:[\w.]+ - )?(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL)(?: - [\w.]+)? -"
               r"| \| (?P<lvl2>[A-Z]+) +\| [\w.:]+ \|)?\s?"),
    # DeepSpeed's logger (deepspeed/utils/logging.py: "[%(asctime)s] [%(levelname)s] [%(filename)s:%(lineno)d:
    # %(funcName)s]"), after its date
    re.compile(r"\[(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL)\] (?:\[[\w.]+:\d+:\w+\] ?)?"),
    re.compile(r"(?P<level>INFO|WARNING|ERROR):\s+(?=\S)"),                         # uvicorn: INFO:     1.2.3.4 - …
    re.compile(r"(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL):[\w.]+:(?=\S)"),        # logging's default format
    re.compile(r"(?:[\w ]+:)?\s*\d+%\|[^|]*\|\s*\d+/\d+\s*\[[^\]]*\](?=\S)"),       # a tqdm bar glued in front
]
# Any decoration at all (one pass instead of one per decoration: most lines have none left to peel)
ANY_DECORATION = re.compile("|".join(f"(?:{re.sub(r'[(][?]P<[a-z0-9]+>', '(?:', rx.pattern)})" for rx in DECORATIONS))
LEVELS = {"E": "error", "ERROR": "error", "CRITICAL": "error", "F": "error", "W": "warning", "WARNING": "warning",
          "WARN": "warning", "I": "info", "INFO": "info", "DEBUG": "info"}


@dataclass(slots=True)  # not frozen: a frozen dataclass's __init__ costs 4× as much, once per line of a log
class Line:
    raw: str                 # as it stands in the file
    body: str                # the message (indentation kept: traceback frames and code stay recognisable)
    rank: int | None = None
    process: str | None = None
    level: str | None = None  # error / warning / info, where the printer said
    stamp: tuple | None = None  # (month, day, hour, minute, second) where the printer said

    @property
    def text(self) -> str:
        """The raw line as evidence (colour codes and a log viewer's borders taken off), bounded."""
        line = ANSI.sub("", self.raw)
        if line.lstrip()[:1] in BORDER and line.strip():
            line = line.strip().strip(BORDER).strip()
        return line if len(line) <= 600 else line[:600] + " …"


def parse(raw: str) -> Line:
    rest = (ANSI.sub("", raw) if "\x1b" in raw or raw[:1] == "[" else raw).rstrip().rstrip(BORDER).rstrip()
    found: dict[str, str] = {}
    while True:
        stripped = rest.lstrip(" \t" + BORDER)
        if not ANY_DECORATION.match(stripped):
            break
        for rx in DECORATIONS:
            m = rx.match(stripped)
            if m and m.end():
                found.update({k: v for k, v in m.groupdict().items() if v and k not in found})
                rest = stripped[m.end():]
                break
        else:
            break
    stamp = None
    if "md" in found:
        found["month"], found["day"] = found["md"][:-2], found["md"][-2:]
    if "time" in found and "month" in found:
        h, mi, s = found["time"].split(":")
        stamp = (int(found["month"]), int(found["day"]), int(h), int(mi), float(s))
    return Line(raw, rest, int(found["rank"]) if "rank" in found else None, found.get("process"),
                LEVELS.get(found.get("level", found.get("lvl2", ""))), stamp)
