"""Render a JobSpec into the files that run it: one script per trainer and rollout node, ms-swift YAML per node,
a Slurm batch script, a secrets template and a README — all from one rendering, so nodes cannot disagree.

Every value reaches bash through ``grpo_ui.core.shell`` (the templates' ``q`` filter is ``shell.quote``; paths go through
``shell.path``).
"""

from __future__ import annotations

import io
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import jinja2
import yaml

from grpo_ui.checks.assess import Assessment
from grpo_ui.checks.rules.credentials import undeclared
from grpo_ui.core import shell
from grpo_ui.core.findings import Finding, finding
from grpo_ui.launch import runfiles
from grpo_ui.launch.runfiles import RAY_CONFIG, RAY_SCRIPT, SBATCH, NodeFiles, secrets_file
from grpo_ui.spec.cluster import Node
from grpo_ui.spec.files import job_files
from grpo_ui.spec.megatron import groups_text
from grpo_ui.spec.model import JobSpec
from grpo_ui.spec.names import check_name
from grpo_ui.spec.resolve import SLURM_MASTER_PORT, Resolved, resolve
from grpo_ui.spec.slurm import sbatch_option
from grpo_ui.spec.swift_cli import (
    RAY_ENTRYPOINT,
    TRAIN_FLAGS,
    Command,
    coerce,
    ray_config,
    rollout_command,
    stands_alone,
    train_command,
)

TEMPLATES = Path(__file__).resolve().parents[2] / "templates"
EXECUTABLE = (".sh", ".sbatch")
ROLLOUT_HOSTS = '"${ROLLOUT_HOSTS[@]}"'  # in job.sbatch: the rollout component's node addresses, known at run time


_env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), undefined=jinja2.StrictUndefined,
                          autoescape=False, trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True)
_env.filters["q"] = shell.quote
# The run directory's files as the scripts name them (grpo_ui.launch.runfiles), the node's number a shell expression
_env.globals.update(trainer_exit=NodeFiles("trainer", "$NODE_RANK").exit_code,
                    rollout_exit=NodeFiles("rollout", "$ROLLOUT_INDEX").exit_code,
                    trainer_log=NodeFiles("trainer", "%n").log, rollout_log=NodeFiles("rollout", "%n").log,
                    hosts=runfiles.HOSTS, rollout_hosts=runfiles.ROLLOUT_HOSTS, sbatch_output=runfiles.SBATCH_OUTPUT)


@dataclass(frozen=True)
class RayJob:
    """What the Ray backend submits for a job in ms-swift's Ray mode: ``script``, the driver (a file of the bundle:
    it runs ``megatron rlhf --use_ray true --config <config>`` once, with the job's environment and secrets, and
    writes its exit code as a node script does), and ``config``, the Ray config it reads (a file of the bundle too).
    Both sit in the run directory of the node the driver runs on; Ray places the trainers and vLLM replicas."""

    script: str
    config: str

    def entrypoint(self, run_dir: str) -> str:
        """The Ray job's entrypoint: the driver's script, from the run directory."""
        return f"cd {shell.path(run_dir)} && bash --norc {shell.quote(self.script)}"


RAY_JOB = RayJob(RAY_SCRIPT, RAY_CONFIG)  # what every Ray-mode bundle submits

@dataclass
class Bundle:
    """Rendered files (name → text) and the findings rendering produced."""

    job_id: str
    files: dict[str, str]
    findings: list[Finding] = field(default_factory=list)
    node_files: dict[int, str] = field(default_factory=dict)      # trainer node index in cluster.nodes → file
    rollout_files: dict[int, str] = field(default_factory=dict)   # rollout node index → file
    added: list[tuple[str, str]] = field(default_factory=list)    # flags grpo-ui added on its own, with why
    ray: RayJob | None = None                                     # Ray mode: what the Ray backend submits (no node files)

    def zip_bytes(self) -> bytes:
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
            for name, text in sorted(self.files.items()):
                info = zipfile.ZipInfo(f"{self.job_id}/{name}", date_time=(2026, 1, 1, 0, 0, 0))
                info.external_attr = (0o755 if name.endswith(EXECUTABLE) else 0o644) << 16
                info.compress_type = zipfile.ZIP_DEFLATED
                z.writestr(info, text)
        return buf.getvalue()


