"""A JobSpec in and out of YAML text and files: only the set fields are written; what is read is checked for size,
depth and aliases before it is parsed, then validated with every bad field named."""

from __future__ import annotations

from pathlib import Path

import yaml
from pydantic import ValidationError

from grpo_ui.spec.errors import SpecError
from grpo_ui.spec.model import JobSpec


def _path_of(loc: tuple) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "spec"


def validate_spec(data: dict, source: str = "spec") -> JobSpec:
    """dict → JobSpec, or SpecError naming every bad field and why."""
    try:
        return JobSpec.model_validate(data)
    except ValidationError as e:
        raise SpecError([(_path_of(err["loc"]), err["msg"]) for err in e.errors()], source) from None


def spec_to_yaml(spec: JobSpec) -> str:
    """YAML with only the set fields (plus name and version); loads back to an equal spec, set fields included."""
    data = spec.model_dump(mode="json", exclude_unset=True)
    data = {"name": spec.name, "swift_version": spec.swift_version, **data}
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=120)


YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml's safe loader when PyYAML has it (~10× faster)
MAX_YAML_BYTES = 1 << 20  # a job spec is a few KiB
MAX_YAML_DEPTH = 32  # a job spec nests 4 deep; libyaml's loaders recurse per level (deep input crashes or raises)
_OPEN = (yaml.BlockMappingStartToken, yaml.BlockSequenceStartToken, yaml.FlowMappingStartToken,
         yaml.FlowSequenceStartToken)
_CLOSE = (yaml.BlockEndToken, yaml.FlowMappingEndToken, yaml.FlowSequenceEndToken)


def check_yaml_limits(text: str, source: str = "spec") -> None:
    """Size, nesting depth and aliases of a YAML text, checked with PyYAML's pure-Python scanner (iterative, and it
    reads only a few tokens ahead, unlike libyaml's) before anything is parsed: a deep ``[[[[…]]]]`` overflows the
    recursive parsers, and aliases can expand a small file into billions of items. Raises SpecError."""
    size = len(text.encode("utf-8", "surrogateescape"))
    if size > MAX_YAML_BYTES:
        raise SpecError([("spec", f"{size} bytes is more than a job spec needs (limit {MAX_YAML_BYTES})")], source)
    depth = 0
    try:
        for token in yaml.scan(text, Loader=yaml.SafeLoader):
            if isinstance(token, _OPEN):
                depth += 1
                if depth > MAX_YAML_DEPTH:
                    raise SpecError([("spec", f"nested more than {MAX_YAML_DEPTH} levels deep (line "
                                              f"{token.start_mark.line + 1}); a job spec needs 4")], source)
            elif isinstance(token, _CLOSE):
                depth -= 1
            elif isinstance(token, (yaml.AliasToken, yaml.AnchorToken)):
                raise SpecError([("spec", f"anchors and aliases (&name, *name; line {token.start_mark.line + 1}) "
                                          "are not accepted in a job spec: write the values out")], source)
    except yaml.YAMLError as e:
        raise SpecError([("spec", f"not valid YAML: {e}")], source) from None


def spec_from_yaml(text: str, source: str = "spec") -> JobSpec:
    check_yaml_limits(text, source)
    try:
        data = yaml.load(text, Loader=YAML_LOADER) or {}
    except yaml.YAMLError as e:
        raise SpecError([("spec", f"not valid YAML: {e}")], source) from None
    if not isinstance(data, dict):
        raise SpecError([("spec", "the top level must be a mapping of sections")], source)
    return validate_spec(data, source)


def load_spec(path: str | Path) -> JobSpec:
    p = Path(path)
    try:
        with open(p, "rb") as f:
            raw = f.read(MAX_YAML_BYTES + 1)
        text = raw.decode("utf-8")
    except OSError as e:
        raise SpecError([("spec", f"cannot read {p}: {e.strerror}")], str(p)) from None
    except UnicodeDecodeError as e:
        raise SpecError([("spec", f"not UTF-8 text (byte {e.start}): save the file as UTF-8")], str(p)) from None
    return spec_from_yaml(text, str(p))


def save_spec(spec: JobSpec, path: str | Path) -> None:
    Path(path).write_text(spec_to_yaml(spec))
