"""Expanded swift invocations → JobSpec + findings: config files spliced in the way ms-swift does, flags onto declared
fields (unknown ones kept verbatim), the environment, and the cluster each script describes."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from grpo_ui.core.findings import Finding, finding
from grpo_ui.importer.bash import Invocation, Notice, Word
from grpo_ui.spec.errors import SpecError
from grpo_ui.spec.fields import parse_version
from grpo_ui.spec.model import JobSpec
from grpo_ui.spec.swift_cli import FLAG_LIFETIMES, SERVER_FLAGS, TRAIN_FLAGS, coerce, flag_missing_in, stands_alone
from grpo_ui.spec.yaml_io import validate_spec

CONFIG_SUFFIXES = (".yaml", ".yml", ".json")



@dataclass
class Flag:
    """``--name v1 v2`` as written (``raw`` keeps the spelling, ``name`` has dashes read as underscores)."""

    raw: str
    values: list[Word]
    line: int

    @property
    def name(self) -> str:
        return self.raw.replace("-", "_")

    def tokens(self) -> list[str]:
        return [f"--{self.raw}", *(w.text for w in self.values)]


@dataclass
class Call:
    """One invocation with its config file spliced in: kind, flags in argv order, environment, where it came from."""

    kind: str
    flags: list[Flag]
    env: dict[str, Word]
    source: str
    line: int
    program: str = "swift"  # swift, or megatron (megatron rlhf)

    def text(self, key: str) -> str | None:
        w = self.env.get(key)
        return None if w is None or w.unresolved else w.text


@dataclass
class Sources:
    """Where referenced config files may be read from: uploaded files by name, and (CLI only) a local directory."""

    files: dict[str, bytes] = field(default_factory=dict)
    local_dir: Path | None = None

    def read(self, path: str) -> bytes | None:
        for name in (path, Path(path).name):
            if name in self.files:
                return self.files[name]
        if self.local_dir is not None:
            p = Path(path) if Path(path).is_absolute() else self.local_dir / path
            try:
                return p.read_bytes()
            except OSError:
                return None
        return None


def split_flags(args: list[Word]) -> tuple[list[Word], list[Flag]]:
    """(positional words before the first flag, flags); ``--k=v`` is split as argparse does."""
    positional: list[Word] = []
    flags: list[Flag] = []
    for w in args:
        if w.text.startswith("--") and len(w.text) > 2 and not w.unresolved:
            raw, eq, value = w.text[2:].partition("=")
            flags.append(Flag(raw, [Word(value, w.line)] if eq else [], w.line))
        elif flags:
            flags[-1].values.append(w)
        else:
            positional.append(w)
    return positional, flags


def _config_flags(path: Word, sources: Sources, call_source: str, findings: list[Finding]) -> tuple[
        list[Flag], dict[str, Word]]:
    """A YAML/JSON config's keys as flags (lists expanded, dicts as JSON, scalars as str, as ms-swift's CLI does)
    and its ENV block; a finding when the file was not given."""
    config = read_config(path, sources, call_source, findings)
    if config is None:
        return [], {}
    env = {str(k): Word(str(v), path.line) for k, v in (config.pop("ENV", None) or {}).items()}
    return flags_of(config, path.line), env


def flags_of(config: dict, line: int, ray: bool = False) -> list[Flag]:
    """A config's keys as the flags ms-swift makes of them: lists expanded, dicts as JSON, scalars as str (its CLI,
    swift/cli/main.py parse_yaml_args), booleans lower-case and None left out in a Ray config (driver_utils.py
    _dict_to_argv)."""
    flags = []
    for key, value in config.items():
        if ray and value is None:
            continue
        items = value if isinstance(value, list) else [
            json.dumps(value, ensure_ascii=False) if isinstance(value, dict) else value]
        flags.append(Flag(str(key), [Word(str(v).lower() if ray and isinstance(v, bool) else str(v), line)
                                     for v in items], line))
    return flags


def read_config(path: Word, sources: Sources, call_source: str, findings: list[Finding]) -> dict | None:
    """A YAML/JSON config a script names, as a mapping; a finding and None when it was not given or is not one. A
    path only the script's shell knows (``"$SCRIPT_DIR/x.yaml"``) is read from the uploaded file of that name."""
    name = Path(path.unresolved.strip("'\"")).name if path.unresolved else path.text
    data = sources.read(name)
    if path.unresolved and data is not None:
        findings.append(finding("IMPORT-CONFIG-BY-NAME", "info", "spec", f"{call_source} line {path.line} reads "
                                f"{path.unresolved}; the imported {name} (beside the script) was taken for it.",
                                "Nothing to do if that is the file the script reads."))
    if data is None:
        findings.append(finding("IMPORT-CONFIG-MISSING", "error", "spec", f"{call_source} line {path.line} reads the "
                                f"config file {path.unresolved or path.text}, which was not among the imported files.",
                                f"Import {Path(name).name} together with the script (the web page reads only "
                                "uploaded files, never the server's disk)."))
        return None
    try:
        config = yaml.safe_load(data.decode("utf-8-sig")) or {}
    except (yaml.YAMLError, UnicodeDecodeError) as e:
        findings.append(finding("IMPORT-CONFIG-MISSING", "error", "spec", f"{name} is not readable YAML/JSON: "
                                f"{str(e).splitlines()[0]}", "Fix the config file and import it again."))
        return None
    if not isinstance(config, dict):
        findings.append(finding("IMPORT-CONFIG-MISSING", "error", "spec", f"{name}: the top level is not a "
                                "mapping of flags.", "Give the config as `flag: value` lines."))
        return None
    return config


