"""Existing launch scripts → JobSpec + findings, without running them.

One data flow: bytes → text (``decode``) → swift invocations with bash's expansion (``bash``, a real bash grammar)
→ config files spliced in and flags placed on fields (``build``) → nodes, environment and disagreements
(``topology``) → JobSpec. What a script leaves to its caller's shell is a finding and an ``unresolved`` entry naming
the field, never a literal ``$VAR`` in the spec.
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

from grpo_ui.core.findings import Finding, finding
from grpo_ui.importer import bash, topology
from grpo_ui.importer.build import (
    CONFIG_SUFFIXES,
    Call,
    Draft,
    Sources,
    notice_findings,
    place_flags,
    to_call,
    validated,
)
from grpo_ui.importer.decode import decode
from grpo_ui.spec.errors import SpecError
from grpo_ui.spec.model import JobSpec
from grpo_ui.spec.swift_args import dialect_of
from grpo_ui.spec.swift_cli import SERVER_FLAGS, TRAIN_FLAGS
from grpo_ui.spec.yaml_io import spec_from_yaml

__all__ = ["ImportRefused", "import_scripts", "import_uploads"]

REFUSED = ("IMPORT-NO-VALUE", "IMPORT-SHELL-SYNTAX")  # what bash or ms-swift would refuse: no draft by default


class ImportRefused(SpecError):
    """Scripts with something bash or ms-swift would refuse (a flag without its value, text bash cannot parse): no
    draft is made from them unless the caller asks to keep the partial result. ``findings`` are the refusals, each
    naming the file, line and flag."""

    def __init__(self, findings: list[Finding]):
        self.findings = findings
        super().__init__([(f.fields[0], f.message) for f in findings], "import refused")


def import_scripts(scripts: list[tuple[str, bytes | str]], version: str = "4.6", files: dict[str, bytes] | None = None,
                   local_dir: Path | None = None, keep_partial: bool = False) -> tuple[JobSpec, list[Finding]]:
    """Node scripts of one job (trainers in any order, rollout servers) → (JobSpec for ``version``, findings).

    files: other uploaded files by name (configs a script references). local_dir: where the command line may read
    referenced files from; None (the web page) means only ``files`` are used, never the app host's disk.
    Raises SpecError naming the file for a binary or huge file, or when no script runs ``swift rlhf``; ImportRefused
    when a script says something bash or ms-swift would refuse, unless ``keep_partial``: then the spec is what could
    be read, its ``import_errors`` saying what could not (each held until its field is set).
    """
    dialect_of(version)  # an unsupported version fails here, with its reason
    sources = Sources(dict(files or {}), local_dir)
    draft = Draft({"swift_version": version}, [])
    calls: list[Call] = []
    venvs: set[str] = set()
    for name, data in scripts:
        text, found = decode(name, data)
        draft.findings += found
        invocations, notices = bash.parse(text, name)
        venvs |= {n.text for n in notices if n.kind == "venv"}
        notice_findings(notices, name, draft)
        if not invocations:
            draft.findings.append(finding("IMPORT-NO-COMMAND", "warning", "spec", f"{name}: no `swift rlhf` or "
                                          "`swift rollout` command runs in it.", "Import the scripts that run swift "
                                          "on the nodes."))
        calls += [to_call(inv, version, sources, draft.findings) for inv in invocations]
    trainers = sorted((c for c in calls if c.kind == "rlhf"), key=lambda c: topology.int_or_none(c.text("NODE_RANK")) or 0)
    servers = [c for c in calls if c.kind == "rollout"]
    if trainers:
        place_flags(trainers[0], TRAIN_FLAGS, draft, version, "extra_args")
    if servers:
        _place_server_flags(servers[0], draft, version)
    refused = [f for f in draft.findings if f.id in REFUSED]
    if refused and not (keep_partial and trainers):
        raise ImportRefused(refused)
    if not trainers:
        raise SpecError([("scripts", "no `swift rlhf` command runs in " + ", ".join(n for n, _ in scripts))])
    draft.data["name"] = job_name(scripts[0][0], draft.data.get("train", {}).get("model"))
    topology.cluster(trainers, servers, draft)
    if len(venvs) == 1:  # every script activates the same venv (`source <dir>/bin/activate`): the nodes' python_env
        for node in draft.data["cluster"]["nodes"]:
            node.setdefault("python_env", next(iter(venvs)))
    draft.findings += topology.disagreements(trainers)
    spec = validated(draft)
    topology.launch_env_findings(spec, trainers, draft)
    return spec, draft.findings


def _place_server_flags(call: Call, draft: Draft, version: str) -> None:
    """The server section from the first rollout script; flags the trainer side already says (the model, its
    plugins) are not repeated, anything else the server takes goes to rollout_extra_args."""
    train = draft.data.get("train", {})
    kept = []
    for flag in call.flags:
        texts = [w.text for w in flag.values]
        if flag.name == "model" and texts == [train.get("model")]:
            continue
        value = train.get(flag.name)
        if flag.name in topology.SHARED_WITH_ROLLOUT and value is not None and texts == (
                value if isinstance(value, list) else [str(value)]):
            continue
        kept.append(flag)
    place_flags(replace(call, flags=kept), SERVER_FLAGS, draft, version, "rollout_extra_args")


def job_name(script: str, model: str | None) -> str:
    """An imported job's name: the script's and the model's (``grpo_7b-Qwen2.5-7B-Instruct``), so imports tell
    apart in the draft list; a pasted script is named by its model alone."""
    stem = Path(script).stem if script != PASTED else ""
    parts = [re.sub(r"[^A-Za-z0-9._-]+", "_", p).strip("._-") for p in (stem, (model or "").rstrip("/").split("/")[-1])]
    name = "-".join(p for p in parts if p)[:64].rstrip(".-") or "imported"
    return name if re.match(r"[A-Za-z0-9_]", name) else f"imported-{name}"[:64]


PASTED = "pasted script"  # the name the web page gives a pasted script (findings say "pasted script line 5")


def import_uploads(files: dict[str, bytes], version: str = "4.6", keep_partial: bool = False
                   ) -> tuple[JobSpec, list[Finding]]:
    """What the web page receives: launch scripts (any file that runs swift) with the config files they name, or one
    job YAML. Only these bytes are read."""
    texts = {name: decode(name, data) for name, data in files.items()}
    scripts = [(n, files[n]) for n, (text, _) in texts.items() if re.search(r"\bswift\b|swift/cli/", text)
               and not n.endswith(CONFIG_SUFFIXES)]
    if scripts:
        return import_scripts(scripts, version, {n: d for n, d in files.items() if n not in dict(scripts)},
                              keep_partial=keep_partial)
    if len(files) == 1:
        (name, (text, found)), = texts.items()
        return spec_from_yaml(text, name), found
    raise SpecError([("scripts", "none of " + ", ".join(files) + " runs `swift rlhf`; upload the node scripts, or "
                                 "a single job YAML")])
