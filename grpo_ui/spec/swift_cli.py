"""JobSpec → ms-swift command lines for a target version's dialect (the importer, ``grpo_ui.importer``, goes back).

Dialects: ≥ 4.1 (tuner_type, positional YAML), 4.0 (tuner_type, --config), 3.5–3.12 (train_type, vllm_mode),
3.2–3.4 (train_type, colocate expressed as num_infer_workers). Exactly the set fields are rendered (unset ones mean
ms-swift's default); a set field the target does not accept is a Finding, never a silently dropped flag. What grpo-ui
adds on its own is listed on the Command with the reason.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, get_args, get_origin

import yaml
from pydantic import TypeAdapter, ValidationError

from grpo_ui.core.findings import Finding, finding
from grpo_ui.spec.fields import COMMANDS, ArgDecl, parse_version
from grpo_ui.spec.model import ARGS, JobSpec
from grpo_ui.spec.resolve import Resolved, resolve

# Flags grpo-ui does not model that exist only in some versions: (first version with it, first without it, what to
# do instead). Outside that range ms-swift rejects them (reference §2 'history'; gc_collect_after_offload: bbf3bc4c4).
FLAG_LIFETIMES = {
    "num_infer_workers": (None, "3.6", "use --vllm_mode colocate (workers == GPUs) or a swift rollout server"),
    "vllm_device": (None, "3.6", "use --vllm_mode colocate, or vllm_mode server with swift rollout nodes"),
    "gc_collect_after_offload": ("3.2.1", "3.10", "remove it; ms-swift collects garbage after offload itself"),
    "use_lmdeploy": (None, "3.5", "use vLLM (--use_vllm true)"),
    "multi_turn_func": (None, "3.10", "use --multi_turn_scheduler"),
    "config": ("3.10", "4.1", "pass the YAML file as the first positional argument: swift rlhf cfg.yaml"),
}


def flag_missing_in(name: str, version: str) -> str | None:
    """Why ``--name`` does not exist in that version ('added in …' / 'removed in …'), or None."""
    if name not in FLAG_LIFETIMES:
        return None
    since, until, _ = FLAG_LIFETIMES[name]
    v = parse_version(version)
    if since and v < parse_version(since):
        return f"added in {since}"
    if until and v >= parse_version(until):
        return f"removed in {until}"
    return None


def format_value(value: Any) -> list[str]:
    """A field value as argv tokens: true/false, space-separated lists, JSON dicts."""
    if isinstance(value, bool):
        return ["true" if value else "false"]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in format_value(v)]
    if isinstance(value, dict):
        return [json.dumps(value)]
    return [str(value)]


@dataclass
class Command:
    """argv after the launcher (``swift``, or ``megatron``: e.g. ['rlhf', '--rlhf_type', 'grpo', ...]), env for every
    node, findings, and the flags grpo-ui added on its own: [(flag tokens, why)]."""

    argv: list[str]
    env: dict[str, str]
    findings: list[Finding] = field(default_factory=list)
    added: list[tuple[str, str]] = field(default_factory=list)
    program: str = "swift"  # the launcher: swift, or megatron for megatron rlhf

    @property
    def words(self) -> list[str]:
        """The whole command line: the launcher, then argv."""
        return [self.program, *self.argv]


def set_arguments(spec: JobSpec, section: str, version: str, skip: frozenset[str] = frozenset()):
    """([(flag name in that version, value)], findings) for one section's set fields that reach ms-swift. None and []
    have no argv form (they mean the default); an argument the job's engine or version lacks is a finding."""
    out: list[tuple[str, Any]] = []
    findings: list[Finding] = []
    obj = getattr(spec, section)
    for d in (d for d in ARGS if d.section == section and d.name in obj.model_fields_set and d.name not in skip):
        value = getattr(obj, d.name)
        if spec.engine not in d.engines:  # set to its default, it says nothing: it has no argv form either way
            findings += [] if value == d.default else [engine_finding(d, spec.engine, value)]
            continue
        d = d.on(spec.engine)
        if value is None or value == [] or (not d.accepted_in(version) and value == d.default):
            continue  # no argv form, or the default a version without the flag behaves as
        if why := d.refuses(value):
            findings.append(finding("ENGINE-VALUE", "error", d.path, f"--{d.flag} {value!r}: {COMMANDS[spec.engine]} "
                                    f"does not take that value ({why}).", f"Set a value it takes, or clear "
                                    f"{d.path}."))
            continue
        if not d.accepted_in(version):
            when = f"added in {d.since}" if d.since and parse_version(version) < parse_version(d.since) \
                else f"removed in {d.until}"
            findings.append(finding(
                "VERSION-FLAG-UNSUPPORTED", "error", d.path,
                f"--{d.flag} is set to {value!r} but ms-swift {version} does not accept it ({when}).",
                f"Clear {d.path} (ms-swift's default applies) or target an ms-swift version that has it.",
                {d.path: d.default}))
            continue
        out.append((d.flag_for(version), int(value) if d.integer else value))  # megatron's whole epochs: 1, not 1.0
    return out, findings


