"""Fields by dotted path (``train.num_generations``, ``cluster.nodes[1].host``): read one, or a new validated spec
with some changed (one-click fixes, the form, make-it-fit)."""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel

from grpo_ui.spec.errors import SpecError
from grpo_ui.spec.model import JobSpec
from grpo_ui.spec.yaml_io import validate_spec

_PATH_PART = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)(?:\[(\d+)\])?")


def get_path(spec: JobSpec, path: str) -> Any:
    """Value at a dotted path such as ``train.num_generations`` or ``cluster.nodes[1].host``."""
    obj: Any = spec
    for part in path.split("."):
        m = _PATH_PART.fullmatch(part)
        if not m:
            raise KeyError(path)
        obj = getattr(obj, m[1])
        if m[2] is not None:
            obj = obj[int(m[2])]
    return obj


def _set_data(value: Any) -> Any:
    """A model's set fields as plain data (lists of models too); anything else unchanged."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="python", exclude_unset=True)
    if isinstance(value, list):
        return [_set_data(v) for v in value]
    return value


def _field(model: Any, part: str) -> re.Match:
    m = _PATH_PART.fullmatch(part)
    if m is None or m[1] not in type(model).model_fields:
        raise KeyError(part)
    return m


def with_changes(spec: JobSpec, changes: dict[str, Any]) -> JobSpec:
    """A new, validated spec with ``{dotted path: value}`` applied; the changed fields become set, the others keep
    their set/unset state. SpecError names a bad path or value."""
    data = _set_data(spec)
    for path, value in changes.items():
        *parents, leaf = path.split(".")
        obj, model = data, spec
        try:
            for part in parents:
                m = _field(model, part)
                model = getattr(model, m[1])
                obj = obj.setdefault(m[1], _set_data(model))
                if m[2] is not None:
                    model, obj = model[int(m[2])], obj[int(m[2])]
            m = _field(model, leaf)
            if m[2] is None:
                obj[m[1]] = value
            else:
                obj.setdefault(m[1], _set_data(getattr(model, m[1])))[int(m[2])] = value
        except (KeyError, IndexError, TypeError, AttributeError):
            raise SpecError([(path, "no such field")]) from None
    return validate_spec(data)
