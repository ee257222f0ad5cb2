"""JobSpec ⇄ ms-swift command lines: render argv for a target version's dialect, and import existing launch scripts.

Dialects: ≥ 4.1 (tuner_type, positional YAML), 4.0 (tuner_type, --config), 3.5–3.12 (train_type, vllm_mode),
3.2–3.4 (train_type, colocate expressed as num_infer_workers). A field the target does not accept is a Finding,
never a silently dropped flag.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, get_args, get_origin

import yaml
from pydantic import TypeAdapter, ValidationError

from grpo_ui.findings import Finding, finding
from grpo_ui.spec import ARGS, ArgDecl, JobSpec, SpecError, parse_version, validate_spec

DIALECTS = {"4.1+": "ms-swift ≥ 4.1", "4.0": "ms-swift 4.0", "3.5-3.12": "ms-swift 3.5–3.12",
            "3.2-3.4": "ms-swift 3.2–3.4"}
LAUNCH_ENV = ("NNODES", "NODE_RANK", "MASTER_ADDR", "MASTER_PORT", "NPROC_PER_NODE", "CUDA_VISIBLE_DEVICES")
SECRET_ENV = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD)", re.IGNORECASE)
COLOCATE_ONLY = {"vllm_gpu_memory_utilization", "vllm_max_model_len", "vllm_tensor_parallel_size", "vllm_max_num_seqs",
                 "vllm_enable_prefix_caching", "vllm_enforce_eager", "sleep_level", "offload_model",
                 "offload_optimizer", "num_infer_workers"}
SERVER_ONLY = {"vllm_server_host", "vllm_server_port", "vllm_server_group_port", "vllm_server_timeout",
               "async_generate"}
# Flags ms-swift removed, with what replaces them (reference §2 'history').
REMOVED = {
    "num_infer_workers": ("3.6", "use --vllm_mode colocate (workers == GPUs) or a swift rollout server"),
    "vllm_device": ("3.6", "use --vllm_mode colocate, or vllm_mode server with swift rollout nodes"),
    "gc_collect_after_offload": ("3.10", "remove it; ms-swift collects garbage after offload itself"),
    "use_lmdeploy": ("3.5", "use vLLM (--use_vllm true)"),
    "multi_turn_func": ("3.10", "use --multi_turn_scheduler"),
    "config": ("4.1", "pass the YAML file as the first positional argument: swift rlhf cfg.yaml"),
}


def dialect_of(version: str) -> str:
    v = parse_version(version)
    if v >= (4, 1, 0):
        return "4.1+"
    if v >= (4, 0, 0):
        return "4.0"
    if v >= (3, 5, 0):
        return "3.5-3.12"
    if v >= (3, 2, 0):
        return "3.2-3.4"
    raise ValueError(f"ms-swift {version} is older than 3.2, which has no GRPO support; upgrade ms-swift")


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
    """argv after ``swift`` (e.g. ['rlhf', '--rlhf_type', 'grpo', ...]), env for every node, and findings."""

    argv: list[str]
    env: dict[str, str]
    findings: list[Finding] = field(default_factory=list)


def _relevant(spec: JobSpec, d: ArgDecl) -> bool:
    if d.section != "rollout" or d.name == "use_vllm":
        return True
    r = spec.rollout
    if not r.use_vllm:
        return False
    if d.name in SERVER_ONLY:
        return r.vllm_mode == "server"
    if d.name in COLOCATE_ONLY:
        return r.vllm_mode != "server"
    return True


def _emit(spec: JobSpec, section: str, version: str, skip: set[str] = frozenset()):
    """(flag tokens, findings) for one section's fields that are set and relevant."""
    out: list[str] = []
    findings: list[Finding] = []
    obj = getattr(spec, section)
    for d in (d for d in ARGS if d.section == section and d.name not in skip):
        value = getattr(obj, d.name)
        if value is None or value == [] or (not d.always and value == d.swift_default(version)) \
                or not _relevant(spec, d):
            continue
        if not d.accepted_in(version):
            when = f"added in {d.since}" if d.since and parse_version(version) < parse_version(d.since) \
                else f"removed in {d.until}"
            findings.append(finding(
                "VERSION-FLAG-UNSUPPORTED", "error", d.path,
                f"--{d.flag} is set to {value!r} but ms-swift {version} does not accept it ({when}).",
                f"Reset {d.path} to its default ({d.default!r}) or target an ms-swift version that has it."))
            continue
        out += [f"--{d.flag_for(version)}", *format_value(value)]
    return out, findings