def secrets_example(spec: JobSpec) -> str:
    """The secrets template: each declared secret, then each key a tracker or hub needs that is not declared (with
    why: the node may be logged in instead)."""
    lines = [f"{name}=\n" for name in spec.secret_env]
    lines += [f"# {c.env}=  ({why}: {c.what} reads it, unless every node ran `{c.login}`)\n" for c, why in undeclared(spec)]
    return "".join(lines) or "# no secrets declared, and none needed by report_to or the model's hub\n"


def run_dir(spec: JobSpec, job_id: str) -> str:
    """The job's run directory on every node, as written in the scripts."""
    return spec.cluster.run_root.rstrip("/") + "/" + job_id


def _node_context(spec: JobSpec, node: Node, job_id: str) -> dict:
    rd = run_dir(spec, job_id)
    workdir = node.workdir or spec.cluster.workdir
    return {"job_id": job_id, "run_dir": shell.path(rd), "env": sorted({**spec.env, **node.env}.items()),
            "python_env": shell.path(node.python_env) if node.python_env else "",
            "workdir": shell.path(workdir) if workdir else '"$RUN_DIR"',
            "cuda_visible_devices": ",".join(map(str, node.gpus))}


def swift_line(argv: list[str], raw: tuple[int, int, str] | None = None, program: str = "swift") -> str:
    """``swift`` (or ``program``: megatron) and its arguments, one flag with its values per line (continued with
    backslashes, as ms-swift's own examples are written); ``raw`` (start, end, text): argv[start:end] replaced by
    shell text, unquoted."""
    words = [shell.quote(a) for a in argv]
    if raw:
        start, end, text = raw
        words[start:end] = [text]
        argv = [*argv[:start], text, *argv[end:]]
    lines = [[program]]
    for arg, word in zip(argv, words, strict=True):
        if arg.startswith("--") and len(lines[-1]) > 1:
            lines.append([])
        lines[-1].append(word)
    return " \\\n    ".join(" ".join(line) for line in lines)


def slurm_gpus(spec: JobSpec, nodes: list[Node], role: str) -> int:
    """GPUs per node a job.sbatch component asks for (--gres=gpu:N): slurm.gpus_per_node for the trainers, by
    default (and always for the rollout servers) the nodes' GPU count."""
    wanted = spec.slurm.gpus_per_node if role == "trainer" else None
    return len(nodes[0].gpus) if wanted is None else wanted


def _sbatch_options(spec: JobSpec, nodes: list[Node], role: str) -> list[str]:
    """The #SBATCH options of one job component: its node count, one task per node, GPUs, the slurm fields."""
    s, gpus = spec.slurm, slurm_gpus(spec, nodes, role)
    named = {"partition": s.partition, "account": s.account, "qos": s.qos, "time": s.time_limit,
             "constraint": s.constraint, "cpus-per-task": s.cpus_per_task}
    return [f"--nodes={len(nodes)}", "--ntasks-per-node=1", *([f"--gres=gpu:{gpus}"] if gpus else []),
            *(f"--{k}={v}" for k, v in named.items() if v is not None), *map(sbatch_option, s.extra_sbatch)]


def sbatch_request(job: JobSpec | Resolved) -> str:
    """The Slurm request of the job's job.sbatch alone (its #SBATCH lines: nodes, GPUs, partition, …), as a script
    ``sbatch --test-only`` can judge before there is a job to render."""
    eff = resolve(job)
    trainers, rollouts = eff.spec.trainer_nodes(), eff.spec.rollout_nodes() if eff.server else []
    return "#!/usr/bin/env bash\n" + _env.get_template("_sbatch_request.j2").render(
        trainer_sbatch=_sbatch_options(eff.spec, trainers, "trainer") if trainers else [],
        rollout_sbatch=_sbatch_options(eff.spec, rollouts, "rollout") if rollouts else [])


