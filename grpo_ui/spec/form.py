"""The job form without Streamlit: which widget each declared field gets, its value as form text and back, which
fields a filled-in form sets, and the node table (one row per node, one column per node setting).

Every field comes from the spec's declarations (``ARGS``, ``SETTINGS``), so a field declared there is on the form.
"""

from __future__ import annotations

import math
import shlex
import types
import typing
from typing import Any

from pydantic import TypeAdapter, ValidationError

from grpo_ui.spec.errors import SpecError
from grpo_ui.spec.fields import GROUPS, ArgDecl, Decl, SettingDecl
from grpo_ui.spec.model import ARGS, SETTINGS, JobSpec
from grpo_ui.spec.paths import with_changes

# The fields drawn as widgets (the node settings are the node table's columns).
FORM_FIELDS: tuple[Decl, ...] = (*ARGS, *(d for d in SETTINGS if not d.per_node))
FIELDS_BY_PATH: dict[str, Decl] = {d.path: d for d in FORM_FIELDS}
NODE_FIELDS: tuple[SettingDecl, ...] = tuple(d for d in SETTINGS if d.per_node)
ROW = "_node"  # hidden node-table column: which node of the spec a row shows (None for a row added in the table)


def parts(decl: Decl) -> tuple[Any, bool]:
    """(the annotation without None, whether None is allowed)."""
    ann = decl.annotation
    if typing.get_origin(ann) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(ann) if a is not type(None)]
        return args[0], len(args) < len(typing.get_args(ann))
    return ann, False


def is_list(decl: Decl) -> bool:
    return typing.get_origin(parts(decl)[0]) is list


def is_mapping(decl: Decl) -> bool:
    return typing.get_origin(parts(decl)[0]) is dict


def widget_kind(decl: Decl) -> str:
    """checkbox, select (Literal choices or a setting's options), lines (a multi-line box: one item per line, or a
    value that may span lines) or text (a one-line box: numbers, strings, lists)."""
    ann, optional = parts(decl)
    if decl.options or typing.get_origin(ann) is typing.Literal or (ann is bool and optional):
        return "select"
    if ann is bool:
        return "checkbox"
    return "lines" if decl.widget in ("lines", "text") else "text"


def column_kind(decl: Decl) -> str:
    """The node table's column for a field: checkbox, select or text (numbers too: an empty number cell then shows
    empty, not "None"; its text is checked like the form's)."""
    return widget_kind(decl)


def choices(decl: Decl, current: typing.Iterable = ()) -> list:
    """What a select offers: None (unset) when the field may be empty, the declared choices, then any ``current``
    value they lack."""
    ann, optional = parts(decl)
    options = decl.options() if decl.options else [True, False] if ann is bool else list(
        typing.get_args(ann))
    return ([None] if optional else []) + options + [v for v in dict.fromkeys(current) if v is not None
                                                     and v not in options]


def to_text(decl: Decl, value) -> str:
    """A value as the form writes it (see ``setting()`` for lists and mappings)."""
    if value is None:
        return ""
    if is_mapping(decl):
        value = [f"{k}={v}" for k, v in value.items()]
    if is_mapping(decl) or is_list(decl):
        items = [str(v) for v in value]
        return {"lines": "\n".join, "csv": ",".join}.get(decl.widget, shlex.join)(items)
    return str(value)


def _items(decl: Decl, text: str) -> list[str]:
    if decl.widget == "lines":
        return [line.strip() for line in text.splitlines() if line.strip()]
    if decl.widget == "csv":
        return [x.strip() for x in text.split(",") if x.strip()]
    return shlex.split(text)


def from_text(decl: Decl, text: str):
    """Form text → field value; ValueError with a message for the field on bad input."""
    ann, optional = parts(decl)
    if ann is str and decl.widget == "text" and text.strip():
        return text  # a system prompt or inline JSON: kept as written, line breaks and all
    text = text.strip()
    if not text:
        if is_list(decl) or is_mapping(decl):
            return None if optional else type(decl.default)()
        if optional:
            return None
        if ann is str and not decl.required:
            return ""
        raise ValueError("required")
    try:
        if is_mapping(decl):
            pairs = [item.partition("=") for item in _items(decl, text)]
            bad = [name for name, sep, _ in pairs if not sep]
            if bad:
                raise ValueError(f"write NAME=value, not {bad[0]!r}")
            return {name: value for name, _, value in pairs}
        if is_list(decl):
            item = TypeAdapter(typing.get_args(ann)[0])
            return [item.validate_strings(x) for x in _items(decl, text)]
        return TypeAdapter(ann).validate_strings(text)
    except ValueError as e:  # shlex errors and pydantic ValidationError are both ValueErrors
        if isinstance(e, ValidationError):
            raise ValueError(e.errors()[0]["msg"]) from None
        raise ValueError(str(e)) from None


