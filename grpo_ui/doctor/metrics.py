"""Training metrics: ms-swift's logging.jsonl lines and, as a fallback or from another trainer, what a log prints:
the dicts ms-swift and TRL print on stdout, verl's ``step:N - key:value - …`` lines, a plain table of metrics.

What is printed is read from the printers' own formats, and as people paste it: the dict transformers' callbacks
print (``print(logs)`` in ms-swift's PrinterCallbackNew, ``str(logs)`` with floats formatted as strings in
transformers' ProgressCallback.on_log, which TRL uses), also with its braces cut off or wrapped over several lines;
verl's ``concat_dict_to_str`` (``step:N - key:value``, values as pprint.pformat writes them, numpy's
``np.float64(0.5)`` included); a table — Markdown, `` | ``-separated as GitHub renders a pasted notebook table,
tab- or space-separated — with transformers' NotebookProgressCallback's "No Log" in cells it has no value for.

ms-swift 3.x and 4.x keys come out under the same names: ``seconds_per_step`` (from 4.x train_speed(s/it) or 3.x
train_speed(iter/s)), ``step`` / ``max_steps`` from ``global_step/max_steps``, times in seconds; other trainers'
names for the same quantities (ALIASES) come out under ms-swift's too.

megatron rlhf writes from its last global rank: 4.x the same dict with ``iteration: 'N/M'`` in place of
``global_step/max_steps`` and no epoch (swift/megatron/callbacks/print.py PrintCallback.on_log, also appended to
logging.jsonl); 3.x Megatron-LM's own line, ``iteration   2/   624 | consumed samples: … | elapsed time per
iteration (ms): 3988.6 | memory(GiB): 83.46 | elapsed time: 3m 8s | remaining time: … | loss: -2.5E-02 | … |``
(its training_log with ms-swift's additions), read by ``parse_megatron_lm_line``: the iteration's own time as
``iteration_time_s`` (not a running average), ``learning rate`` / ``grad norm`` under ms-swift's names.
"""

from __future__ import annotations

import ast
import json
import re

from pydantic_core import SchemaValidator
from pydantic_core import core_schema as cs

OUTPUT_DIR = re.compile(r"\[INFO:swift\] (?:args\.)?output_dir: (\S+)")  # megatron rlhf prints args.output_dir
LOGGING_FILE = re.compile(r"(?:The logging file will be saved in|\] logging_path): (\S+logging\.jsonl)")
_DURATION = re.compile(r"(?:(\d+)d)?\s*(?:(\d+)h)?\s*(?:(\d+)m)?\s*(?:(\d+)s)?")
# other trainers' names → ms-swift's (verl's actor/critic keys, older TRL, the columns of hand-made tables)
ALIASES = {"actor/grad_norm": "grad_norm", "actor/pg_loss": "loss", "critic/score/mean": "reward", "actor/kl_loss": "kl",
           "response_length/clip_ratio": "completions/clipped_ratio", "response_length/mean": "completions/mean_length",
           "completion_length": "completions/mean_length", "reward_mean": "reward", "clipped_ratio":
           "completions/clipped_ratio", "mean_length": "completions/mean_length", "training_loss": "loss"}
VERL_STEP = re.compile(r"\bstep:(\d+) - ")
VERL_PAIR = re.compile(r"([\w/@.()%-]+):(?:np\.\w+\()?(-?(?:\d+\.?\d*(?:e[-+]?\d+)?|nan|inf))\)?(?= - |\s*$)")
TABLE_CELL = re.compile(r"^[A-Za-z][\w/()%. -]*$")
NUMBER = re.compile(r"^-?(?:\d+\.?\d*(?:e[-+]?\d+)?|nan|inf)$", re.IGNORECASE)
NO_VALUE = {"", "no log", "-", "n/a", "none"}  # a table cell that holds no value (NotebookProgressCallback: "No Log")
RULE_ROW = re.compile(r"^[\s|:+-]*-[\s|:+-]*$")  # a table's rule: |---|:--:| or -- | --


def duration_s(text: str) -> float | None:
    """'1d 2h 3m 4s' / '3m 4s' / '4s' → seconds."""
    m = _DURATION.fullmatch(text.strip())
    if not m or not any(m.groups()):
        return None
    d, h, mi, s = (int(x or 0) for x in m.groups())
    return ((d * 24 + h) * 60 + mi) * 60 + s