def train_command(spec: JobSpec, version: str | None = None) -> Command:
    """``swift rlhf`` argv for the target version (default: the spec's)."""
    version = version or spec.swift_version
    dialect = dialect_of(version)
    argv = ["rlhf", "--rlhf_type", "grpo"]
    train, findings = _emit(spec, "train", version)
    argv += train
    r = spec.rollout
    skip = {"vllm_server_host", "vllm_server_port"}
    if dialect == "3.2-3.4":
        skip |= {"vllm_mode"}
    rollout, more = _emit(spec, "rollout", version, skip)
    argv += rollout
    findings += more
    if r.use_vllm and r.vllm_mode == "server":
        hosts, ports = zip(*spec.server_endpoints(), strict=False) if spec.server_endpoints() else ((), ())
        if hosts:
            if parse_version(version) < (3, 7, 0) and len(hosts) > 1:
                findings.append(finding("VERSION-MULTI-SERVER", "error", "rollout.vllm_server_host",
                                        f"ms-swift {version} accepts one rollout server; {len(hosts)} are set.",
                                        "Use one rollout server, or ms-swift ≥ 3.7 for several."))
                hosts, ports = hosts[:1], ports[:1]
            argv += ["--vllm_server_host", *hosts, "--vllm_server_port", *map(str, ports)]
    if dialect == "3.2-3.4" and r.use_vllm and r.vllm_mode != "server" and r.num_infer_workers is None:
        argv += ["--num_infer_workers", str(spec.nproc_per_node())]
    argv += spec.extra_args
    return Command(argv, dict(spec.env), findings)


def rollout_command(spec: JobSpec, version: str | None = None) -> Command:
    """``swift rollout`` argv for a rollout node (server mode)."""
    version = version or spec.swift_version
    argv = ["rollout", "--model", spec.train.model]
    for name in ("model_type", "template"):
        if getattr(spec.train, name):
            argv += [f"--{name}", getattr(spec.train, name)]
    server, findings = _emit(spec, "server", version)
    argv += server
    if spec.train.external_plugins:
        argv += ["--external_plugins", *spec.train.external_plugins]
    if spec.train.multi_turn_scheduler:
        argv += ["--multi_turn_scheduler", spec.train.multi_turn_scheduler]
    return Command(argv, dict(spec.env), findings)


# ---------------------------------------------------------------------------------------------------------------
# Import: shell scripts (and their YAML configs) → JobSpec.

def _lookup(section_names: tuple[str, ...]) -> dict[str, ArgDecl]:
    table: dict[str, ArgDecl] = {}
    for d in ARGS:
        if d.section in section_names:
            table.setdefault(d.flag, d)
            if d.old_name:
                table.setdefault(d.old_name, d)
    return table


TRAIN_FLAGS = _lookup(("train", "rollout"))
SERVER_FLAGS = _lookup(("server",))


def _logical_lines(text: str) -> list[str]:
    return [ln for ln in re.sub(r"\\\r?\n", " ", text).splitlines() if ln.strip()]


def _split_flags(tokens: list[str]) -> tuple[list[str], list[tuple[str, list[str]]]]:
    """(positional tokens before the first flag, [(flag, values)]); ``--k=v`` is split."""
    positional, flags = [], []
    for tok in tokens:
        if tok.startswith("--") and len(tok) > 2:
            name, eq, val = tok[2:].partition("=")
            flags.append((name.replace("-", "_"), [val] if eq else []))
        elif flags:
            flags[-1][1].append(tok)
        else:
            positional.append(tok)
    return positional, flags


@dataclass
class ParsedScript:
    """One launch script: its command kind ('rlhf' or 'rollout'), env, flags and the tokens around them."""

    kind: str
    env: dict[str, str]
    flags: list[tuple[str, list[str]]]
    source: str


