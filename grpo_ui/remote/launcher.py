"""Start a job on every node (rollout servers first, then all trainers at once), follow its state, stop it.

Job states: pending → preflight (when asked) → starting → running → succeeded / failed / stopped; a node whose
process vanished without an exit code is lost (and fails the job).

Each node's processes carry GRPO_UI_RUN=<job>/<node>@<launch> in their environment (<launch> comes from the job's
creation time, so a job of the same id launched by another dashboard or user on the same machine is never
touched), so the whole tree — torchrun puts its workers in sessions of their own — is found and stopped exactly,
never by a broad name match; a child that clears
its environment is still in the node's process group, which is signalled too while its leader is the recorded
process. The root process is started with setsid nohup, so jobs outlive the SSH session, the browser and the app;
pid, process group and start time go to SQLite, and exit codes come from the run directory.

Secret values travel in a 0600 file next to each node's script; the script reads and deletes it before it starts
swift, and the launch waits for that (and removes the file itself if the script died first), so no secret stays on
a node once the job runs. A launch belongs to the process that runs it: when that process is gone (the app or CLI
was killed mid-launch), the next refresh stops whatever the launch had started and fails the job.
"""

from __future__ import annotations

import io
import os
import socket
import tarfile
import time
from dataclasses import dataclass
from pathlib import Path

from grpo_ui import shell
from grpo_ui.check import check
from grpo_ui.errors import UserError, describe
from grpo_ui.findings import format_findings
from grpo_ui.monitor.memory_loop import estimate_at_launch
from grpo_ui.remote.preflight import preflight as run_preflight
from grpo_ui.remote.runner import Runner, parallel, runner_for
from grpo_ui.remote.ssh import Pool, SshError
from grpo_ui.render import Bundle, render, run_dir, secrets_file
from grpo_ui.spec import JobSpec, check_name, spec_from_yaml, spec_to_yaml
from grpo_ui.store import DuplicateJob, Store

ABANDONED_AFTER = 600.0  # seconds; preflight's own timeouts end it well before
SETTLE = 0.3  # seconds a node script must live to count as started (a missing command fails well within it)
SECRETS_READ = 30.0  # seconds a started node script has to read (and delete) its secrets file
OWNER = "launcher"  # job_meta key: the process that runs the launch
FIND = ('find_job() { for d in /proc/[0-9]*; do tr "\\0" "\\n" < "$d/environ" 2>/dev/null | grep -qxF "$1" '
        '&& echo "${d#/proc/}"; done; }; ')


class LaunchError(UserError):
    pass


@dataclass
class NodeRun:
    index: int
    host: str
    role: str
    rank: int | None
    script: str

    @property
    def token(self) -> str:
        return f"{self.role}{self.rank if self.role == 'trainer' else self.index}"

    @property
    def log(self) -> str:
        return self.script.removesuffix(".sh") + ".log"

    @property
    def exit_file(self) -> str:
        index = self.script.removeprefix("rollout_").removesuffix(".sh")
        return f"exit_code.{self.rank}" if self.role == "trainer" else f"exit_code.rollout{index}"

    @property
    def secrets(self) -> str:
        return secrets_file(self.script)


def _node_runs(spec: JobSpec, bundle: Bundle) -> list[NodeRun]:
    runs, rank = [], 0
    for i, node in enumerate(spec.cluster.nodes):
        if i in bundle.node_files:
            runs.append(NodeRun(i, node.host, "trainer", rank, bundle.node_files[i]))
            rank += 1
        elif i in bundle.rollout_files:
            runs.append(NodeRun(i, node.host, "rollout", None, bundle.rollout_files[i]))
    return runs


def launch_checks(spec: JobSpec, job_id: str | None, secrets: dict[str, str] | None) -> str:
    """What every launch checks first, on any backend: the spec has no errors and every secret has a value. Returns
    the job id (default: <name>-<timestamp>); raises LaunchError with the reasons."""
    errors = [f for f in check(spec) if f.severity == "error"]
    if errors:
        raise LaunchError("the spec has errors:\n" + format_findings(errors))
    missing = [n for n in spec.secret_env if not (secrets or {}).get(n)]
    if missing:
        raise LaunchError(f"secret value(s) missing for {', '.join(missing)}: enter them before launching")
    return check_name(job_id or f"{spec.name}-{time.strftime('%Y%m%d-%H%M%S')}")