def _emit(spec: JobSpec, section: str, version: str, skip: frozenset[str] = frozenset()):
    """(flag tokens, findings) for one section's set fields (set_arguments)."""
    fields, findings = set_arguments(spec, section, version, skip)
    return [t for flag, value in fields for t in (f"--{flag}", *format_value(value))], findings


def engine_finding(d: ArgDecl, engine: str, value: Any) -> Finding:
    """A set argument the job's engine does not take: ms-swift's parser stops at it (remaining_argv), or — for the
    few it parses without using — it would silently do nothing."""
    other = next(e for e in d.engines if e != engine)
    return finding("ENGINE-FLAG", "error", d.path,
                   f"--{d.flag} is set to {value!r}, but it is a {COMMANDS[other]} argument: {COMMANDS[engine]} "
                   "does not take it.",
                   f"Clear {d.path}" + (f"; on {COMMANDS[engine]} use {d.instead}." if d.instead else "."))


def _too_many_servers(count: int, version: str, cmd: Command) -> bool:
    """Before 3.7 vllm_server_host took one host."""
    if parse_version(version) >= (3, 7, 0) or count < 2:
        return False
    cmd.findings.append(finding("VERSION-MULTI-SERVER", "error", "rollout.vllm_server_host",
                                f"ms-swift {version} accepts one rollout server; {count} are set.",
                                "Use one rollout server, or ms-swift ≥ 3.7 for several."))
    return True


def _rollout_nodes_as_servers(eff: Resolved, version: str, cmd: Command) -> None:
    """Server mode without vllm_server_host: the trainer is pointed at the cluster's rollout nodes."""
    endpoints = eff.server_endpoints
    if not endpoints:
        return
    if _too_many_servers(len(endpoints), version, cmd):
        endpoints = endpoints[:1]
    hosts, ports = [h for h, _ in endpoints], [str(p) for _, p in endpoints]
    flags = ["--vllm_server_host", *hosts, "--vllm_server_port", *ports]
    cmd.argv += flags
    cmd.added.append((" ".join(flags), "server mode: the trainer talks to the cluster's rollout nodes"))


def _for_version(job: JobSpec | Resolved, version: str | None) -> Resolved:
    """The job's effective values for the target version (default: the spec's)."""
    eff = resolve(job)
    if version is None or version == eff.spec.swift_version:
        return eff
    return resolve(eff.spec.model_copy(update={"swift_version": version}), eff.arch)


def train_command(job: JobSpec | Resolved, version: str | None = None) -> Command:
    """``swift rlhf`` argv for the target version (default: the spec's)."""
    eff = _for_version(job, version)
    spec, version, dialect = eff.spec, eff.spec.swift_version, eff.dialect
    cmd = Command(["rlhf", "--rlhf_type", "grpo"], dict(spec.env),
                  added=[("--rlhf_type grpo", f"{COMMANDS[spec.engine]} runs DPO unless told otherwise")],
                  program=COMMANDS[spec.engine].split()[0])
    if spec.engine == "megatron":
        return _megatron_command(eff, cmd)
    # 3.2–3.4 had no vllm_mode: colocate is num_infer_workers (below), server is vllm_server_host
    skip = frozenset({"vllm_mode"}) if dialect == "3.2-3.4" else frozenset()
    for section in ("train", "rollout"):
        flags, findings = _emit(spec, section, version, skip)
        cmd.argv += flags
        cmd.findings += findings
    r = spec.rollout
    if "vllm_server_host" in r.model_fields_set:
        _too_many_servers(len(r.vllm_server_host or []), version, cmd)
    elif eff.server:
        _rollout_nodes_as_servers(eff, version, cmd)
    if dialect == "3.2-3.4" and eff.colocate and "num_infer_workers" not in r.model_fields_set:
        workers = str(eff.nproc_per_node)
        cmd.argv += ["--num_infer_workers", workers]
        cmd.added.append((f"--num_infer_workers {workers}", f"ms-swift {version} colocates vLLM on every training "
                          "GPU only when num_infer_workers equals the GPUs per node (its default is 1)"))
    cmd.argv += spec.extra_args
    return cmd


