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

__all__ = ["import_scripts", "import_uploads"]


def import_scripts(scripts: list[tuple[str, bytes | str]], version: str = "4.6", files: dict[str, bytes] | None = None,
                   local_dir: Path | None = None) -> tuple[JobSpec, list[Finding]]:
    """Node scripts of one job (trainers in any order, rollout servers) → (JobSpec for ``version``, findings).

    files: other uploaded files by name (configs a script references). local_dir: where the command line may read
    referenced files from; None (the web page) means only ``files`` are used, never the app host's disk.
    Raises SpecError naming the file for a binary or huge file, or when no script runs ``swift rlhf``.
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
        draft.findings += notice_findings(notices, name)
        if not invocations:
            draft.findings.append(finding("IMPORT-NO-COMMAND", "warning", "spec", f"{name}: no `swift rlhf` or "
                                          "`swift rollout` command runs in it.", "Import the scripts that run swift "
                                          "on the nodes."))
        calls += [to_call(inv, version, sources, draft.findings) for inv in invocations]
    trainers = sorted((c for c in calls if c.kind == "rlhf"), key=lambda c: topology.int_or_none(c.text("NODE_RANK")) or 0)
    servers = [c for c in calls if c.kind == "rollout"]
    if not trainers:
        raise SpecError([("scripts", "no `swift rlhf` command runs in " + ", ".join(n for n, _ in scripts))])
    place_flags(trainers[0], TRAIN_FLAGS, draft, version, "extra_args")
    if servers:
        _place_server_flags(servers[0], draft, version)
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


def import_uploads(files: dict[str, bytes], version: str = "4.6") -> tuple[JobSpec, list[Finding]]:
    """What the web page receives: launch scripts (any file that runs swift) with the config files they name, or one
    job YAML. Only these bytes are read."""
    texts = {name: decode(name, data) for name, data in files.items()}
    scripts = [(n, files[n]) for n, (text, _) in texts.items() if re.search(r"\bswift\b|swift/cli/", text)
               and not n.endswith(CONFIG_SUFFIXES)]
    if scripts:
        return import_scripts(scripts, version, {n: d for n, d in files.items() if n not in dict(scripts)})
    if len(files) == 1:
        (name, (text, found)), = texts.items()
        return spec_from_yaml(text, name), found
    raise SpecError([("scripts", "none of " + ", ".join(files) + " runs `swift rlhf`; upload the node scripts, or "
                                 "a single job YAML")])