def launch_tag(job: dict) -> str:
    """What tells this launch of a job id apart from any other: its creation time in microseconds, in hex."""
    return format(round(job["created"] * 1e6), "x")


def run_token(job: dict, r: NodeRun) -> str:
    """The environment entry every process of the node inherits."""
    return f"GRPO_UI_RUN={job['id']}/{r.token}@{launch_tag(job)}"


def _run_of(node: dict) -> NodeRun:
    """The NodeRun of a stored node row."""
    return NodeRun(node["node_index"], node["host"], node["role"], node["node_rank"], node["script"])


def _this_process() -> str:
    """Host, pid and start time of this process: who runs a launch."""
    start = Path(f"/proc/{os.getpid()}/stat").read_text().rsplit(")", 1)[1].split()[19]
    return f"{socket.gethostname()} {os.getpid()} {start}"


def _owner_gone(owner: str | None) -> bool:
    """The process that ran a launch is known to have exited (same host, and that pid is gone or another process)."""
    if not owner:
        return False
    host, pid, start = owner.split()
    if host != socket.gethostname():
        return False
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19] != start
    except OSError:
        return True


def _payload(bundle: Bundle, r: NodeRun, secrets: dict[str, str] | None) -> bytes:
    """A tar archive of what the node needs: its script (0755) and, if any, its secrets file (0600)."""
    files = {r.script: (bundle.files[r.script], 0o755)}
    if secrets:
        files[r.secrets] = ("".join(f"{k}={shell.quote(v)}\n" for k, v in secrets.items()), 0o600)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, (text, mode) in files.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), mode, int(time.time())
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