def _megatron_command(eff: Resolved, cmd: Command) -> Command:
    """``megatron rlhf`` argv: the set train and rollout fields in their Megatron form, the servers as for swift rlhf
    (server mode without vllm_server_host: the cluster's rollout nodes), extra_args."""
    spec, version = eff.spec, eff.spec.swift_version
    for section in ("train", "rollout"):
        flags, findings = _emit(spec, section, version)
        cmd.argv += flags
        cmd.findings += findings
    if eff.server and "vllm_server_host" not in spec.rollout.model_fields_set:
        _rollout_nodes_as_servers(eff, version, cmd)
    cmd.argv += spec.extra_args
    return cmd


# Ray mode (megatron rlhf --use_ray true --config job.yaml): the config's layout, ms-swift 4.6
# swift/ray/megatron/driver_utils.py parse_ray_yaml: top-level keys are shared by every role ({**shared, **group}),
# the Ray-only keys colocate_groups / sleep_level / nnodes are read there only, each role group has its gpus.
RAY_ENTRYPOINT = ["rlhf", "--use_ray", "true", "--config"]  # after ``megatron``; the config's path follows
RAY_RENDERED_BY_PLACEMENT = frozenset({"use_ray", "vllm_mode", "sleep_level"})  # what the config says otherwise


@dataclass
class RayConfig:
    """ms-swift's Ray config of a job (``data``, written as YAML), its findings and what grpo-ui added on its own."""

    data: dict
    findings: list[Finding] = field(default_factory=list)
    added: list[tuple[str, str]] = field(default_factory=list)


def ray_config(job: JobSpec | Resolved, version: str | None = None) -> RayConfig:
    """The Ray config: rlhf_type and the model (both roles read them), the trainer-side rollout arguments at the top
    (the driver reads offload_model there), the placement's keys, the ``train`` group with its GPUs, the training
    arguments and extra_args (each ``--flag values`` a key), the ``rollout`` group with its GPUs and the vLLM
    replicas' arguments: the rollout section's vllm_* when colocated, the server section's when separate."""
    eff = _for_version(job, version)
    spec, version, ray = eff.spec, eff.spec.swift_version, eff.ray
    cfg = RayConfig({"rlhf_type": "grpo"}, added=[("rlhf_type: grpo", "megatron rlhf runs DPO unless told otherwise")])
    train, found = set_arguments(spec, "train", version)
    rollout, more = set_arguments(spec, "rollout", version, RAY_RENDERED_BY_PLACEMENT)
    cfg.findings += found + more
    train = dict(train)
    cfg.data.update({k: train.pop(k) for k in ("model",) if k in train})
    train.pop("use_ray", None)
    replica = {k: v for k, v in rollout if k.startswith("vllm_")}
    cfg.data.update((k, v) for k, v in rollout if k not in replica)
    train.update(_extra_keys(spec.extra_args))
    if ray.colocate:
        cfg.data["colocate_groups"] = [["train", "rollout"]]
    cfg.data["sleep_level"] = ray.sleep_level
    if "sleep_level" not in spec.rollout.model_fields_set:
        cfg.added.append((f"sleep_level: {ray.sleep_level}", "a Ray config's default (1 when colocated); separate "
                          "placement runs at 0 whatever it says"))
    if ray.nnodes > 1:
        cfg.data["nnodes"] = ray.nnodes
        cfg.added.append((f"nnodes: {ray.nnodes}", "each role's GPUs are split evenly over the trainer nodes"))
    if "global_batch_size" not in train:
        train["global_batch_size"] = eff.megatron.global_batch
        cfg.added.append((f"global_batch_size: {eff.megatron.global_batch}", "the Ray driver reads it from the train "
                          "group and stops without it (pipeline.py:174)"))
    cfg.data["train"] = {"gpus": ray.train_gpus, **train}
    server, found = set_arguments(spec, "server", version, frozenset({"port"})) if not ray.colocate else ([], [])
    cfg.findings += found
    cfg.data["rollout"] = {"gpus": ray.rollout_gpus, **(replica if ray.colocate else dict(server))}
    return cfg


