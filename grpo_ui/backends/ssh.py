"""SSH backend: grpo-ui starts every node itself, rollout servers first (then waits for their /health/), then all
trainers at once, each as `setsid nohup bash node_<rank>.sh` in the node's run directory, and follows them by pid.

Each node's processes carry GRPO_UI_RUN=<job>/<node>@<launch> in their environment (<launch> is drawn at each start,
so a job of the same id launched by another dashboard or user on the same machine is never touched), so the whole
tree — torchrun puts its workers in sessions of their own — is found and stopped exactly, never by a broad name
match; a child that clears its environment is still in the node's process group, which is signalled too while its
leader is the recorded process. Jobs outlive the SSH session, the browser and the app; pid, process group and start
time of each node are in the handle, and exit codes come from the run directory.

Secret values travel in a 0600 file next to each node's script; the script reads and deletes it before it starts
swift, and the start waits for that (and removes the file itself if the script died first), so no secret stays on a
node once the job runs.

The handle (SshHandle): the job, the launch's tag, the run directory, and per node its index, role, rank, script,
whether its start command ran (something may run there) and, once started, its pid, process group and start time.
"""

from __future__ import annotations

import io
import os
import tarfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from grpo_ui.backends.base import Backend, BackendError, Handle, JobStatus, NodeStatus, Progress
from grpo_ui.backends.preflight import HostFacts, preflight
from grpo_ui.backends.remote.runner import Runner, Wrapped, parallel, runner_for
from grpo_ui.backends.remote.ssh import SshError
from grpo_ui.core import shell
from grpo_ui.core.errors import describe
from grpo_ui.core.findings import Finding
from grpo_ui.launch.plan import LaunchPlan, PlannedNode
from grpo_ui.launch.runfiles import NodeFiles
from grpo_ui.spec.names import RUN_TOKEN
from grpo_ui.spec.resolve import Resolved

SETTLE = 0.3  # seconds a node script must live to count as started (a missing command fails well within it)
SECRETS_READ = 30.0  # seconds a started node script has to read (and delete) its secrets file
FIND = ('find_job() { for d in /proc/[0-9]*; do tr "\\0" "\\n" < "$d/environ" 2>/dev/null | grep -qxF "$1" '
        '&& echo "${d#/proc/}"; done; }; ')


@dataclass
class SshNode:
    """One started (or tried) node of an SSH job."""

    index: int                 # in spec.cluster.nodes
    role: str
    rank: int | None           # NODE_RANK of a trainer
    script: str
    tried: bool = False        # its start command ran: something may run there
    pid: int | None = None     # once started: the script's process, its process group and its start time
    pgid: int | None = None
    start: str | None = None

    @property
    def files(self) -> NodeFiles:
        return NodeFiles.of_script(self.script)

    def to_dict(self) -> dict:
        started = {"pid": self.pid, "pgid": self.pgid, "start": self.start} if self.pid is not None else {}
        return {"index": self.index, "role": self.role, "rank": self.rank, "script": self.script,
                "tried": self.tried, **started}


@dataclass
class SshHandle(Handle):
    backend = "ssh"

    tag: str = ""              # drawn at each launch: another launch of the same job id is never touched
    nodes: list[SshNode] = field(default_factory=list)

    def node(self, index: int) -> SshNode:
        return next(n for n in self.nodes if n.index == index)

    def to_dict(self) -> dict:
        return {"backend": self.backend, "job": self.job, "tag": self.tag, "run_dir": self.run_dir,
                "nodes": [n.to_dict() for n in self.nodes]}

    @classmethod
    def from_dict(cls, data: dict) -> SshHandle:
        return cls(data["job"], data["run_dir"], data["tag"], [SshNode(**n) for n in data["nodes"]])


def run_token(handle, node) -> str:
    """The environment entry every process of the node inherits (an SshHandle or RayHandle and one of its nodes)."""
    who = f"{node.role}{node.rank if node.role == 'trainer' else node.index}"
    return f"{RUN_TOKEN}={handle.job}/{who}@{handle.tag}"


