"""Log files of any run → the doctor's Snapshot (what the `doctor` command and the Diagnose page diagnose).

Each file is one process's output — a node's or rank's, a rollout server's, in node order — an excerpt of one
(pasted from an issue), a ``logging.jsonl``, or ``py-spy dump`` output. What the doctor needs to know about the run
comes from the job spec when given, else from ms-swift's own argument dump in the log (``args: RLHFArguments(`` …
``logging_steps=5,`` …). The run's state is what the logs can tell: succeeded (ms-swift's end line), failed
(torchrun's failure summary, or the logs end in an uncaught error), running (the logs show the run start and nothing
ended it), else unknown (an excerpt).
"""

from __future__ import annotations

import ast
import os
import re
import time
from pathlib import Path

from grpo_ui.doctor.events import PROGRESS, Event, args_dump_lines
from grpo_ui.doctor.logs import fold_cr
from grpo_ui.doctor.metrics import parse_jsonl_line, printed_rows
from grpo_ui.doctor.rootcause import torchrun_root_cause
from grpo_ui.doctor.snapshot import Snapshot, job_settings
from grpo_ui.doctor.stacks import THREAD, parse_dumps
from grpo_ui.spec.model import JobSpec
from grpo_ui.spec.resolve import DEFAULT_BETA, GROUP_PORT, resolve, rollout_steps

END_OF_RUN = "End time of running main"
CHILD_FAILED = "ChildFailedError"
WORLD = re.compile(r"\bworld_size: (\d+)")
SAVE = re.compile(r"Saving model checkpoint to (\S+)")
RUN_SH = re.compile(r"^run sh: `(.*)`$")
SERVER_MODE = re.compile(r"(?:Start connecting|Connected) to vLLM server")  # ms-swift logs these in server mode
# what a process prints when it starts its work: a log that has one is a run's log, not an excerpt of it
RUN_START = re.compile(r"^run sh: `|Start time of running main|\bargs: \w+Arguments\(|The logging file will be saved "
                       r"in|(?:Start connecting|Connected) to vLLM server|Started server process|"
                       r"Starting vLLM API server|\*{5} Running training \*{5}")
TRAINING_KEYS = {"loss", "grad_norm", "reward", "learning_rate", "kl"}  # a printed dict with these and no step: a step


HEAD, TAIL = 4 << 20, 60 << 20  # bytes of a large log the doctor reads: its start and its end


class LogFileError(Exception):
    """A file the doctor cannot read, with its path."""


def read_lines(path: Path) -> tuple[list[str], float]:
    """The file's lines (tqdm's carriage-return updates folded to their last state) and its modification time. Of
    a file over HEAD + TAIL bytes only its head (the command line, the argument dump) and its tail (the last steps,
    how it ended) are read; give logging.jsonl too for every step's metrics."""
    try:
        with open(path, "rb") as f:
            size, mtime = os.fstat(f.fileno()).st_size, os.fstat(f.fileno()).st_mtime
            if size <= HEAD + TAIL:
                data = f.read()
            else:
                head = f.read(HEAD)
                f.seek(size - TAIL)
                data = head + f"\n… {size - HEAD - TAIL} bytes left out …\n".encode() + f.read()
    except OSError as e:
        raise LogFileError(f"{path}: cannot read it ({e.strerror or e})") from None
    return split_lines(data), mtime


def split_lines(data: bytes) -> list[str]:
    """Text as the doctor reads it: lines, tqdm's carriage-return updates folded, of a text over HEAD + TAIL bytes
    its head and tail."""
    if len(data) > HEAD + TAIL:
        data = data[:HEAD] + f"\n… {len(data) - HEAD - TAIL} bytes left out …\n".encode() + data[-TAIL:]
    return [fold_cr(line) for line in data.decode("utf-8", "replace").split("\n")]


def kind(lines: list[str]) -> str:
    """'jsonl' (logging.jsonl), 'stacks' (py-spy dump output) or 'log'."""
    body = [line for line in lines if line.strip()]
    if body and all(line.lstrip().startswith('{"') for line in body[:20]):
        return "jsonl"
    if any(line.startswith("Python v") for line in body) and any(THREAD.match(line) for line in body):
        return "stacks"
    return "log"


def dumped_args(lines: list[str]) -> dict[str, str]:
    """The run's arguments as its log shows them: the flags of the ``run sh:`` command line ms-swift prints first,
    then its full argument dump (printed once the arguments are parsed): name → value as printed."""
    out = {}
    for line in lines:
        if m := RUN_SH.match(line):
            words = m[1].split()
            out.update({w[2:]: v for w, v in zip(words, words[1:] + [""], strict=True) if w.startswith("--")})
            break
    for i in sorted(args_dump_lines(lines)):
        name, sep, value = lines[i].strip().partition("=")
        if sep:
            out[name] = value.rstrip(",")
    return out


def _int(value, default: int) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


def _ports(value: str | None) -> tuple[int, ...]:
    try:
        ports = ast.literal_eval(value) if value else None
    except (ValueError, SyntaxError):
        return ()
    ports = ports if isinstance(ports, list) else [ports]
    return tuple(p for p in ports if isinstance(p, int))


def _run_settings(args: dict[str, str], job: JobSpec | None) -> dict:
    """The run's settings the rules need, from the job spec or else the argument dump."""
    if job is not None:
        return job_settings(resolve(job))
    accum = _int(args.get("gradient_accumulation_steps"), 1)
    steps = rollout_steps(_int(args.get("steps_per_generation"), accum), accum, _int(args.get("num_iterations"), 1))
    return {"logging_steps": _int(args.get("logging_steps"), 1), "steps_per_generation": steps,
            "beta": float(args["beta"]) if args.get("beta", "None") != "None" else DEFAULT_BETA,
            "server_mode": args.get("use_vllm", "").lower() == "true" and args.get("vllm_mode") == "server",
            "group_ports": _ports(args.get("vllm_server_group_port"))}


