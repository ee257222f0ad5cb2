"""Ray backend: the job is one Ray job, submitted through the Ray Jobs API (grpo_ui.backends.ray_jobs), on a Ray
cluster grpo-ui starts on the job's nodes over SSH (``cluster.ray_address`` unset) or on a running one
(``cluster.ray_address``: its Jobs API, e.g. what KubeRay exposes), whose nodes are the job's nodes.

Starting a cluster: ``ray start --head`` on node 0 (its GCS on ``ray_port``, the dashboard and Jobs API bound to node
0's cluster address on ``ray_dashboard_port``, never 0.0.0.0), then ``ray start --address`` on the others, each node
with its own GPUs as Ray's GPU resources (CUDA_VISIBLE_DEVICES = its gpus) and started in the node's working
directory, where Ray's workers then run (as the node scripts do). Every Ray process carries
GRPO_UI_RUN=<job>/ray<node>@<launch> in its environment, so the cluster is ended exactly, by that marker, when the job
ends (unless ``ray_keep``): not with ``ray stop``, which ends every Ray process of every user on the machine.

Two kinds of job, told by the plan:
- the per-node scripts (swift rlhf): each node's run directory gets its script and 0600 secrets file over SSH, as
  with the SSH backend (the script reads and deletes it); node 0's also the driver (ray_driver.py) and its plan. The
  entrypoint runs the driver on node 0 (pinned with Ray's ``node:<address>`` resource); the driver runs each node's
  script on its node (one actor per node, node affinity, the node's GPUs as resources), so the scripts SSH and Slurm
  run are the scripts Ray runs, with each node's marker in their environment;
- ms-swift's Ray mode (the bundle's RayJob): the entrypoint is the driver's script (``megatron rlhf --use_ray true
  --config ray_config.yaml``) on node 0, where it and its secrets file are sent; every node gets the Ray config and,
  when the job has secrets, the 0600 file its Ray workers read them from (grpo_ui.backends.ray_secrets, shipped as a
  Ray package and run by Ray in each worker process). The job's marker is in its runtime environment, which Ray gives
  the driver and every worker of the job.
Ray's dashboard shows a job's entrypoint, metadata and runtime environment: only the job's own non-secret environment
(spec.env), its marker and the secrets file's path go there, never a value.

Following: the Jobs API's status (PENDING/RUNNING/SUCCEEDED/FAILED/STOPPED; placement groups Ray has not placed yet
and the driver's ``grpo-ui:`` lines say a job waits for resources), each node's exit code from its run directory
(the per-node scripts), the driver's log through the Jobs API (job_log; kept in the run directory when grpo-ui ends
the cluster it started). Stopping: the Jobs API's stop, then every process of every node found by its marker and
stopped, as the SSH backend does, and the secrets files removed.
"""

from __future__ import annotations

import hashlib
import io
import ipaddress
import json
import os
import re
import time
import zipfile
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from grpo_ui.backends import ray_secrets
from grpo_ui.backends.base import BackendError, Handle, JobStatus, LogReader, NodeStatus, Progress
from grpo_ui.backends.preflight import HostFacts, preflight
from grpo_ui.backends.preflight.ports import taken
from grpo_ui.backends.ray_jobs import ENDED, STATES, JobsApi, JobsApiError
from grpo_ui.backends.remote.runner import Runner, parallel
from grpo_ui.backends.remote.ssh import SshError
from grpo_ui.backends.ssh import OnSpecHosts, node_files, run_token, secrets_file_text, stop_marked, tar_payload
from grpo_ui.core import shell
from grpo_ui.core.errors import describe
from grpo_ui.core.findings import Finding, finding
from grpo_ui.launch.plan import LaunchPlan, PlannedNode
from grpo_ui.launch.render import RayJob
from grpo_ui.launch.runfiles import (
    RAY_CONFIG,
    RAY_DRIVER,
    RAY_DRIVER_LOG,
    RAY_PLAN,
    RAY_SCRIPT,
    RAY_WORKER_SECRETS,
    NodeFiles,
    secrets_file,
)
from grpo_ui.spec.megatron import groups_text, unplaced
from grpo_ui.spec.names import RUN_TOKEN
from grpo_ui.spec.resolve import Resolved
from grpo_ui.spec.swift_cli import RAY_ENTRYPOINT