def to_call(inv: Invocation, version: str, sources: Sources, findings: list[Finding]) -> Call:
    """Splice a config file in where ms-swift would: ``swift rlhf cfg.yaml`` (≥ 4.1) before the command-line flags,
    whose values win, with the shell's environment winning over its ENV block from 4.3; ``--config cfg.yaml``
    (3.10–4.0) after them, so the file's values win."""
    positional, flags = split_flags(inv.args)
    env = dict(inv.env)
    if positional and positional[0].text.endswith(CONFIG_SUFFIXES):
        config, config_env = _config_flags(positional[0], sources, inv.source, findings)
        flags = config + flags
        shell_wins = parse_version(version) >= (4, 3, 0)
        env = {**env, **config_env, **(env if shell_wins else {})}
    config_flag = next((f for f in flags if f.name == "config" and f.values), None)
    if config_flag is not None and not any(f.name == "use_ray" for f in flags):  # Ray mode's: importer.ray
        flags.remove(config_flag)
        flags += _config_flags(config_flag.values[0], sources, inv.source, findings)[0]
    return Call(inv.kind, flags, env, inv.source, inv.line, inv.program)


# ---------------------------------------------------------------------------------------------------------------
# Flags → fields

@dataclass
class Draft:
    """The spec data being built, with what could not be placed."""

    data: dict[str, Any]
    findings: list[Finding]
    flag_lines: dict[str, tuple[str, int, str]] = field(default_factory=dict)  # path → (source, line, shell text)

    def refuse(self, key: str, id_: str, message: str, fix: str) -> None:
        """Something the script says that cannot be read (a flag without its value, text bash cannot parse): an
        error finding, and an ``import_errors`` entry that a partial draft keeps until ``key``'s field is set. The
        field itself is left unset: no value is guessed. The first cause of a field wins."""
        if key in self.data.setdefault("import_errors", {}):
            return
        self.data["import_errors"][key] = message
        self.findings.append(finding(id_, "error", key, message, fix))

    def unresolved(self, key: str, text: str, source: str, line: int, what: str) -> None:
        self.data.setdefault("unresolved", {})[key] = text
        self.findings.append(finding("IMPORT-UNRESOLVED", "error", key, f"{source} line {line}: {what} is `{text}`, "
                                     "which only the shell that runs the script can expand (a variable the script "
                                     "never sets, $(…), ~ or a script argument).",
                                     f"Fill in {key} with the value it has when the script runs."))