def form_value(decl: Decl, spec: JobSpec):
    """The value a field's widget starts from: the spec's (its engine's ms-swift default when unset), or the shell text an
    imported script left unresolved there."""
    owner = decl.owner(spec)
    if decl.path in spec.unresolved and decl.name not in owner.model_fields_set:
        return spec.unresolved[decl.path]
    current = spec.value(decl) if isinstance(decl, ArgDecl) else getattr(owner, decl.name)
    kind = widget_kind(decl)
    if kind == "checkbox":
        return bool(current)
    if kind == "select":
        return current
    return to_text(decl, current)


def on_form(decl: Decl, spec: JobSpec, version: str, engine: str) -> bool:
    """Whether the form draws a field while it targets ``version`` and ``engine`` (the form's values of swift_version
    and engine; ``spec`` the form's starting spec): every grpo-ui setting; an ms-swift argument when that version of
    the engine takes it (num_infer_workers only 3.2–3.4, tensor_model_parallel_size only on megatron rlhf), or when
    ``spec`` sets it anyway, so it can be cleared (VERSION-FLAG-UNSUPPORTED or ENGINE-FLAG says why). A version that
    does not parse hides nothing (its own finding says so)."""
    if not isinstance(decl, ArgDecl) or decl.name in decl.owner(spec).model_fields_set:
        return True
    if engine not in decl.engines:
        return False
    try:
        return decl.on(engine).accepted_in(version)
    except ValueError:
        return True


# Drawn apart from their sections: the engine choice (beside the model) and the Megatron layout (beside the GPUs).
ENGINE_FIELDS = ("engine", "train.use_ray")
LAYOUT_FIELDS = {"train.tensor_model_parallel_size": "TP", "train.pipeline_model_parallel_size": "PP",
                 "train.context_parallel_size": "CP", "train.expert_model_parallel_size": "EP",
                 "train.expert_tensor_parallel_size": "ETP"}  # path → the short name Megatron's docs use
# The engine choice: what each sets (ms-swift's Ray mode is megatron rlhf with use_ray; swift rlhf GRPO has none)
ENGINE_CHOICES: dict[str, tuple[str, dict]] = {
    "swift": ("swift rlhf · DeepSpeed / FSDP", {"engine": "swift", "train.use_ray": False}),
    "megatron": ("megatron rlhf · Megatron-Core (TP, PP, CP, EP)", {"engine": "megatron", "train.use_ray": False}),
    "megatron-ray": ("megatron rlhf in ms-swift's Ray mode", {"engine": "megatron", "train.use_ray": True}),
}


def engine_choice(engine: str, use_ray: bool) -> str:
    """The ENGINE_CHOICES key of the form's engine and use_ray values."""
    return next(k for k, (_, v) in ENGINE_CHOICES.items()
                if v == {"engine": engine, "train.use_ray": bool(use_ray) and engine == "megatron"})


def apart(engine: str) -> tuple[str, ...]:
    """The arguments the form draws apart from their sections: the engine choice, and on megatron rlhf its layout
    (on swift rlhf the layout's sizes stay in their section, shown while set so they can be cleared)."""
    return (*ENGINE_FIELDS, *(LAYOUT_FIELDS if engine == "megatron" else ()))


def sections(spec: JobSpec, version: str, engine: str) -> list[str]:
    """The training settings' sections (GROUPS) with a field on the form for ``version`` and ``engine`` besides the
    ones drawn apart: a swift rlhf job has no Megatron section unless it sets one of its arguments."""
    shown = {d.group for d in ARGS if d.path not in apart(engine) and on_form(d, spec, version, engine)}
    return [g for g in GROUPS if g in shown]


# The Ray backend's two ways to a cluster and the settings each uses (the others keep their values, unused):
# ray_address set means the running cluster it names.
RAY_CLUSTERS: dict[str, tuple[str, tuple[str, ...]]] = {
    "start": ("Start one on the job's hosts", ("cluster.ray_port", "cluster.ray_dashboard_port", "cluster.ray_keep")),
    "existing": ("Use a running cluster (its Jobs API address)", ("cluster.ray_address",)),
}
RAY_SETTINGS = tuple(path for _, paths in RAY_CLUSTERS.values() for path in paths)


def ray_cluster(address_text: str | None) -> str:
    """The RAY_CLUSTERS key of the form's ray_address text (empty: grpo-ui starts the cluster)."""
    return "existing" if (address_text or "").strip() else "start"