_REDIRECT = re.compile(r"^(\d*>>?|&>>?|<|\d*>&\d*)")
_COMMAND_END = {"|", "||", "&&", ";", "&"}


def _strip_shell_tail(tokens: list[str]) -> list[str]:
    """Drop redirections (and their targets) and whatever follows a pipe, `&&`, `;` or `&`."""
    out, skip_next = [], False
    for tok in tokens:
        if skip_next:
            skip_next = False
        elif tok in _COMMAND_END:
            break
        elif m := _REDIRECT.match(tok):
            skip_next = m[0] == tok and not tok.endswith("&") and ">&" not in tok
        else:
            out.append(tok)
    return out


def parse_script(text: str, source: str = "script", base_dir: Path | None = None) -> tuple[list[ParsedScript],
                                                                                          list[Finding]]:
    """Find every ``swift rlhf`` / ``swift rollout`` (or torchrun …/swift/cli/rlhf.py) command in a shell script."""
    env: dict[str, str] = {}
    commands, findings = [], []
    for line in _logical_lines(text):
        try:
            tokens = shlex.split(line, comments=True)
        except ValueError as e:
            findings.append(finding("IMPORT-SHELL-SYNTAX", "error", "spec", f"{source}: cannot parse `{line[:80]}`: {e}",
                                    "Fix the quoting in the script and import it again."))
            continue
        if not tokens:
            continue
        if tokens[0] == "export":
            tokens = tokens[1:]
        prefix: dict[str, str] = {}
        while tokens and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", tokens[0]):
            k, _, v = tokens.pop(0).partition("=")
            prefix[k] = v
        kind, rest = _command_of(tokens)
        if kind is None:
            if not tokens:
                env.update(prefix)
            continue
        rest = _strip_shell_tail(rest)
        positional, flags = _split_flags(rest)
        cmd_env = {**env, **prefix}
        for p in positional:
            if p.endswith((".yaml", ".yml", ".json")):
                flags = _config_flags(p, base_dir, cmd_env, findings, source) + flags
        flags = _expand_config_flag(flags, base_dir, cmd_env, findings, source)
        commands.append(ParsedScript(kind, cmd_env, flags, source))
    if not commands:
        findings.append(finding("IMPORT-NO-COMMAND", "error", "spec", f"{source}: no `swift rlhf` or `swift rollout` "
                                "command found.", "Import the script that runs swift rlhf on a node."))
    return commands, findings


def _command_of(tokens: list[str]) -> tuple[str | None, list[str]]:
    for i, tok in enumerate(tokens):
        if Path(tok).name == "swift" and i + 1 < len(tokens) and tokens[i + 1] in ("rlhf", "rollout"):
            return tokens[i + 1], tokens[i + 2:]
        m = re.search(r"swift/cli/(rlhf|rollout)\.py$", tok)
        if m:
            return m[1], tokens[i + 1:]
    return None, []


def _config_flags(path: str, base_dir: Path | None, env: dict, findings: list, source: str):
    p = Path(path) if Path(path).is_absolute() or base_dir is None else base_dir / path
    try:
        data = yaml.safe_load(p.read_text()) or {}
    except (OSError, yaml.YAMLError) as e:
        findings.append(finding("IMPORT-CONFIG-UNREADABLE", "error", "spec", f"{source}: cannot read config {p}: {e}",
                                "Import the config file's directory together with the script, or paste its flags."))
        return []
    env.update({k: str(v) for k, v in (data.pop("ENV", None) or {}).items()})
    return [(k, format_value(v)) for k, v in data.items()]


def _expand_config_flag(flags, base_dir, env, findings, source):
    out = []
    for name, values in flags:
        if name == "config" and values:
            out = _config_flags(values[0], base_dir, env, findings, source) + out
        else:
            out.append((name, values))
    return out


def coerce(decl: ArgDecl, values: list[str]) -> Any:
    """argv tokens → the field's type (the final spec validation names the field if they don't fit)."""
    ann = decl.annotation
    is_list = get_origin(ann) is list or any(get_origin(a) is list for a in get_args(ann))
    raw: Any = values if is_list else (" ".join(values) if values else "true")  # a bare flag means true
    adapter = TypeAdapter(ann)
    try:
        return adapter.validate_strings(raw)
    except ValidationError:
        pass
    try:  # e.g. Literal[0, 1, 2] from "1": read the token as YAML would
        return adapter.validate_python([yaml.safe_load(v) for v in raw] if is_list else yaml.safe_load(raw))
    except (ValidationError, yaml.YAMLError):
        return raw