def _shell_text(flag: Flag) -> str:
    return " ".join(w.unresolved or w.text for w in flag.values)


def place_flags(call: Call, table: dict, draft: Draft, version: str, extra_key: str) -> None:
    """Each flag onto its declared field (the last occurrence wins, as in argparse); unknown flags are kept verbatim
    under ``extra_key``; removed ones are reported and left out."""
    extra: list[str] = []
    for flag in call.flags:
        where = f"{call.source} line {flag.line}"
        if flag.name == "rlhf_type" and call.kind == "rlhf":
            if [w.text for w in flag.values] != ["grpo"]:
                draft.findings.append(finding("IMPORT-NOT-GRPO", "error", "spec", f"{where}: --rlhf_type "
                                              f"{_shell_text(flag)} is not GRPO.", "Import a GRPO launch script "
                                              "(--rlhf_type grpo)."))
            continue
        decl = table.get(flag.name)
        if decl is not None and decl.path in draft.data.get("import_errors", {}):
            continue  # bash cannot read this flag's value (a syntax error there): nothing is taken from it
        missing = flag_missing_in(flag.name, version)
        if missing and not (decl and decl.accepted_in(version)):
            instead = FLAG_LIFETIMES[flag.name][2]
            draft.findings.append(finding("IMPORT-REMOVED-FLAG", "warning", "spec", f"{where}: --{flag.raw} "
                                          f"{_shell_text(flag)} does not exist in ms-swift {version} ({missing}); it "
                                          "is not imported.", instead[0].upper() + instead[1:] + "."))
            continue
        if decl is None:
            if any(w.unresolved for w in flag.values):
                draft.unresolved(extra_key, " ".join(flag.tokens()), call.source, flag.line, f"--{flag.raw}")
                continue
            extra += flag.tokens()
            draft.findings.append(finding("IMPORT-UNKNOWN-FLAG", "info", extra_key, f"{where}: --{flag.raw} is not a "
                                          f"field grpo-ui models; it is kept verbatim in {extra_key}.",
                                          "Nothing to do if ms-swift accepts it; check its spelling against "
                                          "`swift rlhf --help` otherwise."))
            continue
        if not flag.values and not stands_alone(decl):
            draft.refuse(decl.path, "IMPORT-NO-VALUE", f"{where}: --{flag.raw} is given no value, but it takes one "
                         "(only a true/false flag may stand alone): ms-swift would stop at start-up with `expected one "
                         "argument`.", f"Give --{flag.raw} its value in the script and import it again, or fill in "
                         f"{decl.path}.")
            draft.data.get(decl.section, {}).pop(decl.name, None)
            continue
        section = draft.data.setdefault(decl.section, {})
        if any(w.unresolved for w in flag.values):
            section.pop(decl.name, None)
            draft.unresolved(decl.path, _shell_text(flag), call.source, flag.line, f"--{flag.raw}")
            continue
        draft.data.get("unresolved", {}).pop(decl.path, None)
        if flag.name != decl.flag_for(version):
            draft.findings.append(finding("IMPORT-RENAMED-FLAG", "info", decl.path, f"{where}: --{flag.raw} is called"
                                          f" --{decl.flag_for(version)} in ms-swift {version}.",
                                          "Nothing to do: grpo-ui writes the name the target version knows."))
        if not decl.accepted_in(version):
            draft.findings.append(finding("IMPORT-UNSUPPORTED-FLAG", "warning", decl.path, f"{where}: --{flag.raw} is "
                                          f"not accepted by ms-swift {version}.",
                                          f"Clear {decl.path} or change the target version."))
        section[decl.name] = coerce(decl, [w.text for w in flag.values])
        draft.flag_lines[decl.path] = (call.source, flag.line, _shell_text(flag))
    if extra:
        draft.data[extra_key] = extra