def _extra_keys(tokens: list[str]) -> dict:
    """extra_args as config keys: ``--flag v`` → flag: v, several values a list, a bare flag true."""
    out: dict = {}
    key = None
    for token in tokens:
        if token.startswith("--"):
            key = token[2:]
            out[key] = []
        elif key is not None:
            out[key].append(token)
    return {k: (v[0] if len(v) == 1 else v) if v else True for k, v in out.items()}


def rollout_command(job: JobSpec | Resolved, version: str | None = None, index: int = 0) -> Command:
    """``swift rollout`` argv for rollout node ``index`` (server mode): the policy model, the server section's set
    fields and rollout_extra_args; the trainer's model_type, template and plugin settings are added unless those say
    them, and the port the trainer's vllm_server_port gives this node when it is not server.port."""
    eff = _for_version(job, version)
    spec, version = eff.spec, eff.spec.swift_version
    cmd = Command(["rollout"] + (["--model", spec.train.model] if spec.train.model else []), dict(spec.env))
    for name in ("model_type", "template", "external_plugins", "multi_turn_scheduler"):
        value = getattr(spec.train, name)
        if value and f"--{name}" not in spec.rollout_extra_args:
            cmd.argv += [f"--{name}", *format_value(value)]
            cmd.added.append((f"--{name}", f"the rollout server uses the trainer's {name}"))
    flags, cmd.findings = _emit(spec, "server", version)
    cmd.argv += flags + spec.rollout_extra_args
    port = eff.rollout_port(index)
    if port != spec.server.port:
        cmd.argv += ["--port", str(port)]
        cmd.added.append((f"--port {port}", f"the trainer's vllm_server_port names {port} for rollout node {index}"))
    return cmd


def _lookup(section_names: tuple[str, ...]) -> dict[str, ArgDecl]:
    """Flag name (and pre-rename name) → declaration."""
    table: dict[str, ArgDecl] = {}
    for d in ARGS:
        if d.section in section_names:
            table.setdefault(d.flag, d)
            if d.old_name:
                table.setdefault(d.old_name, d)
    return table


TRAIN_FLAGS = _lookup(("train", "rollout"))
SERVER_FLAGS = _lookup(("server",))


def stands_alone(decl: ArgDecl) -> bool:
    """Whether ``--flag`` may be given without a value: ms-swift's parser (HfArgumentParser) lets a bool field stand
    alone, meaning true, and an optional bool only when its default is not None; every other field needs a value
    (argparse: "expected one argument")."""
    return decl.annotation is bool or (decl.annotation == bool | None and decl.default is not None)


def coerce(decl: ArgDecl, values: list[str]) -> Any:
    """argv tokens → the field's type (the final spec validation names the field if they don't fit). ValueError for
    a flag given no value that needs one: a value is never invented."""
    ann = decl.annotation
    if not values and not stands_alone(decl):
        raise ValueError(f"--{decl.flag} needs a value")
    is_list = get_origin(ann) is list or any(get_origin(a) is list for a in get_args(ann))
    raw: Any = values if is_list else (" ".join(values) if values else "true")  # a bare bool flag means true
    adapter = TypeAdapter(ann)
    try:
        return adapter.validate_strings(raw)
    except ValidationError:
        pass
    try:  # e.g. Literal[0, 1, 2] from "1": read the token as YAML would
        return adapter.validate_python([yaml.safe_load(v) for v in raw] if is_list else yaml.safe_load(raw))
    except (ValidationError, yaml.YAMLError):
        return raw