def import_scripts(texts: list[tuple[str, str]], version: str = "4.6",
                   base_dir: Path | None = None) -> tuple[JobSpec, list[Finding]]:
    """One or more node scripts of the same job → (JobSpec, findings about unknown/renamed/removed/inconsistent flags).

    texts: [(source name, script text)]. Several trainer scripts are the nodes of one job, ordered by NODE_RANK.
    """
    findings: list[Finding] = []
    commands: list[ParsedScript] = []
    for source, text in texts:
        cmds, f = parse_script(text, source, base_dir)
        commands += cmds
        findings += f
    trainers = [c for c in commands if c.kind == "rlhf"]
    servers = [c for c in commands if c.kind == "rollout"]
    if not trainers:
        raise SpecError([("spec", "no `swift rlhf` command found in " + ", ".join(s for s, _ in texts))])
    trainers.sort(key=lambda c: int(c.env.get("NODE_RANK", "0") or 0))
    data: dict[str, Any] = {"swift_version": version, "train": {}, "rollout": {}, "server": {}}
    extra: list[str] = []
    first = trainers[0]
    for name, values in first.flags:
        _import_flag(name, values, TRAIN_FLAGS, data, extra, findings, version, first.source)
    if servers:
        for name, values in servers[0].flags:
            if name in ("model", "model_type", "template", "external_plugins", "multi_turn_scheduler"):
                continue
            _import_flag(name, values, SERVER_FLAGS, data, [], findings, version, servers[0].source)
    data["extra_args"] = extra
    data["cluster"], data["env"], data["secret_env"] = _import_cluster(trainers, servers, findings)
    findings += _node_disagreements(trainers)
    if "num_infer_workers" in {n for n, _ in first.flags} and "vllm_mode" not in data["rollout"]:
        data["rollout"]["vllm_mode"] = "colocate"
    _import_spare_vllm_gpus(first, data, version)
    if not data["rollout"].setdefault("use_vllm", False):  # ms-swift's default when the script does not say
        data["rollout"].setdefault("vllm_mode", None)
    return validate_spec(data, texts[0][0]), findings


def _import_spare_vllm_gpus(first: ParsedScript, data: dict, version: str) -> None:
    """ms-swift 3.2–3.4 put vLLM on the last num_infer_workers GPUs (default 1) when NPROC_PER_NODE + workers is the
    GPU count: record that layout, so the spec trains on NPROC_PER_NODE GPUs and keeps the rest for vLLM."""
    rollout, gpus = data["rollout"], data["cluster"]["nodes"][0]["gpus"]
    nproc = int(first.env.get("NPROC_PER_NODE", "0") or 0)
    if dialect_of(version) != "3.2-3.4" or not rollout.get("use_vllm") or rollout.get("vllm_mode") == "server":
        return
    workers = rollout.get("num_infer_workers") or 1
    if 0 < nproc < len(gpus) and nproc + workers == len(gpus):
        rollout["num_infer_workers"] = workers