def _ended_in_error(lines: list[str], events: list[Event]) -> bool:
    """Whether a log ends in an uncaught error: an exception line or a fatal error with no progress after it."""
    fatal = [e for e in events if e.exception or e.sig.fatal]
    return bool(fatal) and not any(PROGRESS.search(line) for line in lines[fatal[-1].index + 1:])


def _state(logs: dict[str, list[str]], events: dict[str, list[Event]], excerpt: bool) -> str:
    lines = [line for node in logs.values() for line in node]
    if any(CHILD_FAILED in line for line in lines) or any(torchrun_root_cause(node) for node in logs.values()):
        return "failed"
    if any(END_OF_RUN in line for line in lines):
        return "succeeded"
    if any(_ended_in_error(logs[node], events[node]) for node in logs):
        return "failed"
    return "unknown" if excerpt else "running"


def _checkpoints(logs: dict[str, list[str]]) -> dict[str, list[str]]:
    """The checkpoint directories the logs name that exist here, with the files in them."""
    out = {}
    for lines in logs.values():
        for line in lines:
            if (m := SAVE.search(line)) and os.path.isdir(m[1]):
                root = Path(m[1])
                out[m[1]] = sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())
    return out


def snapshot(paths: list[str | Path], job: JobSpec | None = None, quiet_for: float | None = None,
             now: float | None = None) -> Snapshot:
    """Read the files and build the Snapshot the doctor diagnoses. ``quiet_for``: seconds since the logs last grew
    (default: from the newest file's modification time)."""
    now = time.time() if now is None else now
    files = {}
    newest = 0.0
    paths = [Path(p) for p in paths]
    names = [p.name for p in paths]
    for p in paths:  # each file by its name; by its folder too where two share a name (node0/train.log)
        files[p.name if names.count(p.name) == 1 else f"{p.parent.name}/{p.name}"], mtime = read_lines(p)
        newest = max(newest, mtime)
    return from_lines(files, job, now - (quiet_for if quiet_for is not None else max(now - newest, 0.0)), now)


def _metrics(files: dict[str, list[str]], kinds: dict[str, str]):
    """Every step's metrics (logging.jsonl given, else what the logs print) and the lines each step came from.
    Rows that print no step (TRL's dicts, tables without a step column) are numbered after the last one seen."""
    rows = []
    for name, lines in files.items():
        if kinds[name] == "jsonl":
            rows += [(*r, [line]) for line in lines if (r := parse_jsonl_line(line)) and r[0] is not None]
    if not rows:
        rows = [r for name, lines in files.items() if kinds[name] == "log" for r in printed_rows(lines)
                if r[0] is not None or TRAINING_KEYS & set(r[1])]
    metrics: dict[str, list[tuple[int, float]]] = {}
    sources: dict[int, list[str]] = {}
    step = 0
    numbered = []
    for found, values, source in rows:
        step = found if found is not None else step + 1
        numbered.append((step, values, source))
    for step, values, source in sorted(numbered, key=lambda r: r[0]):
        sources[step] = source
        for k, v in values.items():
            series = metrics.setdefault(k, [])
            if series and series[-1][0] == step:
                series[-1] = (step, v)
            else:
                series.append((step, v))
    return metrics, sources


def from_texts(texts: dict[str, bytes | str], job: JobSpec | None = None, source: str = "logs") -> Snapshot:
    """The Snapshot of logs given as text — pasted, uploaded — name → text, in node order. When they last grew is
    not known, so liveness is not judged."""
    files = {name: split_lines(text.encode() if isinstance(text, str) else text) for name, text in texts.items()}
    return from_lines(files, job, None, time.time(), source)


def from_lines(files: dict[str, list[str]], job: JobSpec | None, last_grew: float | None, now: float,
               source: str = "logs") -> Snapshot:
    """The Snapshot of files already read (name → lines, in node order) that last grew at ``last_grew`` (None: not
    known, so liveness is not judged). ``source``: "logs" (files of any run), or "job" (a job grpo-ui launched)."""
    kinds = {name: kind(lines) for name, lines in files.items()}
    logs = {name: lines for name, lines in files.items() if kinds[name] == "log"}
    stacks = [st for name, lines in files.items() if kinds[name] == "stacks"
              for st in parse_dumps("\n".join(lines), name)]
    metrics, sources = _metrics(files, kinds)
    all_lines = [line for lines in logs.values() for line in lines]
    settings = _run_settings(dumped_args(all_lines), job)
    world = next((int(m[1]) for line in all_lines if (m := WORLD.search(line))), None)
    server_mode = settings["server_mode"] or any(SERVER_MODE.search(line) for line in all_lines)
    excerpt = job is None and not any(RUN_START.search(line) for line in all_lines)
    snap = Snapshot(metrics=metrics, logs=logs, beta=settings["beta"], now=now if last_grew is not None else 0.0,
                    last_output_at=dict.fromkeys(logs, last_grew) if last_grew is not None else {},
                    server_mode=server_mode, settings={"world_size": world},
                    logging_steps=settings["logging_steps"], steps_per_generation=settings["steps_per_generation"],
                    group_ports=settings["group_ports"] or (GROUP_PORT,), stacks=stacks, checkpoints=_checkpoints(logs),
                    source=source, excerpt=excerpt, metric_lines=sources)
    snap.job_state = _state(logs, snap.events, excerpt)
    return snap