def validated(draft: Draft) -> JobSpec:
    """The spec; a flag value its field rejects (``--num_generations eight``) becomes a finding and an unresolved
    entry the user fills in, instead of failing the whole import."""
    while True:
        try:
            return validate_spec(draft.data)
        except SpecError as e:
            bad = {m[0]: msg for p, msg in e.problems if (m := re.match(r"\w+\.\w+", p)) and m[0] in draft.flag_lines}
            if not bad:
                raise
            for path, msg in bad.items():
                section, name = path.split(".")
                draft.data[section].pop(name, None)
                source, line, text = draft.flag_lines.pop(path)
                draft.data.setdefault("unresolved", {})[path] = text
                draft.findings.append(finding("IMPORT-BAD-VALUE", "error", path, f"{source} line {line}: {text!r} is "
                                              f"not a valid {path}: {msg}.", f"Enter a valid {path}."))


def notice_findings(notices: list[Notice], source: str, draft: Draft) -> None:
    """Each notice of a script's walk as a finding; what bash cannot parse is refused (``Draft.refuse``) on the field
    of the flag it concerns, and on the fields of the flags after it, which bash never passes."""
    what = {
        "flow": ("IMPORT-SHELL-FLOW", "warning", "swift runs inside an if/for/while/case (`{text}`); grpo-ui does not "
                 "guess which branch runs, so that invocation was not imported.",
                 "Import a script where swift runs unconditionally (one script per node)."),
        "venv": ("IMPORT-PYTHON-ENV", "info", "activates the Python environment {text}: it is each node's "
                 "python_env.", "Check that it exists on every node (preflight does)."),
        "source": ("IMPORT-SHELL-SOURCE", "info", "`{text}` reads another file; what it sets is unknown here.",
                   "Check the values that come from that file."),
        "orphan": ("IMPORT-ORPHAN-FLAGS", "warning", "`{text}` starts a new command: the line before ends the swift "
                   "command (a comment or a missing backslash), so bash never passed these flags to swift and they "
                   "were not imported.", "Join the lines with a trailing backslash if these flags were meant for swift."),
    }
    for n in notices:
        if n.kind in ("syntax", "quote"):
            _refuse_syntax(n, source, draft)
            continue
        id_, severity, message, fix = what[n.kind]
        draft.findings.append(finding(id_, severity, "spec", f"{source} line {n.line}: " + message.format(text=n.text),
                                      fix))


def _field_of(flag: str | None) -> str:
    """The field a flag sets (swift rlhf's, else swift rollout's); extra_args for one grpo-ui does not model."""
    if flag is None:
        return "spec"
    decl = TRAIN_FLAGS.get(flag.replace("-", "_")) or SERVER_FLAGS.get(flag.replace("-", "_"))
    return decl.path if decl else "extra_args"


def _refuse_syntax(n: Notice, source: str, draft: Draft) -> None:
    where = f"{source} line {n.line}" + (f", --{n.flag}" if n.flag else "")
    lost = ", ".join(f"--{f}" for f in n.lost)
    unread = f" The flags after it were not read: {lost}." if lost else ""
    if n.kind == "quote":
        message = (f"{where}: the {n.text} that opens {'its value' if n.flag else 'a word'} never closes, so bash "
                   f"reads the rest of the file as one word and refuses the script (`bash -n`: unexpected EOF while "
                   f"looking for matching {n.text}).{unread}")
        fix = f"Close the quote on line {n.line} and import the script again."
    else:
        message = f"{where}: bash cannot parse `{n.text or 'the end of the file'}`, so it refuses the script.{unread}"
        fix = f"Fix line {n.line} (`bash -n script.sh` shows bash's own message) and import the script again."
    draft.refuse(_field_of(n.flag), "IMPORT-SHELL-SYNTAX", message, fix)
    for flag in n.lost:
        key = _field_of(flag)
        if key not in ("spec", "extra_args"):
            draft.data["import_errors"].setdefault(key, f"--{flag} comes after the text bash cannot parse on "
                                                        f"{source} line {n.line}: its value was not read.")