class Launcher:
    """Launch, refresh, stop and re-attach jobs; one instance per app or CLI process."""

    def __init__(self, store: Store, pool: Pool | None = None):
        self.store = store
        self.pool = pool or Pool()

    def runner(self, spec: JobSpec, index: int) -> Runner:
        return runner_for(spec.cluster.nodes[index], self.pool)

    def launch(self, spec: JobSpec, job_id: str | None = None, secrets: dict[str, str] | None = None,
               progress=lambda host, msg: None, preflight: bool = False) -> str:
        """Start the job; returns its id. With ``preflight``, every node is checked first and any preflight error
        fails the job before anything is started. Raises LaunchError (with every reason) and leaves nothing running.
        """
        job_id = launch_checks(spec, job_id, secrets)
        bundle = render(spec, job_id)
        runs = _node_runs(spec, bundle)
        rd = run_dir(spec, job_id)
        try:
            self.store.create_job(job_id, spec.name, spec_to_yaml(spec), "pending")
        except DuplicateJob as e:
            raise LaunchError(str(e)) from None
        self.store.set_meta(job_id, OWNER, _this_process())
        for r in runs:
            self.store.add_node(job_id, r.index, r.host, r.role, r.rank, r.script, rd)
        if preflight:
            self._preflight(spec, job_id, progress)
        self.store.set_job(job_id, state="starting")

        def connect(r: NodeRun) -> Runner:
            progress(r.host, "connecting")
            return self.runner(spec, r.index)

        connected = parallel(connect, runs)
        failed = [(r, e) for r, e in connected if isinstance(e, Exception)]
        if failed:
            return self._abort(spec, job_id, [], failed, tried=False)
        runners = {r.index: runner for r, runner in connected}
        first_trainer = next(r for r in runs if r.role == "trainer")
        self.store.set_memory_estimate(job_id, estimate_at_launch(spec, runners[first_trainer.index]))
        started: list[NodeRun] = []
        for group in ([r for r in runs if r.role == "rollout"], [r for r in runs if r.role == "trainer"]):
            results = parallel(lambda r: self._start(job_id, rd, r, runners[r.index],
                                                     _payload(bundle, r, secrets), progress), group)
            started += [r for r, res in results if not isinstance(res, Exception)]
            failed = [(r, e) for r, e in results if isinstance(e, Exception)]
            if not failed and group and group[0].role == "rollout":
                trainer0 = next(r for r in runs if r.role == "trainer")
                failed = self._wait_healthy(spec, job_id, rd, group, runners, trainer0, progress)
            if failed:
                return self._abort(spec, job_id, [(r, runners[r.index]) for r in started], failed, tried=True)
        self.store.set_job(job_id, state="running", started=time.time())
        return job_id

    def _preflight(self, spec: JobSpec, job_id: str, progress) -> None:
        """The job's first step: preflight on every node; its errors fail the job (stored) before anything starts."""
        self.store.set_job(job_id, state="preflight")
        _, findings = run_preflight(spec, self.pool, progress)
        errors = [f for f in findings if f.severity == "error"]
        if errors:
            reasons = "preflight found errors, nothing was started:\n" + format_findings(errors)
            self.store.set_job(job_id, state="failed", ended=time.time(), error=reasons)
            raise LaunchError(reasons)

    def _start(self, job_id: str, rd: str, r: NodeRun, runner: Runner, payload: bytes, progress) -> None:
        """One remote shell per node: create the run directory, unpack the script (and the 0600 secrets file) from
        stdin, start the script in its own session, and report pid, process group and start time once it has
        lived SETTLE seconds and read its secrets file (or its log tail if it exited)."""
        progress(r.host, "starting")
        token = run_token(self.store.job(job_id), r)
        log, secrets = shell.quote(r.log), shell.quote(r.secrets)
        # The session leader writes its pid to a file and to the pipe `read` waits on (setsid may fork, so $! would
        # not be it), then becomes the node script with its output in the log, which closes the pipe. Then a short
        # poll: the script must still live after SETTLE seconds, and have read (deleted) its secrets file, which is
        # removed here in any case. /proc/PID/stat is read once, with a builtin; after the ")" that ends the command
        # name, field 3 is the process group and field 20 the start time.
        # --norc: a `bash -c` under sshd sources ~/.bashrc (Debian builds bash to, when SSH_CLIENT is set and SHLVL
        # < 2, which exec resets): slow (conda/pyenv init) and it could change the job's environment.
        leader = (f"echo $$ > {shell.quote(r.script[:-3] + '.pid')}; echo $$; "
                  f"exec bash {shell.quote(r.script)} > {log} 2>&1")
        cmd = (f"mkdir -p {shell.path(rd)} && cd {shell.path(rd)} && tar -x --no-same-owner -f - || exit 1; "
               f"read -r pid < <({shell.join(['env', token, 'setsid', 'nohup', 'bash', '--norc', '-c', leader])} "
               "< /dev/null 2> /dev/null); "
               f"for _ in $(seq {round(SETTLE / 0.05)}); do [ -e /proc/$pid ] || break; sleep 0.05; done; "
               f"for _ in $(seq {round(SECRETS_READ / 0.05)}); do [ -e {secrets} ] && [ -e /proc/$pid ] || break; "
               f"sleep 0.05; done; unread=; [ -e {secrets} ] && unread=1 && rm -f -- {secrets}; "
               f"read -r stat 2> /dev/null < /proc/$pid/stat && set -- ${{stat##*) }} && [ $1 != Z ] && "
               f'[ -z "$unread" ] && echo "started $pid $3 ${{20}}" || '
               f'{{ echo "exited $pid ${{unread:+secrets-unread}}"; tail -n 20 {log}; }}')
        res = runner.run(cmd, timeout=SECRETS_READ + 30, stdin=payload)
        words = res.out.split(maxsplit=4)
        if res.rc or len(words) < 4 or words[0] != "started":
            detail = res.err.strip() or ("it did not read its secrets file within "
                                         f"{SECRETS_READ:.0f} s (removed)" if "secrets-unread" in res.out.split("\n")[0]
                                         else "exited at once")
            raise SshError(r.host, f"{r.script} did not start: {detail}\n{res.out.partition(chr(10))[2]}")
        self.store.set_node(job_id, r.index, pid=int(words[1]), pgid=int(words[2]), proc_start=words[3],
                            state="running")
        progress(r.host, f"running (pid {words[1]})")

    def _wait_healthy(self, spec: JobSpec, job_id: str, rd: str, rollouts: list[NodeRun],
                      runners: dict[int, Runner], trainer0: NodeRun, progress) -> list:
        """Poll every rollout server's /health/ from trainer rank 0 until it answers 200 (the model is loaded) or
        vllm_server_timeout passes; [(node, error)] for the servers that did not come up. The probe carries trainer
        rank 0's run token, so stopping the job (an interrupted launch included) stops it too."""
        timeout = spec.rollout.vllm_server_timeout
        endpoints = dict(zip((r.index for r in rollouts), spec.server_endpoints(), strict=False))
        checks = shell.join(f"{h}:{p}" for h, p in endpoints.values())
        loop = (f"end=$((SECONDS + {int(timeout)})); for hp in {checks}; do h=${{hp%:*}}; p=${{hp##*:}}; "
                "until (exec 3<>/dev/tcp/$h/$p && printf 'GET /health/ HTTP/1.0\r\n\r\n' >&3 && "
                "head -n 1 <&3 | grep -q ' 200') 2>/dev/null; do [ $SECONDS -ge $end ] && { echo \"down $hp\"; "
                "break; }; sleep 2; done; done")
        cmd = shell.join(["env", run_token(self.store.job(job_id), trainer0), "bash", "--norc", "-c", loop])
        for r in rollouts:
            progress(r.host, "waiting for /health/")
        down = runners[trainer0.index].run(cmd, timeout=timeout + 30).out.split()
        failed = []
        for r in rollouts:
            host, port = endpoints[r.index]
            if f"{host}:{port}" in down:
                tail = runners[r.index].run(f"tail -n 20 {shell.path(rd)}/{shell.quote(r.log)}", timeout=10).out
                failed.append((r, SshError(r.host, f"rollout server {host}:{port} did not answer /health/ within "
                                                   f"{timeout:.0f} s\n{tail}")))
            else:
                progress(r.host, "healthy")
        return failed

    def _abort(self, spec: JobSpec, job_id: str, started, failed, tried: bool) -> str:
        """Stop what started and fail the job. With ``tried``, the failed nodes' start commands ran: one may have
        started its script before its SSH connection died, so those nodes are stopped too (over a new connection)."""
        nodes = {n["node_index"]: n for n in self.store.nodes(job_id)}
        for r, runner in started:
            self._kill(runner, job_id, nodes[r.index])
            self.store.set_node(job_id, r.index, state="stopped")
        reasons = "; ".join(str(e) if isinstance(e, SshError) else f"{r.host}: {describe(e)}" for r, e in failed)
        unverified = []
        for r, _ in failed:
            self.store.set_node(job_id, r.index, state="failed")
            if tried and r.index not in {s.index for s, _ in started}:
                try:
                    self._kill(self.runner(spec, r.index), job_id, nodes[r.index])
                except Exception as e:  # noqa: BLE001 - reported: that host may still run the job
                    unverified.append(f"{r.host} ({describe(e)})")
        left = (f"; could not verify that nothing is left on {', '.join(unverified)}: run `python -m grpo_ui stop "
                f"{job_id}` once it answers" if unverified else "")
        self.store.set_job(job_id, state="failed", ended=time.time(), error=f"launch failed: {reasons}{left}")
        raise LaunchError(f"launch failed{', nothing left running' if not unverified else ''}: {reasons}{left}")

    # ----------------------------------------------------------------------------------------------------------

    def _kill(self, runner: Runner, job_id: str, node: dict, grace: float = 10.0) -> str:
        """SIGTERM the node's processes, SIGKILL after the grace period, verify nothing is left.

        The node's processes are those carrying its env token, plus its process group when the group's leader is
        still the recorded process (same pid and start time, so a recycled pid is never signalled): a child that
        cleared its environment (`env -i`) is still in the group. Once verified, the group number stays ours as
        long as it has members, so the wait loop may keep using it.
        """
        r = _run_of(node)
        token = run_token(self.store.job(job_id), r)
        group = (f"g={int(node['pgid'])}; s=$(cat /proc/$g/stat 2>/dev/null) && set -- ${{s##*) }} && "
                 f"[ \"${{20}}\" = {shell.quote(str(node['proc_start']))} ] && grp=1; "
                 if node.get("pgid") and node.get("proc_start") else "")
        cmd = (f"rm -f -- {shell.path(node['run_dir'])}/{shell.quote(r.secrets)}; "  # a start that never got to it
               + FIND + f"t={shell.quote(token)}; grp=; {group}"
               'members() { find_job "$t"; [ -n "$grp" ] && ps -eo pid=,pgid=,stat= | '
               'awk -v g="$g" \'$2 == g && $3 !~ /^Z/ {print $1}\'; }; '
               'pids=$(members); [ -z "$pids" ] && echo gone && exit 0; '
               f"kill -TERM $pids 2>/dev/null; for _ in $(seq {int(grace * 5)}); do sleep 0.2; "
               '[ -z "$(members)" ] && echo stopped && exit 0; done; '
               'kill -KILL $(members) 2>/dev/null; sleep 0.5; left=$(members); '
               '[ -z "$left" ] && echo killed || echo "left" $left')
        return runner.run(cmd, timeout=grace + 30).out.strip()

    def stop(self, job_id: str, grace: float = 10.0) -> dict[str, str]:
        """Stop every node of the job; returns host → outcome (gone/stopped/killed). Raises if anything is left."""
        job = self.store.job(job_id)
        if not job:
            raise LaunchError(f"no job {job_id!r}")
        spec = spec_from_yaml(job["spec_yaml"])
        nodes = self.store.nodes(job_id)
        results = parallel(lambda n: self._kill(self.runner(spec, n["node_index"]), job_id, n, grace), nodes)
        outcome = {n["host"] + ("" if n["role"] == "trainer" else " (rollout)"): str(res) for n, res in results}
        left = {h: o for h, o in outcome.items() if not o.startswith(("gone", "stopped", "killed"))}
        for n, res in results:
            if not isinstance(res, Exception) and str(res).startswith(("stopped", "killed")):
                self.store.set_node(job_id, n["node_index"], state="stopped")
        if left:
            self.store.set_job(job_id, error=f"stop incomplete: {left}")
            raise LaunchError(f"could not verify that everything stopped: {left}")
        if job["state"] in ("starting", "running"):
            self.store.set_job(job_id, state="stopped", ended=time.time())
        return outcome

    def refresh(self, job_id: str) -> str:
        """Re-check every node (alive with the same start time, else its exit code); update and return the state.

        A trainer that failed ends the job: it is named with its exit code and log tail, and the others are stopped.
        A launch whose process is gone (the app or CLI was killed mid-launch) is interrupted: whatever it started is
        stopped and the job fails. Without that process's identity (another machine), a job still pending or in
        preflight long after it was created counts as abandoned.
        """
        job = self.store.job(job_id)
        if not job:
            return "unknown"
        if job["state"] in ("pending", "preflight", "starting") and _owner_gone(self.store.meta(job_id, OWNER)):
            return self._interrupted(job)
        if job["state"] in ("pending", "preflight") and time.time() - job["created"] > ABANDONED_AFTER:
            self.store.set_job(job_id, state="failed", ended=time.time(),
                               error=f"the launch stopped during {job['state']} (the app or CLI exited); no node "
                                     "was started")
            return "failed"
        if job["state"] not in ("starting", "running"):
            return job["state"]
        spec = spec_from_yaml(job["spec_yaml"])
        nodes = [n for n in self.store.nodes(job_id) if n["pid"]]  # while starting, the others are not started yet
        results = parallel(lambda n: self._probe(spec, n), nodes)
        failures = []
        for n, res in results:
            if isinstance(res, Exception):
                continue  # unreachable now: keep the last known state, the monitor shows the error
            state, code, when, why = res
            if state != "running":
                self.store.set_node(job_id, n["node_index"], exit_code=code, state=state)
            if why:
                failures.append((when, n, why))
        trainers = [n for n in self.store.nodes(job_id) if n["role"] == "trainer"]
        if failures:
            when, first, why = min(failures, key=lambda f: f[0])
            tail = self.tail(job_id, first["node_index"], 50)
            label = f"rank {first['node_rank']}" if first["role"] == "trainer" else "rollout server"
            self.store.set_job(job_id, state="failed", ended=time.time(),
                               error=f"node {first['node_index']} ({first['host']}, {label}) failed first: {why}"
                                     f"{self._stop_rest(job_id)}\n{tail}")
            return "failed"
        if trainers and all(n["state"] == "succeeded" for n in trainers):
            self.store.set_job(job_id, state="succeeded", ended=time.time(),
                               error=self._stop_rest(job_id).removeprefix("; ") or None)  # rollout servers, if any
            return "succeeded"
        return "running"

    def _probe(self, spec: JobSpec, n: dict) -> tuple[str, int | None, float, str | None]:
        """(node state, exit code, when it ended, why it failed or None) of a started node."""
        r = _run_of(n)
        exit_file = f"{shell.path(n['run_dir'])}/{shell.quote(r.exit_file)}"
        # running: the recorded process, same start time (field 20 after the command name), not a zombie (an
        # exited process its new parent has not reaped yet)
        cmd = (f"if read -r s 2> /dev/null < /proc/{int(n['pid'])}/stat && set -- ${{s##*) }} && [ $1 != Z ] && "
               f'[ "${{20}}" = {shell.quote(n["proc_start"])} ]; '
               f'then echo running; elif [ -f {exit_file} ]; then echo "exited $(stat -c %.3Y {exit_file}) '
               f'$(head -c 64 {exit_file})"; else echo dead; fi')
        words = self.runner(spec, n["node_index"]).run(cmd, timeout=20).out.split()
        if words == ["running"]:
            return "running", None, 0.0, None
        if words == ["dead"]:
            return "lost", None, time.time(), "process gone without an exit code (killed?)"
        if len(words) >= 2 and words[0] == "exited":
            when, text = float(words[1]), " ".join(words[2:])
            if text.lstrip("-").isdigit():
                code = int(text)
                return ("succeeded", 0, when, None) if code == 0 else ("failed", code, when, f"exit code {code}")
            why = (f"its {r.exit_file} file is empty: the disk of {n['host']} may be full" if not text else
                   f"its {r.exit_file} file holds {text!r}, not an exit code")
            return "failed", None, when, why
        raise SshError(n["host"], f"unexpected answer to the status check of node {n['node_index']}: {words!r}")

    def _stop_rest(self, job_id: str) -> str:
        """Stop whatever of the job still runs; '' or '; ' + why that could not be verified."""
        try:
            self.stop(job_id, grace=5)
            return ""
        except UserError as e:
            return f"; {e}"

    def _interrupted(self, job: dict) -> str:
        """The launch's process exited mid-launch: stop what it had started (by token, on every node), fail."""
        if job["state"] == "starting":
            outcome = self._stop_rest(job["id"]) or "; everything it had started was stopped"
        else:
            outcome = "; no node was started"
        self.store.set_job(job["id"], state="failed", ended=time.time(), error="the launch was interrupted during "
                           f"{job['state']} (the app or CLI running it exited){outcome}")
        return "failed"

    def tail(self, job_id: str, node_index: int, lines: int = 50) -> str:
        job = self.store.job(job_id)
        spec = spec_from_yaml(job["spec_yaml"])
        n = next(x for x in self.store.nodes(job_id) if x["node_index"] == node_index)
        log = shell.quote(n["script"].removesuffix(".sh") + ".log")
        try:
            return self.runner(spec, node_index).run(
                f"tail -n {int(lines)} {shell.path(n['run_dir'])}/{log}", timeout=20).out
        except SshError as e:
            return f"(log unavailable: {e})"

    def reattach(self) -> dict[str, str]:
        """After an app restart: re-check every job that was not finished; each job alone may fail (its entry then
        says why, naming it)."""
        out = {}
        for job in self.store.jobs(active_only=True):
            try:
                out[job["id"]] = self.refresh(job["id"])
            except Exception as e:  # noqa: BLE001 - this job alone; the others are still checked
                out[job["id"]] = f"error: job {job['id']}: {describe(e)}"
        return out