def normalize(raw: dict) -> tuple[int | None, dict[str, float]]:
    """One logged dict → (step, numeric metrics under version-independent names); the end-of-training summary
    (train_runtime, train_loss, …) has step None."""
    out: dict[str, float] = {}
    step = None
    summary = "train_runtime" in raw
    for key, value in raw.items():
        if key in ("global_step/max_steps", "iteration"):
            a, _, b = str(value).partition("/")
            step, out["max_steps"] = int(a), float(b)
        elif key in ("elapsed_time", "remaining_time"):
            sec = duration_s(str(value))
            if sec is not None:
                out[key + "_s"] = sec
        elif key == "train_speed(s/it)":
            out["seconds_per_step"] = float(value)
        elif key == "train_speed(iter/s)":
            out["seconds_per_step"] = 1.0 / float(value) if float(value) else float("inf")
        elif key == "percentage":
            out["percentage"] = float(str(value).rstrip("%"))
        else:
            try:
                out[key] = float(value)
            except (TypeError, ValueError):
                continue
    return (None if summary else step), aliased(out)


def aliased(out: dict[str, float]) -> dict[str, float]:
    """Other trainers' keys also under ms-swift's name (where ms-swift's own is not there)."""
    for key, name in ALIASES.items():
        if key in out and name not in out:
            out[name] = out[key]
    return out


def _optional(alias: str, schema: dict) -> dict:
    return cs.typed_dict_field(schema, required=False, validation_alias=alias)


# One Rust pass per logging.jsonl line: JSON parsing, the float check of every metric and the renaming of swift's tail
# keys; the few string keys left are finished in _finish. Lines the schema rejects (the end-of-run summary with
# nested dicts, nulls, numbers written as strings) take the general path through normalize, with the same result.
_LINE = SchemaValidator(cs.typed_dict_schema({
    "seconds_per_step": _optional("train_speed(s/it)", cs.float_schema()),
    "iter_per_s": _optional("train_speed(iter/s)", cs.float_schema()),
    "progress": _optional("global_step/max_steps", cs.str_schema()),
    "iteration": _optional("iteration", cs.str_schema()),
    "elapsed_time": _optional("elapsed_time", cs.str_schema()),
    "remaining_time": _optional("remaining_time", cs.str_schema()),
    "percentage": _optional("percentage", cs.str_schema()),
}, extra_behavior="allow", extras_schema=cs.float_schema(strict=True), config={"cache_strings": "keys"}))


def _cached(fn, size: int = 4096):
    """``fn`` memoised in a plain dict (cheaper per hit than lru_cache; cleared when full)."""
    memo: dict = {}

    def get(text: str):
        if (hit := memo.get(text)) is None:
            if len(memo) >= size:
                memo.clear()
            hit = memo[text] = (fn(text),)
        return hit[0]
    return get


def _progress(text: str) -> tuple[int, float]:
    a, _, b = text.partition("/")
    return int(a), float(b)


_progress_of, _seconds_of = _cached(_progress), _cached(duration_s)


def _finish(out: dict) -> tuple[int | None, dict[str, float]]:
    step = None
    if (progress := out.pop("progress", None) or out.pop("iteration", None)) is not None:
        step, out["max_steps"] = _progress_of(progress)
    if (text := out.pop("elapsed_time", None)) is not None and (sec := _seconds_of(text)) is not None:
        out["elapsed_time_s"] = sec
    if (text := out.pop("remaining_time", None)) is not None and (sec := _seconds_of(text)) is not None:
        out["remaining_time_s"] = sec
    if "iter_per_s" in out:
        speed = out.pop("iter_per_s")
        out["seconds_per_step"] = 1.0 / speed if speed else float("inf")
    if "percentage" in out:
        out["percentage"] = float(out["percentage"].rstrip("%"))
    return (None if "train_runtime" in out else step), aliased(out)


def parse_jsonl_line(line: str | bytes) -> tuple[int | None, dict[str, float]] | None:
    """One logging.jsonl line → (step, metrics) as ``normalize`` gives them; None for a line that is not a JSON
    object."""
    try:
        return _finish(_LINE.validate_json(line))
    except ValueError:  # a ValidationError, or a tail value of an unexpected shape
        pass
    try:
        raw = json.loads(line)
    except json.JSONDecodeError:
        return None
    return normalize(raw) if isinstance(raw, dict) else None


PAIR = re.compile(r"""['"]([^'"]+)['"]:\s*['"]?(-?(?:\d+\.?\d*(?:e[-+]?\d+)?|nan|NaN|inf|Infinity)|\d+/\d+)['"]?"""
                  r"(?=[,}\s]|$)")
BARE_DICT = re.compile(r"""^\s*['"][\w/().%@ -]+['"]:\s*['"]?-?(?:\d|nan|NaN|inf)""")  # a dict pasted without its {