def _sbatch_context(spec: JobSpec, trainers: list[Node], rollouts: list[Node], train: Command,
                    rollout_argv: list[str] | None) -> dict:
    """job.sbatch: the trainers as the job's first component and, in server mode, the rollout nodes as a second
    (heterogeneous) one. A heterogeneous job rather than a separate rollout job: Slurm allocates both at once (no
    trainer waiting in the queue while its servers already run, or the reverse), one scancel ends both, and the
    trainers learn the servers' addresses from the allocation itself."""
    train_argv = train.argv
    ctx = {"trainer_sbatch": _sbatch_options(spec, trainers, "trainer"), "rollout_sbatch": [],
           "command": swift_line(train_argv, program=train.program), "allocated_servers_port": None}
    if rollout_argv is not None:
        ctx["rollout_sbatch"] = _sbatch_options(spec, rollouts, "rollout")
        ctx["rollout_command"] = swift_line(rollout_argv)
        # The trainers talk to the cluster's rollout nodes: in the job, those are the rollout component's nodes.
        if "--vllm_server_host" in train_argv and not spec.rollout.vllm_server_host:
            start, end = train_argv.index("--vllm_server_host") + 1, train_argv.index("--vllm_server_port")
            ctx["command"] = swift_line(train_argv, (start, end, ROLLOUT_HOSTS), train.program)
            ctx["servers"], ctx["allocated_servers_port"] = [], spec.server.port
    return ctx


def _yaml_config(argv: list[str], env: dict[str, str]) -> str:
    """ms-swift ≥ 4.1 config: each --flag becomes a key with the launch env in ENV. Values take their declared
    field's type (a system prompt 'true' stays a string); flags we do not declare (extra_args) stay strings."""
    data: dict = {"ENV": env}
    tokens: dict[str, list[str]] = {}
    key = None
    for tok in argv[1:]:
        if tok.startswith("--"):
            key = tok[2:]
            tokens[key] = []
        elif key is not None:
            tokens[key].append(tok)
    for key, values in tokens.items():
        decl = TRAIN_FLAGS.get(key)
        verbatim = values[0] if len(values) == 1 else values
        data[key] = coerce(decl, values) if decl and (values or stands_alone(decl)) else verbatim
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=120)


def render(job: Assessment | JobSpec | Resolved, job_id: str) -> Bundle:
    """All files for the job: its assessment (whose command lines are used as they are), or its spec or Resolved
    values. Rendering checks nothing: the assessment's findings say what is wrong with the job; the bundle's say
    only what could not be written (a YAML config older versions cannot take). ``job_id`` names the run directory
    (grpo_ui.spec.names.check_name: SpecError otherwise)."""
    check_name(job_id)
    eff, train = (job.resolved, job.train) if isinstance(job, Assessment) else (resolve(job), None)
    spec = eff.spec
    train = train or train_command(eff)
    findings: list[Finding] = []
    trainers, rollouts = spec.numbered("trainer"), spec.numbered("rollout")
    files: dict[str, str] = {}
    bundle = Bundle(job_id, files, findings, added=list(train.added))
    if eff.ray:
        return _render_ray(eff, bundle)
    common = {"nnodes": eff.nnodes, "master_addr": eff.master_addr, "master_port": eff.master_port,
              "nproc": eff.nproc_per_node, "servers": list(eff.server_endpoints) if eff.server else [],
              "server_timeout": int(spec.rollout.vllm_server_timeout)}
    yaml_ok = eff.version >= (4, 1, 0)
    for rank, (i, node) in enumerate(trainers):
        name = NodeFiles("trainer", rank).script
        ctx = {**common, **_node_context(spec, node, job_id), "rank": rank,
               "command": swift_line(train.argv, program=train.program),
               "secrets_file": NodeFiles("trainer", "${NODE_RANK}").secrets}  # node scripts differ in NODE_RANK only
        files[name] = _env.get_template("node.sh.j2").render(ctx)
        bundle.node_files[i] = name
        if yaml_ok:
            files[f"swift_{rank}.yaml"] = _yaml_config(train.argv, {**eff.launch_env(rank, node), **dict(ctx["env"])})
    if not yaml_ok:
        findings.append(finding("RENDER-NO-YAML", "info", "swift_version",
                                f"ms-swift {spec.swift_version} cannot take a positional YAML config (added in 4.1); "
                                "no swift_<rank>.yaml was written.", "Use the node scripts, or ms-swift ≥ 4.1."))
    servers = rollout_command(eff) if eff.server and rollouts else None  # every server on server.port (sbatch)
    if servers:
        for k, (i, node) in enumerate(rollouts):
            roll = rollout_command(eff, index=k)
            bundle.added += [(f"{flags} (rollout_{k}.sh)", why) for flags, why in roll.added]
            name = NodeFiles("rollout", k).script
            ctx = {**_node_context(spec, node, job_id), "index": k, "command": swift_line(roll.argv),
                   "secrets_file": NodeFiles("rollout", "${ROLLOUT_INDEX}").secrets}
            files[name] = _env.get_template("rollout.sh.j2").render(ctx)
            bundle.rollout_files[i] = name
    if trainers:
        files[SBATCH] = _env.get_template("job.sbatch.j2").render(
            {**common, "master_port": spec.cluster.master_port or SLURM_MASTER_PORT,
             **_node_context(spec, trainers[0][1], job_id), "secrets_file": secrets_file(SBATCH),
             **_sbatch_context(spec, [n for _, n in trainers], [n for _, n in rollouts], train,
                               servers.argv if servers else None)})
    files["secrets.env.example"] = secrets_example(spec)
    outside = [f"{h}:{p}" for h, p in eff.server_endpoints] if eff.server and not rollouts else []
    files["README.txt"] = _env.get_template("README.txt.j2").render(
        job_id=job_id, swift_version=spec.swift_version, program=train.program, files=sorted([*files, "README.txt"]),
        run_dir_text=run_dir(spec, job_id), workdir=spec.cluster.workdir,
        job_files=[(f.field, f.value) for f in job_files(spec)], outside_servers=outside,
        server_timeout=int(spec.rollout.vllm_server_timeout),
        secrets=[*spec.secret_env, *(c.env for c, _ in undeclared(spec))],
        node_files=[(bundle.node_files[i], n.host) for i, n in trainers],
        rollout_files=[(bundle.rollout_files[i], n.host) for i, n in rollouts if i in bundle.rollout_files])
    return bundle