DRIVER_SOURCE = Path(__file__).with_name("ray_driver.py")
SECRETS_MODULE = "grpo_ui_ray_secrets"  # grpo_ui/backends/ray_secrets.py as the Ray package's module
PLAIN_LOG = {"RAY_COLOR_PREFIX": "0"}  # the driver prints the lines Ray forwards without colour codes around their
#                                        "(Actor pid=…, ip=…)" heading (ray/_private/worker.py print_worker_logs)
API_WAIT = 180.0  # seconds the Jobs API of a cluster just started may take to answer (its dashboard starts last)
STOP_WAIT = 30.0  # seconds, on top of the grace, Ray may take to end a stopped job
RAY_GRACE = 2.0   # seconds Ray's own processes get after SIGTERM once the job is over (they keep nothing it needs;
#                   its GCS and raylets often outlive a SIGTERM for many seconds)
_LINE = re.compile(r"^grpo-ui: (?:node (\d+) (started \(pid (\d+)\)|lost at ([\d.]+): (.*)|ended at [\d.]+: .*)|"
                   r"(waiting for resources: .*)|error: (.*))$", re.MULTILINE)


@dataclass
class RayNode:
    """One node of a Ray job."""

    index: int                 # in spec.cluster.nodes
    role: str
    rank: int | None           # NODE_RANK of a trainer
    script: str
    address: str               # where Ray knows it (its --node-ip-address)
    tried: bool = False        # its files were sent: a secrets file, or a process, may be there

    @property
    def files(self) -> NodeFiles:
        return NodeFiles.of_script(self.script)


@dataclass
class RayHandle(Handle):
    """A Ray job: ``job`` is grpo-ui's job id, ``submission`` Ray's submission id for it."""

    backend = "ray"

    tag: str = ""               # drawn at each launch: the markers of its processes
    submission: str = ""        # the Ray job's submission id
    dashboard: str = ""         # the cluster's dashboard and Jobs API (http://HEAD:PORT)
    mode: str = "existing"      # "start": grpo-ui started the cluster on the nodes; "existing": it was running
    keep: bool = False          # a started cluster stays up when the job ends
    driver: bool = False        # ms-swift's Ray mode: the driver's script is the entrypoint, Ray places the roles
    worker_secrets: bool = False  # ms-swift's Ray mode: every node got the secrets file its Ray workers read
    ray_started: list[int] = field(default_factory=list)  # nodes where `ray start` ran
    submitted: bool = False     # the submission was sent
    nodes: list[RayNode] = field(default_factory=list)

    def node(self, index: int) -> RayNode:
        return next(n for n in self.nodes if n.index == index)

    def to_dict(self) -> dict:
        return {"backend": self.backend, **asdict(self)}

    @classmethod
    def from_dict(cls, data: dict) -> RayHandle:
        return cls(**{**data, "nodes": [RayNode(**n) for n in data["nodes"]]})

    @property
    def link(self) -> str:
        """The job's page on the Ray dashboard."""
        return f"{self.dashboard}/#/jobs/{self.submission}"


def ray_token(handle: RayHandle, index: int) -> str:
    """The environment entry every Ray process grpo-ui started on node ``index`` carries."""
    return f"{RUN_TOKEN}={handle.job}/ray{index}@{handle.tag}"


def job_token(handle: RayHandle) -> str:
    """ms-swift's Ray mode: the environment entry of every process of the job, its driver's and Ray's workers' on
    any node (the job's runtime environment carries it)."""
    return f"{RUN_TOKEN}={handle.job}/job@{handle.tag}"