def _dict_start(line: str) -> int:
    """Where a printed dict starts in the line: its brace, or the first key of one pasted without it; -1: none."""
    start = line.find("{'")
    if start < 0:
        start = line.find('{"')
    if start >= 0 or line.lstrip()[:1] not in ("'", '"') or not BARE_DICT.match(line):
        return start
    return len(line) - len(line.lstrip())


def parse_stdout_line(line: str) -> tuple[int | None, dict[str, float]] | None:
    """A dict printed by rank 0 (a Python literal, or JSON), possibly glued to a tqdm bar; also one cut short, pasted
    without its braces or holding ``nan`` (read pair by pair); None for other lines."""
    start = _dict_start(line)
    if start < 0:
        return None
    if line[start] == "{":
        text = line[start:line.rfind("}") + 1]
        try:
            raw = ast.literal_eval(text) if line[start + 1] == "'" else json.loads(text)
            return normalize(raw) if isinstance(raw, dict) else None
        except (ValueError, SyntaxError):
            pass
    raw = dict(PAIR.findall(line[start:]))
    return normalize(raw) if len(raw) >= 2 else None


MEGATRON_LM = re.compile(r"\biteration\s+(\d+)/\s*(\d+) \|")
# Megatron-LM's training_log names → ms-swift's (the rest keep theirs: loss, kl, reward, memory(GiB) …)
MEGATRON_LM_NAMES = {"learning rate": "learning_rate", "grad norm": "grad_norm", "global batch size":
                     "global_batch_size", "consumed samples": "consumed_samples", "loss scale": "loss_scale",
                     "num zeros": "num_zeros", "number of skipped iterations": "skipped_iterations",
                     "number of nan iterations": "nan_iterations"}


def parse_megatron_lm_line(line: str) -> tuple[int, dict[str, float]] | None:
    """megatron rlhf 3.x's ``iteration  N/  M | key: value | …`` line (module docstring) → (step, metrics); None for
    other lines."""
    m = MEGATRON_LM.search(line)
    if not m:
        return None
    out = {"max_steps": float(m[2])}
    for field in line[m.end():].split("|"):
        key, sep, value = (x.strip() for x in field.partition(":"))
        if not sep or not key:
            continue
        if key in ("elapsed time", "remaining time"):
            if (sec := duration_s(value)) is not None:
                out[key.replace(" ", "_") + "_s"] = sec
        elif key == "elapsed time per iteration (ms)":
            out["iteration_time_s"] = float(value) / 1000
        elif NUMBER.match(value):
            out[MEGATRON_LM_NAMES.get(key, key)] = float(value)
    return int(m[1]), aliased(out)


def parse_printed_line(line: str) -> tuple[int | None, dict[str, float]] | None:
    """One line of a trainer's stdout: the dict ms-swift prints (parse_stdout_line) or Megatron-LM's line."""
    return parse_stdout_line(line) or parse_megatron_lm_line(line)


def _wrapped_dict(lines: list[str], i: int, start: int) -> list[str]:
    """The lines of a printed dict that starts at ``lines[i][start]``: that line, and where it does not close there
    (a terminal or a paste wrapped it), the lines that continue it up to the closing brace."""
    source = [lines[i]]
    if "}" in lines[i][start:]:
        return source
    for line in lines[i + 1:i + 40]:
        if "{" in line or not (PAIR.search(line) or line.strip().endswith("}")):
            break
        source.append(line)
        if "}" in line:
            return source
    return source[:1]


def parse_verl_line(line: str) -> tuple[int | None, dict[str, float]] | None:
    """verl's console line ``step:3 - actor/grad_norm:0.12 - critic/score/mean:0.4 - …``; None for other lines."""
    m = VERL_STEP.search(line)
    if not m:
        return None
    pairs = {k: float(v) for k, v in VERL_PAIR.findall(line[m.end():])}
    return int(m[1]), aliased(pairs)


KNOWN = {"loss", "grad_norm", "reward", "reward_std", "kl", "completions/clipped_ratio", "completions/mean_length",
         "frac_reward_zero_std"}  # a table whose header names two of these is a table of training metrics


def _cells(line: str) -> list[str]:
    """A table row's cells: between tabs, between pipes (Markdown, or `` | `` as GitHub renders a pasted table),
    else between runs of spaces."""
    text = line.strip()
    if "\t" in text:
        return [c.strip() for c in text.split("\t")]
    if text.startswith("|") or " | " in text:
        return [c.strip() for c in text.strip("|").split("|")]
    return text.split()