def _render_ray(eff: Resolved, bundle: Bundle) -> Bundle:
    """Ray mode: ms-swift's Ray config and the driver's script instead of node scripts (the Ray backend starts the
    cluster and runs the script once; Ray places the roles), with the secrets template and a README."""
    spec, job_id = eff.spec, bundle.job_id
    cfg = ray_config(eff)
    bundle.findings += cfg.findings
    bundle.added = [(f"{text} ({RAY_CONFIG})", why) for text, why in cfg.added]
    head = next(iter(spec.trainer_nodes()), None)
    exit_file = NodeFiles("trainer", 0).exit_code
    at = len(RAY_ENTRYPOINT)  # the config's path: in the run directory, wherever the script cd's
    ctx = {**(_node_context(spec, head, job_id) if head else {}), "gpus": eff.ray.total_gpus, "exit_file": exit_file,
           "secrets_file": secrets_file(RAY_SCRIPT),
           "command": swift_line([*RAY_ENTRYPOINT, RAY_CONFIG], (at, at + 1, f'"$RUN_DIR/{RAY_CONFIG}"'), "megatron")}
    bundle.files[RAY_CONFIG] = (f"# grpo-ui job {job_id}: ms-swift's Ray config, run by {RAY_SCRIPT}: "
                                f"megatron rlhf --use_ray true --config {RAY_CONFIG}\n"
                                + yaml.safe_dump(cfg.data, sort_keys=False, allow_unicode=True, width=120))
    bundle.files[RAY_SCRIPT] = _env.get_template("ray_job.sh.j2").render(ctx)
    bundle.files["secrets.env.example"] = secrets_example(spec)
    bundle.files["README.txt"] = _env.get_template("README_ray.txt.j2").render(
        job_id=job_id, swift_version=spec.swift_version, files=sorted([*bundle.files, "README.txt"]),
        run_dir_text=run_dir(spec, job_id), script=RAY_SCRIPT, config=RAY_CONFIG, ray=eff.ray,
        groups=groups_text(eff.ray.groups), secrets_file=secrets_file(RAY_SCRIPT),
        secrets=[*spec.secret_env, *(c.env for c, _ in undeclared(spec))])
    bundle.ray = RAY_JOB
    return bundle


def write_bundle(bundle: Bundle, out_dir: str | Path) -> list[Path]:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, text in bundle.files.items():
        p = out / name
        p.write_text(text)
        p.chmod(0o755 if name.endswith(EXECUTABLE) else 0o644)
        paths.append(p)
    return paths