def secrets_package() -> tuple[str, bytes]:
    """grpo_ui/backends/ray_secrets.py as a Ray package: its name (_ray_pkg_<hash>.zip) and the zip."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr(zipfile.ZipInfo(f"{SECRETS_MODULE}.py", (2026, 1, 1, 0, 0, 0)), Path(ray_secrets.__file__).read_text())
    data = buf.getvalue()
    return f"_ray_pkg_{hashlib.sha256(data).hexdigest()[:32]}.zip", data


def ray_dir(handle: RayHandle, index: int) -> str:
    """Ray's temporary directory on a node grpo-ui started Ray on: short (Ray's sockets live there, and a socket's
    path has at most 107 bytes) and its own for each launch and node."""
    return f"/tmp/grpo-ui-ray-{handle.tag}-{index}"


def _is_ip(address: str) -> bool:
    try:
        ipaddress.ip_address(address)
        return True
    except ValueError:
        return False


def driver_lines(log: str) -> dict:
    """What the driver said (its ``grpo-ui:`` lines): {"started": {node: pid}, "lost": {node: (time, why)},
    "waiting": the last waiting line or None, "error": its error or None}."""
    out: dict = {"started": {}, "lost": {}, "waiting": None, "error": None}
    for m in _LINE.finditer(log):
        node, _, pid, when, why, waiting, error = m.groups()
        if pid:
            out["started"][int(node)] = int(pid)
        elif when:
            out["lost"][int(node)] = (float(when), why.strip())
        out["waiting"] = waiting or out["waiting"]
        out["error"] = error or out["error"]
    return out


def submission_text(eff: Resolved, job: RayJob, run_dir: str) -> str:
    """What the Ray backend submits for a job in ms-swift's Ray mode, in a few lines (the CLI's launch, render and
    args): the cluster, the entrypoint and the command it runs, the placement Ray is asked for, what the job's runtime
    environment holds."""
    c, ray, spec = eff.spec.cluster, eff.ray, eff.spec
    hosts = [n.host for n in c.nodes]
    where = (f"the Ray cluster at {c.ray_address}, its driver on {hosts[0]}" if c.ray_address else
             f"a Ray cluster grpo-ui starts on {', '.join(hosts)} (head {hosts[0]}; "
             f"{'kept' if c.ray_keep else 'ended'} when the job ends)")
    roles = (f"train and rollout share {ray.train_gpus} GPU(s)" if ray.colocate else
             f"train {ray.train_gpus} GPU(s), rollout {ray.rollout_gpus} GPU(s) ({ray.replicas} vLLM replica(s))")
    secrets = (f"; {', '.join(spec.secret_env)} from a 0600 file on each node, never where Ray shows them"
               if spec.secret_env else "")
    return "\n".join([
        f"Ray job on {where}",
        f"  entrypoint: {job.entrypoint(run_dir)}  (runs megatron {' '.join(RAY_ENTRYPOINT)} {job.config})",
        f"  placement: {roles}, over {ray.nnodes} node(s): {groups_text(ray.groups)}, each on one node",
        f"  runtime environment: the job's env ({', '.join(sorted(spec.env)) or 'none'}) and its marker{secrets}"])


class DriverLog:
    """The driver's log of a Ray job for a LogTail (``read``): the Jobs API's, which serves the whole log, fetched once
    per reader; once the cluster grpo-ui started for the job is ended (``kept``: node 0's runner), the copy of it kept
    in the run directory; nothing more once a running cluster no longer knows the job."""

    def __init__(self, api: JobsApi, submission: str, kept: Callable[[], Runner] | None):
        self.api, self.submission, self.kept = api, submission, kept
        self._data: bytes | None = None

    def read(self, path: str, offset: int, limit: int) -> bytes:
        if self._data is None:
            try:
                self._data = self.api.logs(self.submission).encode()
            except JobsApiError as e:
                if self.kept:
                    return self.kept().read(path, offset, limit)
                if e.status != 404:
                    raise
                self._data = b""
        return self._data[offset:offset + limit]


class RayBackend(OnSpecHosts):
    """One job spec run as one Ray job; see the module docstring."""

    name = "ray"

    @property
    def mode(self) -> str:
        return "existing" if self.spec.cluster.ray_address else "start"

    def _dashboard(self) -> str:
        c = self.spec.cluster
        if c.ray_address:
            return c.ray_address
        head = c.nodes[0].routable
        return f"http://{f'[{head}]' if ':' in head else head}:{c.ray_dashboard_port}"

    # -- preflight ------------------------------------------------------------------------------------------------

    def prepare(self, eff: Resolved, progress: Progress) -> tuple[list[HostFacts], list[Finding]]:
        """The SSH preflight of every node (versions with Ray's among them, GPUs, ports, paths), then Ray's own: a
        cluster to start needs its ports free on node 0; a running one must answer, run the nodes' Ray version and
        have each node of the job with its GPUs as Ray resources."""
        facts, findings = preflight(eff, self.pool, progress)
        findings += [finding("RAY-ADDRESS", "error", f"cluster.nodes[{i}].address",
                             f"Node {i} ({n.host}) is at {n.routable}, not an IP address: Ray knows its nodes by IP.",
                             "Set the node's address to the IP address the other nodes reach it at.")
                     for i, n in enumerate(self.spec.cluster.nodes) if not _is_ip(n.routable)]
        if any(f.id in ("PREFLIGHT-UNREACHABLE", "RAY-ADDRESS") for f in findings):
            return facts, findings
        if self.mode == "start":
            return facts, findings + self._ports_free()
        progress(self.spec.cluster.ray_address, "asking the Ray cluster")
        return facts, findings + self._cluster_findings(eff, facts)

    def _ports_free(self) -> list[Finding]:
        c = self.spec.cluster
        head, runner = c.nodes[0], self.runner(0)
        busy = sorted({*taken(runner, [c.ray_port, c.ray_dashboard_port]),
                       *taken(runner, [c.ray_port, c.ray_dashboard_port], head.routable)})
        return [finding("RAY-PORT-TAKEN", "error", ("cluster.ray_port", "cluster.ray_dashboard_port"),
                        f"Port(s) {', '.join(map(str, busy))} are already in use on {head.host}, where grpo-ui would "
                        "start the Ray head (a Ray cluster may already run there).",
                        "Pick other ports, or point cluster.ray_address at the cluster that runs there.")] if busy else []

    def _cluster_findings(self, eff: Resolved, facts: list[HostFacts]) -> list[Finding]:
        api, c = JobsApi(self.spec.cluster.ray_address, timeout=10), self.spec.cluster
        try:
            version, nodes = api.version(), api.nodes()
        except JobsApiError as e:
            return [finding("RAY-UNREACHABLE", "error", "cluster.ray_address", str(e),
                            "Check the address (http://HEAD:8265) and that the app's machine may reach it.")]
        out = []
        theirs = sorted({f"{f.host}: {f.versions.get('ray')}" for f in facts
                         if f.versions and f.versions.get("ray") != version})
        if theirs:
            out.append(finding("RAY-VERSION-MISMATCH", "error", "cluster.nodes",
                               f"The Ray cluster runs Ray {version}, the nodes' environments have {', '.join(theirs)}.",
                               f"Install ray=={version} in each node's python_env."))
        alive = {n.ip: n for n in nodes if n.alive}
        for i, node in enumerate(c.nodes):
            ray_node = alive.get(node.routable)
            if ray_node is None:
                out.append(finding("RAY-NODE-MISSING", "error", f"cluster.nodes[{i}].address",
                                   f"No alive node of the Ray cluster at {node.routable} (node {i}, {node.host}); "
                                   f"its nodes: {', '.join(sorted(alive)) or 'none'}.",
                                   "Give each node the address Ray knows it by (`ray list nodes`), or join it "
                                   "to the cluster."))
            elif ray_node.resources.get("GPU", 0) < len(node.gpus):
                out.append(finding("RAY-GPUS", "error", f"cluster.nodes[{i}].gpus",
                                   f"Node {i} ({node.host}) uses {len(node.gpus)} GPU(s) but its Ray node has "
                                   f"{ray_node.resources.get('GPU', 0):g} GPU resource(s).",
                                   "Use fewer GPUs there, or start Ray on it with --num-gpus."))
        return out + self._placement(eff, list(alive.values()))

    def _placement(self, eff: Resolved, nodes: list) -> list[Finding]:
        """ms-swift's Ray mode: whether the cluster's alive nodes, with the GPUs and CPUs Ray counts, can hold the
        placement groups ms-swift asks for (each whole on one node; RayPlacement.groups)."""
        if not eff.ray:
            return []
        have = [(n.resources.get("GPU", 0), n.resources.get("CPU", 0)) for n in nodes]
        left = unplaced(eff.ray.groups, have)
        if not left:
            return []
        listed = ", ".join(f"{n.ip} {g:g} GPU / {c:g} CPU" for n, (g, c) in zip(nodes, have, strict=True))
        need = max(left, key=lambda g: g.gpus)
        return [finding("RAY-PLACEMENT", "error", "cluster.ray_address",
                        f"ms-swift asks Ray for {groups_text(eff.ray.groups)}, each whole on one node with 1 GPU and "
                        f"{need.cpus_per_gpu} CPU per GPU; the cluster's nodes ({listed}) cannot hold "
                        f"{groups_text(left)}: ms-swift would wait for them forever.",
                        f"Give a node of the cluster {need.gpus} free GPU(s) and {need.cpus} CPU(s) per group left, "
                        "or add trainer nodes (nnodes splits each role's GPUs into smaller groups).")]

    # -- start ----------------------------------------------------------------------------------------------------

    def start(self, plan: LaunchPlan, secrets: dict[str, str], progress: Progress,
              save: Callable[[Handle], None]) -> tuple[RayHandle, JobStatus]:
        c = self.spec.cluster
        tag = os.urandom(6).hex()
        handle = RayHandle(plan.job_id, plan.run_dir, tag, f"{plan.job_id}-{tag}", self._dashboard(), self.mode,
                           c.ray_keep, plan.bundle.ray is not None, plan.bundle.ray is not None and bool(secrets),
                           nodes=[RayNode(n.index, n.role, n.rank, n.script, c.nodes[n.index].routable)
                                  for n in plan.nodes])
        runners = self._connect(plan, progress)
        for n in handle.nodes:
            n.tried = True
        save(handle)
        self._fail(parallel(lambda n: self._send(plan, handle, n, runners[n.index], secrets, progress), plan.nodes))
        if self.mode == "start":
            self._start_cluster(handle, runners, progress, save)
        handle.submitted = True
        save(handle)
        self._submit(plan, handle, progress)
        return handle, JobStatus("queued", f"Ray job {handle.submission}: submitted ({handle.link})",
                                 [self._status(handle, n, "pending") for n in handle.nodes])

    def _send(self, plan: LaunchPlan, handle: RayHandle, n: PlannedNode, runner: Runner, secrets: dict[str, str],
              progress: Progress) -> None:
        """The node's run directory gets its files (_files_of)."""
        progress(n.host, "sending the job's files")
        files = self._files_of(plan, handle, n, secrets)
        rd = shell.path(plan.run_dir)
        res = runner.run(f"mkdir -p {rd} && cd {rd} && tar -x --no-same-owner -f -", timeout=60,
                         stdin=tar_payload(files))
        if res.rc:
            raise SshError(n.host, f"cannot write the job's files into {plan.run_dir}: {res.err.strip()}")

    def _files_of(self, plan: LaunchPlan, handle: RayHandle, n: PlannedNode, secrets: dict[str, str]
                  ) -> dict[str, tuple[str, int]]:
        """Per-node scripts: the node's script and secrets file, node 0's also the driver and its plan. ms-swift's Ray
        mode: the Ray config (what Ray's workers there parse) and the secrets file they read; node 0's also the
        driver's script and its own secrets file (read and deleted by the script)."""
        head = n.index == handle.nodes[0].index
        if not handle.driver:
            files = node_files(plan, n, secrets)
            if head:
                files[RAY_DRIVER] = (DRIVER_SOURCE.read_text(), 0o644)
                files[RAY_PLAN] = (json.dumps(self._driver_plan(handle), indent=1), 0o644)
            return files
        job = plan.bundle.ray
        files = {job.config: (plan.bundle.files[job.config], 0o644)}
        if head:
            files[job.script] = (plan.bundle.files[job.script], 0o755)
        if secrets:
            files[RAY_WORKER_SECRETS] = secrets_file_text(secrets)
            if head:
                files[secrets_file(job.script)] = secrets_file_text(secrets)
        return files

    def _driver_plan(self, handle: RayHandle) -> dict:
        """What ray_driver.py runs where."""
        return {"run_dir": handle.run_dir, "nodes": [
            {"index": n.index, "role": n.role, "address": n.address, "script": n.script, "log": n.files.log,
             "marker": run_token(handle, n), "gpus": len(self.spec.cluster.nodes[n.index].gpus)}
            for n in handle.nodes]}

    def _start_cluster(self, handle: RayHandle, runners: dict[int, Runner], progress: Progress,
                       save: Callable[[Handle], None]) -> None:
        """`ray start --head` on node 0, then `ray start --address` on the others; waits until the Jobs API answers."""
        c = self.spec.cluster
        head = handle.nodes[0]
        gcs = f"{f'[{head.address}]' if ':' in head.address else head.address}:{c.ray_port}"
        for group in ([head], handle.nodes[1:]):
            handle.ray_started += [n.index for n in group]
            save(handle)
            self._fail([(n, r) for n, r in parallel(lambda n: self._ray_start(handle, n, runners[n.index], gcs,
                                                                              progress), group)])
        api, deadline = JobsApi(handle.dashboard, timeout=5), time.time() + API_WAIT
        while True:
            try:
                api.version()
                return
            except JobsApiError as e:
                if time.time() > deadline:
                    raise BackendError(f"the Ray cluster started on {c.nodes[head.index].host}: {e}") from None
                time.sleep(1)

    def _ray_start(self, handle: RayHandle, n: RayNode, runner: Runner, gcs: str, progress: Progress) -> None:
        c, node = self.spec.cluster, self.spec.cluster.nodes[n.index]
        progress(node.host, "starting Ray")
        role = (["--head", f"--port={c.ray_port}", f"--dashboard-host={n.address}",
                 f"--dashboard-port={c.ray_dashboard_port}"] if n is handle.nodes[0] else [f"--address={gcs}"])
        argv = ["env", ray_token(handle, n.index), "RAY_USAGE_STATS_ENABLED=0",
                f"CUDA_VISIBLE_DEVICES={','.join(map(str, node.gpus))}", "ray", "start", *role,
                f"--node-ip-address={n.address}", f"--num-gpus={len(node.gpus)}",
                f"--temp-dir={ray_dir(handle, n.index)}", "--disable-usage-stats"]
        env = f"export PATH={shell.path(node.python_env)}/bin:$PATH; " if node.python_env else ""
        workdir = shell.path(node.workdir or c.workdir or handle.run_dir)  # where Ray's workers will run
        res = runner.run(f"{env}cd {workdir} && {shell.join(argv)} < /dev/null 2>&1", timeout=120)
        if res.rc:
            raise SshError(node.host, f"ray start failed: {res.out.strip()[-1500:]}")
        progress(node.host, "Ray started")

    def _submit(self, plan: LaunchPlan, handle: RayHandle, progress: Progress) -> None:
        """The entrypoint runs on node 0 (Ray's node:<address> resource): the per-node scripts' driver, or in
        ms-swift's Ray mode the driver's script, with the job's marker in the runtime environment and, when it has
        secrets, the package whose hook gives Ray's workers the values from their node's secrets file."""
        head = self.spec.cluster.nodes[handle.nodes[0].index]
        api, env, packages = JobsApi(handle.dashboard), {**PLAIN_LOG, **self.spec.env}, {}
        if handle.driver:
            entry = plan.bundle.ray.entrypoint(plan.run_dir)
            name, _, value = job_token(handle).partition("=")
            env[name] = value
            if handle.worker_secrets:
                env[ray_secrets.FILE_VARIABLE] = f"{plan.run_dir}/{RAY_WORKER_SECRETS}"
                packages = {"py_modules": [api.upload_package(*secrets_package())],
                            "worker_process_setup_hook": f"{SECRETS_MODULE}.load"}
        else:
            python = f"{shell.path(head.python_env)}/bin/python" if head.python_env else "python3"
            entry = f"cd {shell.path(plan.run_dir)} && {python} {RAY_DRIVER} {RAY_PLAN}"
        progress(head.host, f"submitting Ray job {handle.submission}")
        api.submit(handle.submission, entry, {"env_vars": env, **packages},
                   {"grpo_ui_job": plan.job_id, "grpo_ui_launch": handle.tag}, {f"node:{handle.nodes[0].address}": 0.001})
        progress(head.host, f"submitted: {handle.link}")

    # -- follow ---------------------------------------------------------------------------------------------------

    def poll(self, handle: RayHandle) -> JobStatus:
        """Ray's state of the job and the driver's lines, and each node's exit code (its run directory). Without an
        answer from the Jobs API the nodes' exit codes alone decide once every trainer has one."""
        api = JobsApi(handle.dashboard)
        if handle.driver:
            return self._poll_driver(handle, api)
        try:
            info = api.status(handle.submission)
            said = driver_lines(api.logs(handle.submission)) if info else driver_lines("")
        except JobsApiError as e:
            info, said, unreachable = None, driver_lines(""), e
        else:
            unreachable = None
        nodes = [self._node(handle, n, files, said)
                 for n, files in parallel(lambda n: self._files(handle, n), handle.nodes)]
        trainers = [n for n in nodes if n.role == "trainer"]
        if info is None:
            if not all(n.exit_code is not None for n in trainers):
                raise BackendError(str(unreachable) if unreachable else
                                   f"the Ray cluster at {handle.dashboard} no longer knows job {handle.submission}")
            ray_state = "SUCCEEDED" if all(n.exit_code == 0 for n in trainers) else "FAILED"
            detail = f"Ray job {handle.submission}: no longer known to the cluster"
        else:
            ray_state, detail = info["status"], f"Ray job {handle.submission}: {info['status']} ({handle.link})"
        state = STATES[ray_state]
        status = JobStatus(state, detail, nodes)
        if state in ("queued", "running") and any(n.why for n in nodes):
            status.state = "failed"
        elif ray_state == "PENDING":
            status.reason = (info or {}).get("message") or "waiting for the Ray cluster"
        elif ray_state == "RUNNING" and said["waiting"] and not said["started"]:
            status.state, status.reason = "queued", said["waiting"]
        if status.reason:
            status.detail += f": {status.reason}"
        if status.state == "failed" and not any(n.why for n in nodes):
            tail = "\n".join(api.logs(handle.submission).splitlines()[-40:]) if info else ""
            status.error = "\n".join(x for x in (detail, said["error"], (info or {}).get("message"), tail) if x)
        if status.state in ("succeeded", "failed", "stopped"):
            status.remains = self._remains(handle)
        return status

    def _poll_driver(self, handle: RayHandle, api: JobsApi) -> JobStatus:
        """ms-swift's Ray mode: Ray places the roles, so the Ray job's state is every node's; node 0's exit code is
        the driver's (Ray's, or once the cluster forgot the job, the one its script wrote in the run directory). A
        running job whose placement groups Ray has not placed waits for resources."""
        try:
            info = api.status(handle.submission)
        except JobsApiError as e:
            info, unreachable = None, e
        else:
            unreachable = None
        if info is None:
            written, text, _ = self._files(handle, handle.nodes[0])
            if written is None:
                raise BackendError(str(unreachable) if unreachable else
                                   f"the Ray cluster at {handle.dashboard} no longer knows job {handle.submission}")
            code = int(text) if text.lstrip("-").isdigit() else None
            ray_state, detail = "SUCCEEDED" if code == 0 else "FAILED", f"Ray job {handle.submission}: no longer known"
        else:
            code = info.get("driver_exit_code")
            ray_state, detail = info["status"], f"Ray job {handle.submission}: {info['status']} ({handle.link})"
        status = JobStatus(STATES[ray_state], detail)
        if ray_state == "PENDING":
            status.reason = info.get("message") or "waiting for the Ray cluster"
        elif ray_state == "RUNNING" and info.get("job_id") and (waiting := api.waiting_groups(info["job_id"])):
            gpus = [sum(b["unit_resources"].get("GPU", 0) for b in g["bundles"]) for g in waiting]
            status.state = "queued"
            status.reason = (f"waiting for resources: {len(waiting)} placement group(s) of ms-swift's "
                             f"({', '.join(f'{g:g} GPU' for g in gpus)}, each on one node) not placed yet")
        if status.reason:
            status.detail += f": {status.reason}"
        node_state = "pending" if status.state == "queued" else status.state
        status.nodes = [self._status(handle, n, node_state) for n in handle.nodes]
        status.nodes[0].exit_code = code
        if status.state == "failed":
            tail = "\n".join(api.logs(handle.submission).splitlines()[-40:]) if info else ""
            status.error = "\n".join(x for x in (detail, (info or {}).get("message"), tail) if x)
        if status.state in ("succeeded", "failed", "stopped"):
            status.remains = self._remains(handle)
        return status

    def _remains(self, handle: RayHandle) -> str | None:
        """What the backend stops or removes once the job ended: the Ray cluster it started, the secrets files of
        ms-swift's Ray workers."""
        left = []
        if handle.ray_started and not handle.keep:
            left.append(f"the Ray cluster grpo-ui started on {self._hosts(handle.ray_started)}")
        if handle.worker_secrets:
            left.append(f"the Ray workers' secrets files on {self._hosts([n.index for n in handle.nodes if n.tried])}")
        return " and ".join(left) or None

    def _hosts(self, indices: list[int]) -> str:
        return ", ".join(self.spec.cluster.nodes[i].host for i in indices)

    def _files(self, handle: RayHandle, n: RayNode) -> tuple[float | None, str | None, bool] | Exception:
        """(when its exit code was written, the exit code file's text, whether its log exists) of a node."""
        if not n.tried:
            return None, None, False
        rd, f = shell.path(handle.run_dir), n.files
        res = self.runner(n.index).run(
            f"cd {rd} 2>/dev/null || exit 0; [ -e {shell.quote(f.log)} ] && echo log; [ -f {shell.quote(f.exit_code)} ] "
            f"&& echo \"exit $(stat -c %.3Y {shell.quote(f.exit_code)}) $(head -c 64 {shell.quote(f.exit_code)})\"; true",
            timeout=20)
        words = res.out.split()
        if "exit" in words:
            k = words.index("exit")
            return float(words[k + 1]), " ".join(words[k + 2:]), "log" in words
        return None, None, "log" in words

    def _node(self, handle: RayHandle, n: RayNode, files, said: dict) -> NodeStatus:
        status = self._status(handle, n, "pending")
        status.pid = said["started"].get(n.index)
        if isinstance(files, Exception):
            status.state = "unknown"
            return status
        written, text, logged = files
        if written is not None:
            code = int(text) if text and text.lstrip("-").isdigit() else None
            status.state = "succeeded" if code == 0 else "failed"
            status.exit_code, status.ended = code, written
            status.why = None if code == 0 else f"exit code {code}" if code is not None else (
                f"its {n.files.exit_code} file holds {text!r}, not an exit code")
        elif n.index in said["lost"]:
            status.state, status.ended = "lost", said["lost"][n.index][0]
            status.why = f"Ray lost its task: {said['lost'][n.index][1]}"
        elif logged or n.index in said["started"]:
            status.state = "running"
        return status

    def _status(self, handle: RayHandle, n: RayNode, state: str) -> NodeStatus:
        return NodeStatus(n.index, n.role, n.rank, self.spec.cluster.nodes[n.index].host, state,
                          log=f"{handle.run_dir}/{n.files.log}")

    # -- stop -----------------------------------------------------------------------------------------------------

    def stop(self, handle: RayHandle, grace: float = 10.0) -> dict[str, str]:
        """Stop the Ray job through the Jobs API and wait until Ray says it ended; stop whatever of each node still
        runs (its marker) and remove a secrets file never read; then end the Ray cluster grpo-ui started for the
        job, unless it is kept. Returns what happened per host; raises BackendError naming what could not be
        verified."""
        outcome: dict[str, str] = {}
        if handle.submitted:
            outcome[f"Ray job {handle.submission}"] = self._stop_job(handle, grace)
        tried = [n for n in handle.nodes if n.tried]
        for n, res in parallel(lambda n: stop_marked(self.runner(n.index), self.process_marker(handle, n.index), grace,
                                                     self._secrets_files(handle, n)), tried):
            outcome[self.spec.cluster.nodes[n.index].host + ("" if n.role == "trainer" else " (rollout)")] = (
                res if isinstance(res, str) else describe(res))
        if handle.ray_started and not handle.keep:
            self._keep_driver_log(handle)
            for i, res in parallel(lambda i: self._end_ray(handle, i), handle.ray_started):
                outcome[f"{self.spec.cluster.nodes[i].host} (Ray)"] = res if isinstance(res, str) else describe(res)
        left = [f"{where} ({what})" for where, what in outcome.items()
                if not what.startswith(("gone", "stopped", "killed", "ended"))]
        if left:
            raise BackendError(f"could not verify that nothing is left on {', '.join(left)}")
        return outcome

    @staticmethod
    def _secrets_files(handle: RayHandle, n: RayNode) -> str:
        """The node's secrets files a start may have left (shell words): its script's; in ms-swift's Ray mode the
        workers' and, on node 0, the driver's script's."""
        rd = shell.path(handle.run_dir)
        if not handle.driver:
            return f"{rd}/{shell.quote(n.files.secrets)}"
        driver = f" {rd}/{shell.quote(secrets_file(RAY_SCRIPT))}" if n is handle.nodes[0] else ""
        return f"{rd}/{shell.quote(RAY_WORKER_SECRETS)}{driver}"

    def _keep_driver_log(self, handle: RayHandle) -> None:
        """Before the cluster grpo-ui started is ended: the driver's log, as the Jobs API serves it, into node 0's run
        directory (job_log reads it there afterwards)."""
        if not handle.submitted:
            return
        try:
            log = JobsApi(handle.dashboard).logs(handle.submission)
            self.runner(handle.nodes[0].index).write(f"{handle.run_dir}/{RAY_DRIVER_LOG}", log)
        except (JobsApiError, SshError):  # nothing to keep, or node 0 gone: its log is Ray's to lose
            pass

    @staticmethod
    def _stop_job(handle: RayHandle, grace: float) -> str:
        api = JobsApi(handle.dashboard)
        try:
            if not api.stop(handle.submission):
                return "ended"  # it had ended (or never started): nothing for Ray to stop
            deadline = time.time() + grace + STOP_WAIT
            while (info := api.status(handle.submission)) and info["status"] not in ENDED:
                if time.time() > deadline:
                    return f"still {info['status']} {grace + STOP_WAIT:.0f} s after the stop"
                time.sleep(0.5)
            return "stopped"
        except JobsApiError as e:
            # a cluster grpo-ui started is ended below, whatever Ray says; a running one must answer
            return "ended (its cluster is being ended)" if handle.ray_started and not handle.keep else str(e)

    def _end_ray(self, handle: RayHandle, index: int) -> str:
        """End the Ray processes grpo-ui started on the node (by their marker), then remove Ray's directory there."""
        runner = self.runner(index)
        said = stop_marked(runner, ray_token(handle, index), RAY_GRACE)
        if said.startswith(("gone", "stopped", "killed")):
            runner.run(f"rm -rf -- {shell.quote(ray_dir(handle, index))}", timeout=30)
        return said

    # -- what runs where ------------------------------------------------------------------------------------------

    def process_marker(self, handle: RayHandle, node: int) -> str:
        """ms-swift's Ray mode: the job's marker, which Ray's workers carry on every node; else the node's."""
        return job_token(handle) if handle.driver else super().process_marker(handle, node)

    def launched_file(self, handle: RayHandle, node: int) -> str:
        """ms-swift's Ray mode: the Ray config sent to every node (no script runs there); else the node's script."""
        return f"{handle.run_dir}/{RAY_CONFIG}" if handle.driver else super().launched_file(handle, node)

    def job_log(self, handle: RayHandle) -> tuple[LogReader, str]:
        """The driver's log (DriverLog), its copy's path in node 0's run directory as the LogTail's path."""
        head = handle.nodes[0].index
        kept = (lambda: self.runner(head)) if handle.ray_started and not handle.keep else None
        return DriverLog(JobsApi(handle.dashboard), handle.submission, kept).read, f"{handle.run_dir}/{RAY_DRIVER_LOG}"
