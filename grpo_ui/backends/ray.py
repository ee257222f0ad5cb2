"""Ray backend: the job is one Ray job, submitted through the Ray Jobs API (grpo_ui.backends.ray_jobs), on a Ray
cluster grpo-ui starts on the job's nodes over SSH (``cluster.ray_address`` unset) or on a running one
(``cluster.ray_address``: its Jobs API, e.g. what KubeRay exposes), whose nodes are the job's nodes.

Starting a cluster: ``ray start --head`` on node 0 (its GCS on ``ray_port``, the dashboard and Jobs API bound to node
0's cluster address on ``ray_dashboard_port``, never 0.0.0.0), then ``ray start --address`` on the others, each node
with its own GPUs as Ray's GPU resources (CUDA_VISIBLE_DEVICES = its gpus). Every Ray process carries
GRPO_UI_RUN=<job>/ray<node>@<launch> in its environment, so the cluster is ended exactly, by that marker, when the job
ends (unless ``ray_keep``): not with ``ray stop``, which ends every Ray process of every user on the machine.

The job: each node's run directory gets its script and 0600 secrets file over SSH, as with the SSH backend (the
script reads and deletes it); node 0's also gets the driver (ray_driver.py) and its plan. The Ray job's entrypoint
runs the driver on node 0 (pinned with Ray's ``node:<address>`` resource); the driver runs each node's script on its
node (one actor per node, node affinity, the node's GPUs as resources), so the scripts SSH and Slurm run are the
scripts Ray runs, with each node's marker in their environment. ms-swift's Ray mode (the plan's DriverEntry) runs
node 0's script itself as the entrypoint instead. Ray's dashboard shows a job's entrypoint, metadata and runtime
environment: only the job's own non-secret environment (spec.env) goes there, secrets never.

Following: the Jobs API's status (PENDING/RUNNING/SUCCEEDED/FAILED/STOPPED) and the driver's ``grpo-ui:`` lines (a
node waiting for resources, started, lost), each node's exit code from its run directory. Stopping: the Jobs API's
stop, then every process of every node found by its marker and stopped, as the SSH backend does.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from grpo_ui.backends.base import BackendError, Handle, JobStatus, NodeStatus, Progress
from grpo_ui.backends.preflight import HostFacts, preflight
from grpo_ui.backends.preflight.ports import taken
from grpo_ui.backends.ray_jobs import ENDED, STATES, JobsApi, JobsApiError
from grpo_ui.backends.remote.runner import Runner, parallel
from grpo_ui.backends.remote.ssh import SshError
from grpo_ui.backends.ssh import OnSpecHosts, node_files, run_token, stop_marked, tar_payload
from grpo_ui.core import shell
from grpo_ui.core.errors import describe
from grpo_ui.core.findings import Finding, finding
from grpo_ui.launch.plan import LaunchPlan, PlannedNode
from grpo_ui.launch.runfiles import RAY_DRIVER, RAY_PLAN, NodeFiles
from grpo_ui.spec.names import RUN_TOKEN
from grpo_ui.spec.resolve import Resolved

DRIVER_SOURCE = Path(__file__).with_name("ray_driver.py")
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
    driver: bool = False        # node 0's script is the entrypoint (ms-swift's Ray mode)
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
        return facts, findings + self._cluster_findings(facts)

    def _ports_free(self) -> list[Finding]:
        c = self.spec.cluster
        head, runner = c.nodes[0], self.runner(0)
        busy = sorted({*taken(runner, [c.ray_port, c.ray_dashboard_port]),
                       *taken(runner, [c.ray_port, c.ray_dashboard_port], head.routable)})
        return [finding("RAY-PORT-TAKEN", "error", ("cluster.ray_port", "cluster.ray_dashboard_port"),
                        f"Port(s) {', '.join(map(str, busy))} are already in use on {head.host}, where grpo-ui would "
                        "start the Ray head (a Ray cluster may already run there).",
                        "Pick other ports, or point cluster.ray_address at the cluster that runs there.")] if busy else []

    def _cluster_findings(self, facts: list[HostFacts]) -> list[Finding]:
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
        return out

    # -- start ----------------------------------------------------------------------------------------------------

    def start(self, plan: LaunchPlan, secrets: dict[str, str], progress: Progress,
              save: Callable[[Handle], None]) -> tuple[RayHandle, JobStatus]:
        c = self.spec.cluster
        tag = os.urandom(6).hex()
        handle = RayHandle(plan.job_id, plan.run_dir, tag, f"{plan.job_id}-{tag}", self._dashboard(), self.mode,
                           c.ray_keep, plan.driver is not None,
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
        """The node's run directory gets its script and secrets file; node 0's also the driver and its plan (or, in
        ms-swift's Ray mode, the config its script reads)."""
        progress(n.host, "sending the job's files")
        files = node_files(plan, n, secrets)
        if n.index == handle.nodes[0].index:
            if plan.driver:
                files[plan.driver.config] = (plan.bundle.files[plan.driver.config], 0o644)
            else:
                files[RAY_DRIVER] = (DRIVER_SOURCE.read_text(), 0o644)
                files[RAY_PLAN] = (json.dumps(self._driver_plan(handle), indent=1), 0o644)
        rd = shell.path(plan.run_dir)
        res = runner.run(f"mkdir -p {rd} && cd {rd} && tar -x --no-same-owner -f -", timeout=60,
                         stdin=tar_payload(files))
        if res.rc:
            raise SshError(n.host, f"cannot write the job's files into {plan.run_dir}: {res.err.strip()}")

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
        res = runner.run(f"{env}{shell.join(argv)} < /dev/null 2>&1", timeout=120)
        if res.rc:
            raise SshError(node.host, f"ray start failed: {res.out.strip()[-1500:]}")
        progress(node.host, "Ray started")

    def _submit(self, plan: LaunchPlan, handle: RayHandle, progress: Progress) -> None:
        """The entrypoint runs on node 0 (Ray's node:<address> resource): the driver, or in ms-swift's Ray mode node
        0's script with its marker and its output in its log."""
        head = self.spec.cluster.nodes[handle.nodes[0].index]
        rd = shell.path(plan.run_dir)
        if plan.driver:
            n = handle.nodes[0]
            entry = (f"cd {rd} && {shell.join(['env', run_token(handle, n), 'bash', '--norc', n.script])} "
                     f"> {shell.quote(n.files.log)} 2>&1")
        else:
            python = f"{shell.path(head.python_env)}/bin/python" if head.python_env else "python3"
            entry = f"cd {rd} && {python} {RAY_DRIVER} {RAY_PLAN}"
        progress(head.host, f"submitting Ray job {handle.submission}")
        JobsApi(handle.dashboard).submit(handle.submission, entry, dict(self.spec.env),
                                         {"grpo_ui_job": plan.job_id, "grpo_ui_launch": handle.tag},
                                         {f"node:{handle.nodes[0].address}": 0.001})
        progress(head.host, f"submitted: {handle.link}")

    # -- follow ---------------------------------------------------------------------------------------------------

    def poll(self, handle: RayHandle) -> JobStatus:
        """Ray's state of the job and the driver's lines, and each node's exit code (its run directory). Without an
        answer from the Jobs API the nodes' exit codes alone decide once every trainer has one."""
        api = JobsApi(handle.dashboard)
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
        if status.state in ("succeeded", "failed", "stopped") and handle.ray_started and not handle.keep:
            status.remains = f"the Ray cluster grpo-ui started on {self._hosts(handle.ray_started)}"
        return status

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
        rd = shell.path(handle.run_dir)
        for n, res in parallel(lambda n: stop_marked(self.runner(n.index), run_token(handle, n), grace,
                                                     f"{rd}/{shell.quote(n.files.secrets)}"), tried):
            outcome[self.spec.cluster.nodes[n.index].host + ("" if n.role == "trainer" else " (rollout)")] = (
                res if isinstance(res, str) else describe(res))
        if handle.ray_started and not handle.keep:
            for i, res in parallel(lambda i: self._end_ray(handle, i), handle.ray_started):
                outcome[f"{self.spec.cluster.nodes[i].host} (Ray)"] = res if isinstance(res, str) else describe(res)
        left = [f"{where} ({what})" for where, what in outcome.items()
                if not what.startswith(("gone", "stopped", "killed", "ended"))]
        if left:
            raise BackendError(f"could not verify that nothing is left on {', '.join(left)}")
        return outcome

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
