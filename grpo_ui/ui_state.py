"""What the app's pages need that is not Streamlit: the autosaved draft, presets, and field ⇄ form-text conversion."""

from __future__ import annotations

import functools
import os
import shlex
import time
import types
import typing
from pathlib import Path

from pydantic import BaseModel, TypeAdapter, ValidationError

from grpo_ui.private import private_dir, private_file, write_private
from grpo_ui.spec import ARGS, ArgDecl, JobSpec, SpecError, spec_from_yaml, spec_to_yaml

PRESETS = Path(__file__).parent / "data" / "presets"


def home() -> Path:
    """The app's data directory (draft, database), 0700; GRPO_UI_HOME overrides it."""
    return private_dir(Path(os.environ.get("GRPO_UI_HOME", Path.home() / ".local/share/grpo-ui")))


def load_draft() -> JobSpec:
    """The config in progress (see open_draft)."""
    return open_draft()[0]


def open_draft() -> tuple[JobSpec, str | None]:
    """The config in progress, as autosaved, and None; the first preset when there is none. A draft that no longer
    loads (unreadable, not valid, an unknown key) is kept aside as a backup, never overwritten: the preset comes
    with a notice that names the backup and why."""
    path = home() / "draft.yaml"
    preset = next(iter(presets().values()))
    if not path.exists():
        return preset, None
    try:
        return spec_from_yaml(private_file(path).read_text(), str(path)), None
    except (OSError, UnicodeDecodeError, SpecError) as e:
        backup = path.with_name(f"draft-unreadable-{time.strftime('%Y%m%d-%H%M%S')}.yaml")
        path.replace(backup)
        return preset, (f"Your saved draft could not be loaded, so a preset was opened; the draft is kept as "
                        f"{backup}. Why: {e}")


def save_draft(spec: JobSpec) -> None:
    write_private(home() / "draft.yaml", spec_to_yaml(spec))


def presets() -> dict[str, JobSpec]:
    """The shipped presets by name (read once: the form asks on every rerun)."""
    return dict(_presets())


@functools.cache
def _presets() -> dict[str, JobSpec]:
    return {p.stem: spec_from_yaml(p.read_text(), p.name) for p in sorted(PRESETS.glob("*.yaml"))}


def _parts(decl: ArgDecl) -> tuple[object, bool]:
    """(the annotation without None, whether None is allowed)."""
    ann = decl.annotation
    if typing.get_origin(ann) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(ann) if a is not type(None)]
        return args[0], len(args) < len(typing.get_args(ann))
    return ann, False


def widget_kind(decl: ArgDecl) -> str:
    """checkbox, select (Literal choices) or text (numbers, strings, lists)."""
    ann, optional = _parts(decl)
    if ann is bool and not optional:
        return "checkbox"
    if typing.get_origin(ann) is typing.Literal or ann is bool:
        return "select"
    return "text"


def choices(decl: ArgDecl) -> list:
    ann, optional = _parts(decl)
    values = [True, False] if ann is bool else list(typing.get_args(ann))
    return ([None] if optional else []) + values


def is_list(decl: ArgDecl) -> bool:
    return typing.get_origin(_parts(decl)[0]) is list


def form_value(decl: ArgDecl, spec: JobSpec):
    """The value a field's widget starts from: the spec's (ms-swift's default when unset), or the shell text an
    imported script left unresolved there."""
    if decl.path in spec.unresolved and decl.name not in getattr(spec, decl.section).model_fields_set:
        return spec.unresolved[decl.path]
    current = getattr(getattr(spec, decl.section), decl.name)
    kind = widget_kind(decl)
    if kind == "checkbox":
        return bool(current)
    if kind == "select":
        options = choices(decl)
        return current if current in options else options[0]
    return to_text(decl, current)


def changed_fields(spec: JobSpec, values: dict) -> dict:
    """{path: form value} of the fields the form sets: the ones set before, and the ones whose widget no longer shows
    its starting value. The others stay unset, so ms-swift's default keeps applying."""
    return {d.path: values[d.path] for d in ARGS
            if d.name in getattr(spec, d.section).model_fields_set or values[d.path] != form_value(d, spec)}


def to_text(decl: ArgDecl, value) -> str:
    if value is None:
        return ""
    if is_list(decl):
        return shlex.join(str(v) for v in value)
    return str(value)


def from_text(decl: ArgDecl, text: str):
    """Form text → field value; ValueError with a message for the field on bad input."""
    ann, optional = _parts(decl)
    text = text.strip()
    if not text:
        if is_list(decl):
            return None if optional else []
        if optional:
            return None
        if ann is str:
            return ""
        raise ValueError("required")
    try:
        if is_list(decl):
            item = TypeAdapter(typing.get_args(ann)[0])
            return [item.validate_strings(x) for x in shlex.split(text)]
        return TypeAdapter(ann).validate_strings(text)
    except ValueError as e:  # shlex errors and pydantic ValidationError are both ValueErrors
        if isinstance(e, ValidationError):
            raise ValueError(e.errors()[0]["msg"]) from None
        raise ValueError(str(e)) from None


def section_text(section: BaseModel) -> dict[str, str]:
    """A section of plain fields (``slurm``) as form text: empty when unset, a list one item per line."""
    return {name: "\n".join(value) if isinstance(value, list) else "" if value is None else str(value)
            for name, value in section}


def section_values(model: type[BaseModel], texts: dict[str, str]) -> dict:
    """Form text back to the section's values: empty → unset, lists by line; pydantic converts and checks the rest
    when the spec is validated (its errors name the field)."""
    out: dict = {}
    for name, text in texts.items():
        if typing.get_origin(model.model_fields[name].annotation) is list:
            out[name] = [line.strip() for line in text.splitlines() if line.strip()]
        else:
            out[name] = text.strip() or None
    return out