def changed_fields(spec: JobSpec, values: dict) -> dict:
    """{path: form value} of the fields the form sets: the ones set before, and the ones whose widget no longer shows
    its starting value. The others stay unset, so their default (ms-swift's, for its arguments) keeps applying."""
    return {d.path: values[d.path] for d in FORM_FIELDS if d.path in values and (
        d.name in d.owner(spec).model_fields_set or values[d.path] != form_value(d, spec))}


# ---------------------------------------------------------------------------------------------------------------
# The node table

# The node table's first columns: what every node sets, never behind a sideways scroll at 1440 px
LEADING_COLUMNS = ("host", "role", "gpus", "gpu_model")


def node_columns(spec: JobSpec | None = None) -> list[str]:
    """The node table's columns in the order a reader needs them: LEADING_COLUMNS, then the other node settings as
    declared; with ``spec``, only those of the others that some node of it sets (a read-only table)."""
    rest = [d.name for d in NODE_FIELDS if d.name not in LEADING_COLUMNS]
    if spec is not None:
        rest = [name for name in rest if any(name in n.model_fields_set for n in spec.cluster.nodes)]
    return [*LEADING_COLUMNS, *rest]


def node_rows(spec: JobSpec) -> list[dict]:
    """One row per node: its settings as the table shows them (text columns as form text), and ROW."""
    return [{**{d.name: _cell(d, getattr(node, d.name)) for d in NODE_FIELDS}, ROW: i}
            for i, node in enumerate(spec.cluster.nodes)]


def _cell(decl: SettingDecl, value):
    """A cell as the table shows it: form text, or the value; empty (not "None") when unset."""
    if column_kind(decl) in ("text", "lines"):
        return to_text(decl, value)
    return "" if value is None else value


def _blank(value) -> bool:
    return value is None or value == "" or (isinstance(value, float) and math.isnan(value))


def _row_values(row: dict, i: int, errors: dict[str, str]) -> dict:
    """A row's cells as field values (blank cells: None); bad text goes to ``errors`` by field path."""
    out = {}
    for d in NODE_FIELDS:
        cell = row.get(d.name)
        if column_kind(d) not in ("text", "lines"):
            out[d.name] = None if _blank(cell) else cell
            continue
        try:
            out[d.name] = from_text(d, "" if _blank(cell) else str(cell))
        except ValueError as e:
            errors[d.path_at(i)] = str(e)
    if out.get("gpus") == []:  # never a silent default of GPU 0
        errors[f"cluster.nodes[{i}].gpus"] = "empty: list the CUDA device ids this node uses, e.g. 0,1,2,3"
    return out


def nodes_from_rows(spec: JobSpec, rows: list[dict], errors: dict[str, str]) -> list[dict]:
    """The nodes the table describes, as data for ``cluster.nodes`` (rows without a host are skipped). A row that
    shows a node of ``spec`` keeps that node's set fields and sets the cells that differ from it; a new row sets its
    non-blank cells. Cells that do not parse go to ``errors`` (field path → message)."""
    out = []
    for i, row in enumerate(rows):
        if _blank(row.get("host")):
            continue
        values = _row_values(row, i, errors)
        try:
            shown = spec.cluster.nodes[int(row.get(ROW))]
        except (TypeError, ValueError, IndexError):  # a row added in the table (None, or NaN)
            out.append({k: v for k, v in values.items() if v not in (None, [], {})})
            continue
        current = shown.model_dump()
        out.append({**shown.model_dump(exclude_unset=True),
                    **{k: v for k, v in values.items() if v != current[k]}})
    return out


def build_spec(base: JobSpec, values: dict, rows: list[dict]) -> tuple[JobSpec, dict[str, str]]:
    """The spec the form describes (``values``: form value by field path; ``rows``: the node table), and the fields
    whose text does not parse (path → message). Only fields set before or changed on the form are set; a value typed
    over an imported script's unresolved text replaces it, and settles what a partial import could not read there."""
    errors: dict[str, str] = {}
    changes = {}
    for path, raw in changed_fields(base, values).items():
        decl = FIELDS_BY_PATH[path]
        if widget_kind(decl) in ("text", "lines"):
            try:
                raw = from_text(decl, raw)
            except ValueError as e:
                errors[path] = str(e)
                continue
        changes[path] = raw
    nodes = nodes_from_rows(base, rows, errors)
    if nodes and nodes != [n.model_dump(exclude_unset=True) for n in base.cluster.nodes]:
        changes["cluster.nodes"] = nodes
    for key in ("unresolved", "import_errors"):  # a field filled in settles what the import left open there
        left = {p: t for p, t in getattr(base, key).items()
                if not any(p == c or p.startswith((f"{c}.", f"{c}[")) for c in changes)}
        if left != getattr(base, key):
            changes[key] = left
    try:
        return with_changes(base, changes), errors
    except SpecError as e:
        errors.update(dict(e.problems))
        return base, errors
