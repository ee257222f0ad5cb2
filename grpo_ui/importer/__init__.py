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

import yaml

from grpo_ui.core.findings import Finding, finding
from grpo_ui.importer import bash, ray, topology
from grpo_ui.importer.build import (
    CONFIG_SUFFIXES,
    Call,
    Draft,
    Sources,
    notice_findings,
    place_flags,
    read_config,
    to_call,
    validated,
)
from grpo_ui.importer.decode import decode
from grpo_ui.spec.errors import SpecError
from grpo_ui.spec.model import JobSpec
from grpo_ui.spec.swift_args import dialect_of
from grpo_ui.spec.swift_cli import SERVER_FLAGS, TRAIN_FLAGS
from grpo_ui.spec.yaml_io import check_yaml_limits, spec_from_yaml

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
    ray_config = _engine(trainers, sources, draft)
    if ray_config is not None:
        ray.place_ray(trainers[0], ray_config, draft, version)
    elif trainers:
        place_flags(trainers[0], TRAIN_FLAGS, draft, version, "extra_args")
    if servers:
        _place_server_flags(servers[0], draft, version)
    refused = [f for f in draft.findings if f.id in REFUSED]
    if refused and not (keep_partial and trainers):
        raise ImportRefused(refused)
    if not trainers:
        raise SpecError([("scripts", "no `swift rlhf` or `megatron rlhf` command runs in "
                          + ", ".join(n for n, _ in scripts))])
    draft.data["name"] = job_name(scripts[0][0], draft.data.get("train", {}).get("model"))
    if ray_config is not None:
        return validated(draft), draft.findings
    topology.cluster(trainers, servers, draft)
    if len(venvs) == 1:  # every script activates the same venv (`source <dir>/bin/activate`): the nodes' python_env
        for node in draft.data["cluster"]["nodes"]:
            node.setdefault("python_env", next(iter(venvs)))
    draft.findings += topology.disagreements(trainers)
    spec = validated(draft)
    topology.launch_env_findings(spec, trainers, draft)
    return spec, draft.findings


def _engine(trainers: list[Call], sources: Sources, draft: Draft) -> dict | None:
    """The engine the trainer scripts run (megatron rlhf → engine megatron; mixing both is an error), whether they
    say the GRPO they must (swift and megatron rlhf run DPO without --rlhf_type grpo), and for ms-swift's Ray mode
    the config its --config names (None otherwise, or when it cannot be read: a finding says so)."""
    programs = {c.program for c in trainers}
    if "megatron" in programs:
        draft.data["engine"] = "megatron"
    if len(programs) > 1:
        draft.findings.append(finding("IMPORT-ENGINES-DIFFER", "error", "engine", "Some node scripts run swift rlhf "
                                      "and others megatron rlhf.", "Import the node scripts of one job."))
    if not trainers or not ray.uses_ray(trainers[0]):
        if trainers and not any(f.name == "rlhf_type" for f in trainers[0].flags):
            draft.findings.append(finding("IMPORT-NOT-GRPO", "error", "spec", f"{trainers[0].source} line "
                                          f"{trainers[0].line}: no --rlhf_type, so {trainers[0].program} rlhf would "
                                          "train DPO (its default).", "Import a GRPO launch script (--rlhf_type "
                                          "grpo); grpo-ui always renders it."))
        return None
    path = next((f.values[0] for f in reversed(trainers[0].flags) if f.name == "config" and f.values), None)
    if path is None:
        draft.findings.append(finding("IMPORT-CONFIG-MISSING", "error", "spec", f"{trainers[0].source} line "
                                      f"{trainers[0].line}: --use_ray without --config.", "Give the Ray config."))
        return None
    config = read_config(path, sources, trainers[0].source, draft.findings)
    if config is not None and config.get("rlhf_type") != "grpo":
        draft.findings.append(finding("IMPORT-NOT-GRPO", "error", "spec", f"{path.text}: rlhf_type is "
                                      f"{config.get('rlhf_type')!r}, not grpo.", "Import a GRPO Ray config."))
    return config


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
    """What the web page receives: launch scripts (any file that runs swift or megatron) with the config files they
    name, or one YAML: a grpo-ui job, an ms-swift config (``swift rlhf cfg.yaml`` / ``megatron rlhf cfg.yaml``) or an
    ms-swift Ray config (``megatron rlhf --use_ray true --config cfg.yaml``). Only these bytes are read."""
    texts = {name: decode(name, data) for name, data in files.items()}
    scripts = [(n, files[n]) for n, (text, _) in texts.items() if re.search(r"\b(swift|megatron)\b|swift/cli/", text)
               and not n.endswith(CONFIG_SUFFIXES)]
    if scripts:
        return import_scripts(scripts, version, {n: d for n, d in files.items() if n not in dict(scripts)},
                              keep_partial=keep_partial)
    if len(files) == 1:
        (name, (text, found)), = texts.items()
        return _one_yaml(name, text, found, version, keep_partial)
    raise SpecError([("scripts", "none of " + ", ".join(files) + " runs `swift rlhf` or `megatron rlhf`; upload the "
                                 "node scripts, or a single job YAML or ms-swift config")])


def _one_yaml(name: str, text: str, found: list[Finding], version: str, keep_partial: bool
              ) -> tuple[JobSpec, list[Finding]]:
    """One YAML alone: a grpo-ui job when its top level is the job's sections; an ms-swift config when its keys are
    ms-swift flags (a Ray config when it has role groups with gpus), imported as the command that would run it;
    otherwise one line saying which it is not."""
    check_yaml_limits(text, name)
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise SpecError([("spec", f"not valid YAML: {str(e).splitlines()[0]}")], name) from None
    if not isinstance(data, dict):
        raise SpecError([("spec", "neither a grpo-ui job nor an ms-swift config: the top level is not a mapping")],
                        name)
    if set(data) <= set(JobSpec.model_fields) and not ray.is_ray_config(data):
        return spec_from_yaml(text, name), found
    flags = set(data) - {"ENV"}
    known = {k for k in flags if k in TRAIN_FLAGS or k in ("rlhf_type", "colocate_groups", "nnodes", "train",
                                                            "rollout", "teacher", "use_ray")}
    if not known:
        extra = sorted(set(data) - set(JobSpec.model_fields))[:4]
        raise SpecError([("spec", f"neither a grpo-ui job (unknown sections: {', '.join(extra)}) nor an ms-swift "
                                  "config (none of its keys is an ms-swift flag)")], name)
    megatron = ray.is_ray_config(data) or any("swift" not in TRAIN_FLAGS[k].engines for k in flags
                                              if k in TRAIN_FLAGS)
    command = (f"megatron rlhf --use_ray true --config {name}" if ray.is_ray_config(data)
               else f"{'megatron' if megatron else 'swift'} rlhf {name}")
    spec, findings = import_scripts([(name + ".sh", command + "\n")], version, {name: text.encode()},
                                    keep_partial=keep_partial)
    note = finding("IMPORT-CONFIG-ALONE", "info", "spec", f"{name} is an ms-swift config, imported as `{command}`"
                   + ("" if megatron or ray.is_ray_config(data) else " (none of its keys is megatron rlhf's alone)")
                   + ".", "Import the launch script with it to keep its environment and node layout.")
    return spec, found + [note] + findings