def _row(header: list[str], cells: list[str]) -> dict[str, float] | None:
    """A data row under ``header``: its numbers by column (cells without a value left out); None when it is not
    one (another width, a first cell that is no number, or text where numbers should be)."""
    if len(cells) != len(header) or not NUMBER.match(cells[0]):
        return None
    row, words = {}, 0
    for name, cell in zip(header, cells, strict=True):
        if NUMBER.match(cell):
            row[name] = float(cell)
        elif cell.lower() not in NO_VALUE:
            words += 1
    return row if words == 0 and len(row) >= 2 else None


def parse_table(lines: list[str]) -> list[tuple[int | None, dict[str, float], int]]:
    """Rows of a metrics table (Markdown, pipe-, tab- or space-separated columns) under a header naming at least two
    metrics the doctor knows (loss, grad_norm, reward…): (step or None, metrics, line index) per row."""
    out, header = [], None
    for i, line in enumerate(lines):
        if header and RULE_ROW.match(line):
            continue
        cells = _cells(line)
        if len(cells) >= 3 and all(TABLE_CELL.match(c) for c in cells):
            names = [c.lower().replace(" ", "_") for c in cells]
            header = names if len({ALIASES.get(n, n) for n in names} & KNOWN) >= 2 else None
        elif header and (row := _row(header, cells)) is not None:
            step = row.pop("step", None)
            out.append((int(step) if step is not None else None, aliased(row), i))
        elif header and line.strip() and "..." not in line:
            header = None
    return out


def printed_rows(lines: list[str]) -> list[tuple[int | None, dict[str, float], list[str]]]:
    """The metrics a log prints, in order: (step or None where the line has none, metrics, the lines they came
    from) — ms-swift's and TRL's dicts, Megatron-LM's iteration lines, verl's step lines (a line wrapped by the paste is joined with what
    continues it), plain tables. The end-of-training summary is left out."""
    rows: list[tuple[int, int | None, dict[str, float], list[str]]] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if (start := _dict_start(line)) >= 0:
            source = _wrapped_dict(lines, i, start)
            i += len(source) - 1
            dict_row = parse_stdout_line("".join(x.rstrip("\n") for x in source))
            if dict_row is not None and "train_runtime" not in dict_row[1]:
                rows.append((i, *dict_row, source))
        elif (megatron_row := parse_megatron_lm_line(line)) is not None:
            rows.append((i, *megatron_row, [line]))
        elif VERL_STEP.search(line):
            source = [line]
            while (i + 1 < len(lines) and not VERL_STEP.search(lines[i + 1])
                   and len(VERL_PAIR.findall(lines[i + 1])) >= 2):
                i += 1
                source.append(lines[i])
            rows.append((i, *parse_verl_line("".join(x.rstrip("\n") for x in source)), source))
        i += 1
    rows += [(k, step, values, [lines[k]]) for step, values, k in parse_table(lines)]
    return [(step, values, source) for _, step, values, source in sorted(rows, key=lambda r: r[0])]


def logging_file(lines: list[str]) -> str | None:
    """Where the writing rank (swift rlhf's rank 0, megatron rlhf's last) puts logging.jsonl, from its node's log
    lines."""
    for line in lines:
        if m := LOGGING_FILE.search(line):
            return m[1]
        if m := OUTPUT_DIR.search(line):
            return m[1].rstrip("/") + "/logging.jsonl"
    return None


def parse_completion_line(line: str) -> list[dict]:
    """One completions.jsonl line → one dict per completion (step, prompt, completion, one column per reward,
    advantages…). ms-swift 4.x writes each logging step as columns (lists of equal length); rows are kept as they are."""
    try:
        data = json.loads(line)
    except json.JSONDecodeError:
        return []
    if not isinstance(data, dict) or "completion" not in data:
        return []
    if not isinstance(data["completion"], list):
        return [data]
    n = len(data["completion"])
    cols = {k: v if isinstance(v, list) and len(v) == n else [v] * n for k, v in data.items()}
    rows = [{k: cols[k][i] for k in cols} for i in range(n)]
    for row in rows:
        try:
            row["step"] = int(row.get("step"))
        except (TypeError, ValueError):
            row["step"] = None
    return rows


def completions_file(logging_path: str, ray: bool = False) -> str:
    """completions.jsonl sits next to logging.jsonl in the run dir (when log_completions is on); in ms-swift's Ray
    mode the driver writes it in the unversioned output_dir, the parent of the workers' versioned run dir that holds
    logging.jsonl (swift/ray/megatron/base_trainer.py, driver_utils.py build_dataset_from_dict)."""
    run_dir = logging_path.rsplit("/", 1)[0]
    return (run_dir.rsplit("/", 1)[0] if ray else run_dir) + "/completions.jsonl"