def secrets_file_text(secrets: dict[str, str]) -> tuple[str, int]:
    """A secrets file's text (NAME='value' lines a shell sources) and its mode, 0600."""
    return "".join(f"{k}={shell.quote(v)}\n" for k, v in secrets.items()), 0o600


def node_files(plan: LaunchPlan, n: PlannedNode, secrets: dict[str, str]) -> dict[str, tuple[str, int]]:
    """What a node needs in its run directory: its script (0755) and, if any, its secrets file (0600)."""
    files = {n.script: (plan.bundle.files[n.script], 0o755)}
    if secrets:
        files[n.secrets] = secrets_file_text(secrets)
    return files


def tar_payload(files: dict[str, tuple[str, int]]) -> bytes:
    """A tar archive of the files (name → (text, mode)), unpacked on the node with ``tar -x``."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, (text, mode) in files.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), mode, int(time.time())
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def stop_marked(runner: Runner, token: str, grace: float, remove: str = "",
                group: tuple[int, str] | None = None) -> str:
    """SIGTERM the processes that carry the environment entry ``token`` on the runner's machine, SIGKILL after the
    grace period (again while any is left, up to five times), verify nothing is left; 'gone', 'stopped', 'killed' or 'left PID…'. ``remove``: a file to delete
    first (a secrets file a start never got to read). ``group``: (process group, its leader's start time): its
    members are signalled too while its leader is still that process (same pid and start time, so a recycled pid is
    never signalled): a child that cleared its environment (`env -i`) is still in the group. Once verified, the group
    number stays ours as long as it has members, so the wait loop may keep using it."""
    members = (f"g={int(group[0])}; s=$(cat /proc/$g/stat 2>/dev/null) && set -- ${{s##*) }} && "
               f"[ \"${{20}}\" = {shell.quote(group[1])} ] && grp=1; " if group else "")
    cmd = ((f"rm -f -- {remove}; " if remove else "")
           + FIND + f"t={shell.quote(token)}; grp=; {members}"
           'members() { find_job "$t"; [ -n "$grp" ] && ps -eo pid=,pgid=,stat= | '
           'awk -v g="$g" \'$2 == g && $3 !~ /^Z/ {print $1}\'; }; '
           'pids=$(members); [ -z "$pids" ] && echo gone && exit 0; '
           f"kill -TERM $pids 2>/dev/null; for _ in $(seq {int(grace * 5)}); do sleep 0.2; "
           '[ -z "$(members)" ] && echo stopped && exit 0; done; '
           # SIGKILL again while members are left: a process may start one more (Ray's raylet starts workers)
           'for _ in 1 2 3 4 5; do left=$(members); [ -z "$left" ] && break; kill -KILL $left 2>/dev/null; '
           'sleep 0.5; done; left=$(members); [ -z "$left" ] && echo killed || echo "left" $left')
    return runner.run(cmd, timeout=grace + 30).out.strip()


class OnSpecHosts(Backend):
    """A backend whose nodes run on the hosts the spec names, reached over SSH (SSH, Ray): each node's files in its
    run directory there, its processes marked with its run token. Its handle has ``node(index)`` (with ``script``),
    ``job``, ``tag`` and ``run_dir``."""

    def runner(self, node: int) -> Runner:
        return runner_for(self.spec.cluster.nodes[node], self.pool)

    def node_shell(self, handle, node: int, host: str) -> Runner:
        gpus = ",".join(map(str, self.spec.cluster.nodes[node].gpus))
        return Wrapped(self.runner(node), lambda command: f"export CUDA_VISIBLE_DEVICES={shell.quote(gpus)}; {command}")

    def process_marker(self, handle, node: int) -> str:
        return run_token(handle, handle.node(node))

    def launched_file(self, handle, node: int) -> str:
        return f"{handle.run_dir}/{handle.node(node).script}"

    def _connect(self, plan: LaunchPlan, progress: Progress) -> dict[int, Runner]:
        """A runner for every node of the plan, connected in parallel; BackendError names the nodes that failed."""
        def connect(n: PlannedNode) -> Runner:
            progress(n.host, "connecting")
            return self.runner(n.index)
        connected = parallel(connect, plan.nodes)
        self._fail(connected)
        return {n.index: r for n, r in connected}

    @staticmethod
    def _fail(results: list[tuple[PlannedNode, object]]) -> None:
        """Raise BackendError naming every node whose result is an exception."""
        failed = [(n, e) for n, e in results if isinstance(e, Exception)]
        if failed:
            raise BackendError("; ".join(str(e) if isinstance(e, SshError) else f"{n.host}: {describe(e)}"
                                         for n, e in failed), tuple(n.index for n, _ in failed))


class SshBackend(OnSpecHosts):
    """One job spec run on its nodes over SSH (or on the dashboard's own machine); see the module docstring."""

    name = "ssh"

    def prepare(self, eff: Resolved, progress: Progress) -> tuple[list[HostFacts], list[Finding]]:
        """Every node in parallel (remote.preflight): versions, GPUs, ports, paths, disk, clock."""
        return preflight(eff, self.pool, progress)

    # -- start ----------------------------------------------------------------------------------------------------

    def start(self, plan: LaunchPlan, secrets: dict[str, str], progress: Progress,
              save: Callable[[Handle], None]) -> tuple[SshHandle, JobStatus]:
        handle = SshHandle(plan.job_id, plan.run_dir, os.urandom(6).hex(),
                           [SshNode(n.index, n.role, n.rank, n.script) for n in plan.nodes])

        runners = self._connect(plan, progress)
        trainer0 = plan.role("trainer")[0]
        for group in (plan.role("rollout"), plan.role("trainer")):
            for n in group:
                handle.node(n.index).tried = True
            save(handle)
            results = parallel(lambda n: self._start(plan, handle, n, runners[n.index], secrets, progress), group)
            for n, res in results:
                if not isinstance(res, Exception):
                    started = handle.node(n.index)
                    started.pid, started.pgid, started.start = res
            save(handle)
            self._fail([(n, e) for n, e in results if isinstance(e, Exception)])
            if group and group[0].role == "rollout":
                handle.node(trainer0.index).tried = True  # the health probe carries its token
                save(handle)
                self._fail(self._wait_healthy(plan, handle, group, runners, trainer0, progress))
        return handle, JobStatus("running", nodes=[self._status(handle, n, "running") for n in handle.nodes])

    def _start(self, plan: LaunchPlan, handle: SshHandle, n: PlannedNode, runner: Runner, secrets: dict[str, str],
               progress) -> tuple[int, int, str]:
        """One remote shell per node: create the run directory, unpack the script (and the 0600 secrets file) from
        stdin, start the script in its own session, and report pid, process group and start time once it has
        lived SETTLE seconds and read its secrets file (or its log tail if it exited)."""
        progress(n.host, "starting")
        token = run_token(handle, handle.node(n.index))
        rd, log, secrets_file = shell.path(plan.run_dir), shell.quote(n.log), shell.quote(n.secrets)
        # The session leader writes its pid to a file and to the pipe `read` waits on (setsid may fork, so $! would
        # not be it), then becomes the node script with its output in the log, which closes the pipe. Then a short
        # poll: the script must still live after SETTLE seconds, and have read (deleted) its secrets file, which is
        # removed here in any case. /proc/PID/stat is read once, with a builtin; after the ")" that ends the command
        # name, field 3 is the process group and field 20 the start time.
        # --norc: a `bash -c` under sshd sources ~/.bashrc (Debian builds bash to, when SSH_CLIENT is set and SHLVL
        # < 2, which exec resets): slow (conda/pyenv init) and it could change the job's environment.
        leader = (f"echo $$ > {shell.quote(n.files.pid)}; echo $$; "
                  f"exec bash {shell.quote(n.script)} > {log} 2>&1")
        cmd = (f"mkdir -p {rd} && cd {rd} && tar -x --no-same-owner -f - || exit 1; "
               f"read -r pid < <({shell.join(['env', token, 'setsid', 'nohup', 'bash', '--norc', '-c', leader])} "
               "< /dev/null 2> /dev/null); "
               f"for _ in $(seq {round(SETTLE / 0.05)}); do [ -e /proc/$pid ] || break; sleep 0.05; done; "
               f"for _ in $(seq {round(SECRETS_READ / 0.05)}); do [ -e {secrets_file} ] && [ -e /proc/$pid ] || "
               f"break; sleep 0.05; done; unread=; [ -e {secrets_file} ] && unread=1 && rm -f -- {secrets_file}; "
               f"read -r stat 2> /dev/null < /proc/$pid/stat && set -- ${{stat##*) }} && [ $1 != Z ] && "
               f'[ -z "$unread" ] && echo "started $pid $3 ${{20}}" || '
               f'{{ echo "exited $pid ${{unread:+secrets-unread}}"; tail -n 20 {log}; }}')
        res = runner.run(cmd, timeout=SECRETS_READ + 30, stdin=tar_payload(node_files(plan, n, secrets)))
        words = res.out.split(maxsplit=4)
        if res.rc or len(words) < 4 or words[0] != "started":
            detail = res.err.strip() or ("it did not read its secrets file within "
                                         f"{SECRETS_READ:.0f} s (removed)" if "secrets-unread" in res.out.split("\n")[0]
                                         else "exited at once")
            raise SshError(n.host, f"{n.script} did not start: {detail}\n{res.out.partition(chr(10))[2]}")
        progress(n.host, f"running (pid {words[1]})")
        return int(words[1]), int(words[2]), words[3]

    def _wait_healthy(self, plan: LaunchPlan, handle: SshHandle, rollouts: list[PlannedNode], runners: dict[int, Runner],
                      trainer0: PlannedNode, progress) -> list[tuple[PlannedNode, Exception]]:
        """Poll every rollout server's /health/ from trainer rank 0 until it answers 200 (the model is loaded) or
        vllm_server_timeout passes; [(node, error)] for the servers that did not come up. The probe carries trainer
        rank 0's run token, so stopping the job (an interrupted launch included) stops it too."""
        timeout = self.spec.rollout.vllm_server_timeout
        endpoints = dict(zip((n.index for n in rollouts), plan.resolved.server_endpoints, strict=False))
        checks = shell.join(f"{h}:{p}" for h, p in endpoints.values())
        loop = (f"end=$((SECONDS + {int(timeout)})); for hp in {checks}; do h=${{hp%:*}}; p=${{hp##*:}}; "
                "until (exec 3<>/dev/tcp/$h/$p && printf 'GET /health/ HTTP/1.0\r\n\r\n' >&3 && "
                "head -n 1 <&3 | grep -q ' 200') 2>/dev/null; do [ $SECONDS -ge $end ] && { echo \"down $hp\"; "
                "break; }; sleep 2; done; done")
        token = run_token(handle, handle.node(trainer0.index))
        for n in rollouts:
            progress(n.host, "waiting for /health/")
        down = runners[trainer0.index].run(shell.join(["env", token, "bash", "--norc", "-c", loop]),
                                           timeout=timeout + 30).out.split()
        failed: list[tuple[PlannedNode, Exception]] = []
        for n in rollouts:
            host, port = endpoints[n.index]
            if f"{host}:{port}" in down:
                tail = runners[n.index].run(f"tail -n 20 {shell.path(plan.run_dir)}/{shell.quote(n.log)}",
                                            timeout=10).out
                failed.append((n, SshError(n.host, f"rollout server {host}:{port} did not answer /health/ within "
                                                   f"{timeout:.0f} s\n{tail}")))
            else:
                progress(n.host, "healthy")
        return failed

    # -- follow ---------------------------------------------------------------------------------------------------

    def poll(self, handle: SshHandle) -> JobStatus:
        """Each started node: alive with the same start time, else its exit code (or lost without one). The job
        failed once a node failed, succeeded once every trainer did."""
        started = [n for n in handle.nodes if n.pid]
        results = {n.index: res for n, res in parallel(lambda n: self._probe(handle, n), started)}
        nodes = []
        for n in handle.nodes:
            status, res = self._status(handle, n, "pending"), results.get(n.index)
            if isinstance(res, Exception):
                status.state = "unknown"  # unreachable now: the watcher names the host when it reads the log
            elif res:
                status.state, status.exit_code, status.ended, status.why = res
            nodes.append(status)
        trainers = [n for n in nodes if n.role == "trainer"]
        state = ("failed" if any(n.why for n in nodes) else
                 "succeeded" if trainers and all(n.state == "succeeded" for n in trainers) else "running")
        return JobStatus(state, nodes=nodes)

    def _status(self, handle: SshHandle, n: SshNode, state: str) -> NodeStatus:
        return NodeStatus(n.index, n.role, n.rank, self.spec.cluster.nodes[n.index].host, state,
                          log=f"{handle.run_dir}/{n.files.log}", pid=n.pid)

    def _probe(self, handle: SshHandle, n: SshNode) -> tuple[str, int | None, float | None, str | None]:
        """(node state, exit code, when it ended, why it failed or None) of a started node."""
        host = self.spec.cluster.nodes[n.index].host
        exit_file = f"{shell.path(handle.run_dir)}/{shell.quote(n.files.exit_code)}"
        # running: the recorded process, same start time (field 20 after the command name), not a zombie (an
        # exited process its new parent has not reaped yet)
        cmd = (f"if read -r s 2> /dev/null < /proc/{int(n.pid)}/stat && set -- ${{s##*) }} && [ $1 != Z ] && "
               f'[ "${{20}}" = {shell.quote(n.start)} ]; '
               f'then echo running; elif [ -f {exit_file} ]; then echo "exited $(stat -c %.3Y {exit_file}) '
               f'$(head -c 64 {exit_file})"; else echo dead; fi')
        words = self.runner(n.index).run(cmd, timeout=20).out.split()
        if words == ["running"]:
            return "running", None, None, None
        if words == ["dead"]:
            return "lost", None, time.time(), "process gone without an exit code (killed?)"
        if len(words) >= 2 and words[0] == "exited":
            when, text = float(words[1]), " ".join(words[2:])
            if text.lstrip("-").isdigit():
                code = int(text)
                return ("succeeded", 0, when, None) if code == 0 else ("failed", code, when, f"exit code {code}")
            why = (f"its {n.files.exit_code} file is empty: the disk of {host} may be full" if not text else
                   f"its {n.files.exit_code} file holds {text!r}, not an exit code")
            return "failed", None, when, why
        raise SshError(host, f"unexpected answer to the status check of node {n.index}: {words!r}")

    # -- stop -----------------------------------------------------------------------------------------------------

    def stop(self, handle: SshHandle, grace: float = 10.0) -> dict[str, str]:
        """Stop every node whose start ran; returns host → outcome (gone/stopped/killed). Raises BackendError naming
        the hosts where that could not be verified."""
        tried = [n for n in handle.nodes if n.tried]
        results = parallel(lambda n: self._kill(handle, n, grace), tried)
        outcome = {self.spec.cluster.nodes[n.index].host + ("" if n.role == "trainer" else " (rollout)"):
                   res if isinstance(res, str) else describe(res) for n, res in results}
        left = [f"{host} ({what})" for host, what in outcome.items() if not what.startswith(("gone", "stopped",
                                                                                             "killed"))]
        if left:
            raise BackendError(f"could not verify that nothing is left on {', '.join(left)}")
        return outcome

    def _kill(self, handle: SshHandle, n: SshNode, grace: float) -> str:
        """SIGTERM the node's processes (its token, and its process group while the recorded process leads it),
        SIGKILL after the grace period, verify nothing is left (stop_marked)."""
        return stop_marked(self.runner(n.index), run_token(handle, n), grace,
                           f"{shell.path(handle.run_dir)}/{shell.quote(n.files.secrets)}",
                           (n.pgid, n.start) if n.pgid else None)
