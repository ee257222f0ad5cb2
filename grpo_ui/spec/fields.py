"""How a field is declared once: ``arg()`` for an ms-swift argument, ``setting()`` for one of grpo-ui's own, and the
declarations read back (``ArgDecl``, ``SettingDecl``) that the form, validation, argv rendering, YAML and the docs
iterate over. Which models declare what is grpo_ui.spec.model's registry."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Literal

from pydantic import BaseModel, Field

GROUPS = {
    "model": "Model & tuner",
    "rollout": "Rollout / vLLM",
    "server": "Rollout server (swift rollout)",
    "batch": "Batch & generation",
    "rl": "RL loss",
    "reward": "Reward",
    "data": "Data",
    "training": "Training",
    "output": "Output & logging",
    "parallel": "Megatron parallelism & memory",
    "ray": "Ray mode",
}

# The training engines a job can run on: ``swift rlhf`` (the transformers Trainer with DDP, DeepSpeed ZeRO or FSDP2)
# and ``megatron rlhf`` (Megatron-Core: tensor, pipeline, context and expert parallelism). Each argument says which
# accept it (``arg(engines=…)``); where the Megatron argument classes differ from swift rlhf's (a default, a name, the
# first version), ``arg(megatron={…})`` says how.
ENGINES = ("swift", "megatron")
SWIFT = ("swift",)
MEGATRON = ("megatron",)
COMMANDS = {"swift": "swift rlhf", "megatron": "megatron rlhf"}


def parse_version(text: str) -> tuple[int, int, int]:
    """'4.6' / '4.6.0.dev0' / 'v3.2.1' → (4, 6, 0). Raises ValueError naming the bad text."""
    m = re.match(r"^v?(\d+)\.(\d+)(?:\.(\d+))?", str(text).strip())
    if not m:
        raise ValueError(f"not an ms-swift version: {text!r} (expected e.g. 4.6 or 3.9.3)")
    return int(m[1]), int(m[2]), int(m[3] or 0)


def arg(default: Any, help: str, *, group: str, flag: str | None = None, since: str | None = None,
        until: str | None = None, old_name: str | None = None, renamed_in: str | None = None,
        choices: tuple | None = None, old_default: tuple[Any, str] | None = None,
        applies: Literal["colocate", "server"] | None = None, widget: Literal["text"] | None = None,
        engines: tuple[str, ...] = ENGINES, megatron: dict | None = None, instead: str | None = None,
        **bounds) -> Any:
    """Declare one ms-swift argument.

    since/until: first version that accepts it / first version that no longer does.
    old_name/renamed_in: the flag was called ``old_name`` before ``renamed_in``.
    choices: suggested values for free-text fields (the form offers them).
    old_default: (value, version): ms-swift's own default was ``value`` before ``version`` (what an unset field means
    for older targets).
    applies: the vLLM mode that alone uses it (the ``server`` section's arguments: server mode).
    widget: 'text' for a value that may span lines (a system prompt, inline JSON): a multi-line box that keeps the
    value exactly as written.
    engines: the training engines whose argument classes take it (ENGINES: both).
    megatron: what differs in ``megatron rlhf``'s argument classes: any of default, since, until, old_name,
    renamed_in, old_default (ArgDecl.on), values (the choices it takes, fewer than the annotation's) and integer
    (whole numbers only).
    instead: for an argument one engine lacks, what the other engine's job says instead (the fix the finding gives).
    """
    unknown = set(megatron or {}) - set(_ENGINE_KEYS)
    if unknown or not set(engines) <= set(ENGINES):
        raise TypeError(f"arg(): unknown engine or Megatron override {sorted(unknown) or engines}")
    extra = {"group": group, "flag": flag, "since": since, "until": until, "old_name": old_name,
             "renamed_in": renamed_in, "choices": list(choices) if choices else None,
             "old_default": list(old_default) if old_default else None, "applies": applies, "widget": widget,
             "engines": list(engines), "megatron": dict(megatron or {}), "instead": instead}
    return Field(description=help, json_schema_extra={"swift": extra}, **_default(default), **bounds)


_ENGINE_KEYS = ("default", "since", "until", "old_name", "renamed_in", "old_default", "values", "integer")


def _default(default: Any) -> dict:
    """A declared default as Field's keyword: a fresh copy per model for lists and dicts."""
    if isinstance(default, (list, dict)):
        return {"default_factory": lambda d=default: type(d)(d)}
    return {"default": default}


def setting(default: Any, help: str, *, applies: Literal["ssh", "slurm", "ray"] | None = None,
            widget: Literal["lines", "csv", "text"] | None = None, options: Callable[[], list[str]] | None = None,
            **constraints) -> Any:
    """Declare one grpo-ui setting: of the job, its cluster, a node or its Slurm request (not an ms-swift argument).

    applies: the backend that alone uses it. widget: how a list or mapping is written as text: 'lines' (one item per
    line) or 'csv' (items separated by commas); otherwise items separated by spaces, shell-quoted (a mapping as
    KEY=value items), in a multi-line box with 'text' (an item may span lines). Other widgets follow the type: bool a checkbox, Literal a choice, numbers a number within the
    bounds. options: a function listing the values to choose from (the current value is offered too). ``...`` as the
    default: required.
    """
    extra = {"applies": applies, "widget": widget, "options": options}
    return Field(description=help, json_schema_extra={"setting": extra}, **_default(default), **constraints)


@dataclass(frozen=True, kw_only=True)
class Decl:
    """One declared field, as read back from its declaration: its type, help, default, bounds and how a form edits
    it. Forms, validation, argv, YAML and docs read these, never the models' fields one by one."""

    section: str
    name: str
    help: str
    default: Any
    annotation: Any
    bounds: dict
    widget: str | None = None  # 'lines' / 'csv': how a list or mapping is written as text; 'text': a multi-line box
    applies: str | None = None  # the backend ('ssh', 'slurm', 'ray') or vLLM mode ('colocate', 'server') that alone uses it
    choices: tuple | None = None  # suggestions for a free-text field (arg())
    options: Callable[[], list[str]] | None = None  # the values to choose from (setting())
    required: bool = False

    @property
    def path(self) -> str:
        return f"{self.section}.{self.name}"

    def owner(self, spec: BaseModel, index: int | None = None) -> BaseModel:
        """The model in the job spec ``spec`` that holds this field."""
        return getattr(spec, self.section)


@dataclass(frozen=True, kw_only=True)
class ArgDecl(Decl):
    """One declared ms-swift argument (``arg()``)."""

    group: str
    flag: str
    since: str | None
    until: str | None
    old_name: str | None
    renamed_in: str | None
    old_default: tuple | None = None  # (ms-swift's default before a version, that version)
    engines: tuple[str, ...] = ENGINES  # the engines whose argument classes take it
    megatron: tuple = ()  # (key, value) pairs: what megatron rlhf's argument classes have instead (arg(megatron=…))
    instead: str | None = None  # on the engine that lacks it: what to set instead
    values: tuple | None = None  # the choices this engine takes when fewer than the annotation's (ArgDecl.on)
    integer: bool = False  # this engine takes whole numbers only (ArgDecl.on)

    def refuses(self, value) -> str | None:
        """Why this engine's parser refuses a value the annotation allows (its fewer choices, whole numbers), or
        None."""
        if self.values is not None and value not in self.values:
            return f"it takes {', '.join(map(str, self.values))}"
        if self.integer and isinstance(value, float) and not value.is_integer():
            return "it takes a whole number"
        return None

    def on(self, engine: str) -> ArgDecl:
        """This argument as the engine's argument classes have it (its default, first version and old name)."""
        if engine != "megatron" or not self.megatron:
            return self
        changes = dict(self.megatron)
        if "values" in changes:
            changes["values"] = tuple(changes["values"])
        if "old_default" in changes:
            changes["old_default"] = tuple(changes["old_default"]) if changes["old_default"] else None
        return replace(self, **changes)

    def accepted_in(self, version: str) -> bool:
        v = parse_version(version)
        return (self.since is None or v >= parse_version(self.since)) and (
            self.until is None or v < parse_version(self.until))

    def swift_default(self, version: str) -> Any:
        """ms-swift's own default in that version (what an omitted flag means there)."""
        if self.old_default and parse_version(version) < parse_version(self.old_default[1]):
            return self.old_default[0]
        return self.default

    def flag_for(self, version: str) -> str:
        """The flag name this version knows (the old name before a rename)."""
        if self.old_name and parse_version(version) < parse_version(self.renamed_in):
            return self.old_name
        return self.flag


@dataclass(frozen=True, kw_only=True)
class SettingDecl(Decl):
    """One declared grpo-ui setting (``setting()``): of the job, its cluster, each node (section 'node') or Slurm."""

    prefix: str  # where the section's fields live in a JobSpec ('cluster.nodes[i].' for a node's)

    @property
    def path(self) -> str:
        """Dotted path; a node setting's has ``[i]`` for the node's index (``path_at``)."""
        return self.prefix + self.name

    def path_at(self, index: int) -> str:
        return self.path.replace("[i]", f"[{index}]")

    @property
    def per_node(self) -> bool:
        return self.section == "node"

    def owner(self, spec: BaseModel, index: int | None = None) -> BaseModel:
        if self.section == "job":
            return spec
        if self.section == "node":
            return spec.cluster.nodes[index]
        return getattr(spec, self.section)


def _bounds(info) -> dict:
    out = {}
    for m in info.metadata:
        for key in ("ge", "gt", "le", "lt"):
            if getattr(m, key, None) is not None:
                out[key] = getattr(m, key)
    return out


def _common(section: str, name: str, info) -> dict:
    return {"section": section, "name": name, "help": info.description or "", "annotation": info.annotation,
            "default": info.get_default(call_default_factory=True), "bounds": _bounds(info)}


def arg_decls(section: str, model: type[BaseModel], applies: str | None = None) -> list[ArgDecl]:
    """The ms-swift arguments ``model`` declares (``applies``: the vLLM mode the whole section acts in)."""
    out = []
    for name, info in model.model_fields.items():
        sw = (info.json_schema_extra or {})["swift"]
        out.append(ArgDecl(**_common(section, name, info), applies=sw["applies"] or applies,
                           group=sw["group"], flag=sw["flag"] or name,
                           since=sw["since"], until=sw["until"], old_name=sw["old_name"],
                           renamed_in=sw["renamed_in"], choices=tuple(sw["choices"]) if sw["choices"] else None,
                           widget=sw.get("widget"), engines=tuple(sw["engines"]),
                           megatron=tuple(sorted(sw["megatron"].items())), instead=sw["instead"],
                           old_default=tuple(sw["old_default"]) if sw.get("old_default") else None))
    return out


def setting_decls(section: str, model: type[BaseModel], prefix: str, structure: set[str]) -> list[SettingDecl]:
    """The settings ``model`` declares; a field declared otherwise must be one of the spec's sections
    (``structure``)."""
    out = []
    for name, info in model.model_fields.items():
        extra = (info.json_schema_extra or {}).get("setting")
        if extra is None:
            if name not in structure:
                raise TypeError(f"{model.__name__}.{name} is not declared with setting()")
            continue
        out.append(SettingDecl(**_common(section, name, info), prefix=prefix, applies=extra["applies"], widget=extra["widget"],
                               options=extra["options"], required=info.is_required()))
    return out