def _import_flag(name, values, table, data, extra, findings, version, source):
    if name == "rlhf_type":
        if values[:1] != ["grpo"]:
            findings.append(finding("IMPORT-NOT-GRPO", "error", "spec", f"{source}: --rlhf_type {' '.join(values)} "
                                    "is not GRPO.", "Import a GRPO launch script (--rlhf_type grpo)."))
        return
    if name in REMOVED and parse_version(version) >= parse_version(REMOVED[name][0]):
        since, instead = REMOVED[name]
        findings.append(finding("IMPORT-REMOVED-FLAG", "warning", "spec", f"{source}: --{name} "
                                f"{' '.join(values)} was removed in ms-swift {since}.", instead[0].upper() + instead[1:] + "."))
        return
    decl = table.get(name)
    if decl is None:
        extra += [f"--{name}", *values]
        findings.append(finding("IMPORT-UNKNOWN-FLAG", "warning", "extra_args", f"{source}: --{name} is not a flag "
                                "grpo-ui knows; kept verbatim in extra_args.",
                                "Check the spelling against `swift rlhf --help` for your ms-swift version."))
        return
    if name != decl.flag_for(version):
        findings.append(finding("IMPORT-RENAMED-FLAG", "warning", decl.path, f"{source}: --{name} is called "
                                f"--{decl.flag_for(version)} in ms-swift {version}.",
                                f"Use --{decl.flag_for(version)}; grpo-ui renders the right name for the target."))
    if not decl.accepted_in(version):
        findings.append(finding("IMPORT-UNSUPPORTED-FLAG", "warning", decl.path, f"{source}: --{name} is not accepted"
                                f" by ms-swift {version}.", f"Reset {decl.path} or change the target version."))
    data[decl.section][decl.name] = coerce(decl, values)


def _import_cluster(trainers, servers, findings):
    nodes, env = [], {}
    for rank, cmd in enumerate(trainers):
        cvd = cmd.env.get("CUDA_VISIBLE_DEVICES")
        nproc = int(cmd.env.get("NPROC_PER_NODE", "0") or 0)
        gpus = [int(x) for x in cvd.split(",") if x.strip().isdigit()] if cvd else list(range(max(nproc, 1)))
        master = cmd.env.get("MASTER_ADDR", "")
        host = master if rank == 0 and master and master not in ("127.0.0.1", "localhost") else (
            "localhost" if len(trainers) == 1 else f"node{rank}")
        nodes.append({"host": host, "gpus": gpus})
    for i, cmd in enumerate(servers):
        cvd = cmd.env.get("CUDA_VISIBLE_DEVICES", "0")
        nodes.append({"host": f"rollout{i}", "role": "rollout",
                      "gpus": [int(x) for x in cvd.split(",") if x.strip().isdigit()]})
    if len(trainers) > 1 or servers:
        findings.append(finding("IMPORT-SET-HOSTS", "info", "cluster.nodes",
                                "Scripts do not say which machine each node is; placeholder host names were used.",
                                "Set each node's host (or ssh-config alias) on the Cluster page."))
    secrets = []
    for k, v in trainers[0].env.items():
        if k in LAUNCH_ENV:
            continue
        if SECRET_ENV.search(k):
            secrets.append(k)
            findings.append(finding("IMPORT-SECRET", "info", "secret_env", f"{k} looks like a secret; its value was "
                                    "not imported.", f"Enter {k} on the Launch page; it travels in a 0600 file."))
        else:
            env[k] = v
    e0 = trainers[0].env
    cluster = {"nodes": nodes}
    if e0.get("MASTER_PORT"):
        cluster["master_port"] = int(e0["MASTER_PORT"])
    if e0.get("MASTER_ADDR") and len(trainers) > 1:
        cluster["master_addr"] = e0["MASTER_ADDR"]
    return cluster, env, secrets


def _node_disagreements(trainers) -> list[Finding]:
    out = []
    base = trainers[0]
    for cmd in trainers[1:]:
        rank = cmd.env.get("NODE_RANK", "?")
        a, b = dict(base.flags), dict(cmd.flags)
        for name in sorted(set(a) | set(b)):
            if a.get(name) != b.get(name):
                out.append(finding("NODE-ARGS-DIFFER", "error", "cluster.nodes",
                                   f"Node rank {rank} ({cmd.source}) has --{name} {' '.join(b.get(name, ['(unset)']))}"
                                   f" but rank 0 has {' '.join(a.get(name, ['(unset)']))}.",
                                   "Every node must run identical arguments; grpo-ui renders one set for all nodes."))
        for key in ("NNODES", "NPROC_PER_NODE", "MASTER_ADDR", "MASTER_PORT"):
            if base.env.get(key) != cmd.env.get(key):
                out.append(finding("NODE-ENV-DIFFER", "error", "cluster.nodes",
                                   f"Node rank {rank} ({cmd.source}) has {key}={cmd.env.get(key)} but rank 0 has "
                                   f"{key}={base.env.get(key)}.", f"Use the same {key} on every node."))
    return out

