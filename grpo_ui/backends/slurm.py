"""Slurm backend: the whole GRPO job is one sbatch job (templates/job.sbatch.j2), submitted, watched and cancelled
from a login node.

The login node is the app's own machine (cluster.login ``localhost``) or a host reached over SSH. The run directory
(cluster.run_root/<job id>) must be on a file system the login node and every compute node share: job.sbatch, the
0600 secrets file (read once by the batch script, then deleted), each node's log and exit code and the list of allocated hosts are written there, so everything
is read on the login node. The job's state comes from ``scontrol show job`` (Slurm keeps an ended job there for
MinJobAge, 300 s by default), then from ``sacct`` where accounting is set up, then from the exit codes alone.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from grpo_ui.backends.base import Backend, BackendError, Handle, JobStatus, NodeStatus, Progress
from grpo_ui.backends.remote.runner import Runner, Wrapped, runner_for
from grpo_ui.backends.slurm_text import (
    QUEUED,
    RUNNING,
    exit_code,
    job_state,
    records,
    sinfo_nodes,
    srun_task_error,
)
from grpo_ui.core import shell
from grpo_ui.core.findings import Finding, finding
from grpo_ui.launch.plan import LaunchPlan
from grpo_ui.launch.render import sbatch_request, slurm_gpus
from grpo_ui.launch.runfiles import HOSTS, ROLLOUT_HOSTS, SBATCH, SBATCH_OUTPUT, NodeFiles, secrets_file
from grpo_ui.spec.cluster import Node
from grpo_ui.spec.resolve import Resolved

PROBE_WAIT = 20  # seconds the preflight's srun waits for an allocation (--immediate) before giving up
STOP_WAIT = 60   # seconds, on top of the grace, a cancelled job may stay COMPLETING while Slurm kills its tasks
# What a run writes into the run directory as it goes (exit_code.*: the rollout servers' exit codes too)
RUN_FILES = f"{HOSTS} {ROLLOUT_HOSTS} {NodeFiles('trainer', '*').exit_code}"


@dataclass
class SlurmHandle(Handle):
    """A submitted job: ``job`` is its Slurm job id."""

    backend = "slurm"

    trainers: list[int] = field(default_factory=list)  # node indices in cluster.nodes, by NODE_RANK
    rollouts: list[int] = field(default_factory=list)  # node indices of the rollout servers, by their number
    submitted: float = 0.0


class SlurmBackend(Backend):
    """One job spec run as one Slurm job; see the module docstring."""

    name = "slurm"
    places_nodes = True

    @property
    def login(self) -> Runner:
        return runner_for(Node(host=self.spec.cluster.login), self.pool)

    def where(self) -> str:
        return f"Slurm (sbatch on {self.spec.cluster.login})"

    def runner(self, node: int) -> Runner:
        return self.login  # every node's files are in the shared run directory

    def node_shell(self, handle: SlurmHandle, node: int, host: str) -> Runner:
        """A job step beside the running one on that node (srun --overlap): it gets the job's GPUs there, as
        Slurm sets CUDA_VISIBLE_DEVICES for any step, and it ends with the job."""
        component = [f"--het-group={int(node in handle.rollouts)}"] if handle.rollouts else []
        srun = ["srun", f"--jobid={handle.job}", *component, "--overlap", "--nodes=1", "--ntasks=1",
                f"--nodelist={host}", "--quiet"]
        return Wrapped(self.login, lambda command: shell.join([*srun, "bash", "--norc", "-c", command]))

    def process_marker(self, handle: SlurmHandle, node: int) -> str:
        return f"SLURM_JOB_ID={handle.job}"

    def launched_file(self, handle: SlurmHandle, node: int) -> str:
        return f"{handle.run_dir}/{SBATCH}"

    # -- preflight ------------------------------------------------------------------------------------------------

    def prepare(self, eff: Resolved, progress: Progress) -> tuple[list, list[Finding]]:
        """sinfo: the partition exists and has enough usable nodes with the GPUs asked for; sbatch --test-only:
        Slurm accepts the request (account, QoS, limits); srun: every allocated node can write into run_root and
        the login node sees what they wrote. No facts about the machines: Slurm has not chosen them yet."""
        progress(self.spec.cluster.login, "preflight (sinfo, sbatch --test-only, srun)")
        return [], self._findings(eff)

    def _findings(self, eff: Resolved) -> list[Finding]:
        login = self.login
        res = login.run("sinfo -h -N -o '%N|%P|%G|%t'", timeout=30)
        if res.rc:
            return [finding("SLURM-UNREACHABLE", "error", "cluster.login",
                            f"sinfo on {login.host} failed: {(res.err or res.out).strip()[-500:]}",
                            "Check that cluster.login is a Slurm login node and that slurmctld answers there.")]
        found = self._capacity(eff, res.out)
        if not found:
            test = login.run("sbatch --test-only", timeout=60, stdin=sbatch_request(eff).encode())
            if test.rc:
                found.append(finding("SLURM-REQUEST", "error", ("slurm.partition", "slurm.account", "slurm.qos"),
                                     f"Slurm refuses the job: {(test.err or test.out).strip()[-500:]}",
                                     "Fix the slurm section (partition, account, QoS, time limit, extra lines)."))
        return found or self._probe_run_root(login, eff.nnodes)

    def _capacity(self, eff: Resolved, sinfo: str) -> list[Finding]:
        nodes = sinfo_nodes(sinfo)
        wanted = self.spec.slurm.partition
        parts = wanted.split(",") if wanted else sorted({n.partition for n in nodes if n.default})
        known = sorted({n.partition for n in nodes})
        missing = [p for p in parts if p not in known]
        if missing or not parts:
            what = f"no partition {', '.join(missing)}" if missing else "no default partition"
            return [finding("SLURM-PARTITION", "error", "slurm.partition",
                            f"The cluster has {what}; its partitions: {', '.join(known) or 'none'}.",
                            "Set slurm.partition to one of them.")]
        usable = {n.name: n for n in nodes if n.partition in parts and n.usable}
        out = []
        for role, group in (("trainer", eff.spec.trainer_nodes()),
                            ("rollout", eff.spec.rollout_nodes() if eff.server else [])):
            if not group:
                continue
            gpus = slurm_gpus(self.spec, group, role)
            fit = sorted(n.name for n in usable.values() if n.gpus >= gpus)
            if len(fit) < len(group):
                down = sorted({f"{n.name} ({n.state})" for n in nodes if n.partition in parts and not n.usable})
                out.append(finding("SLURM-NODES", "error", ("slurm.partition", "slurm.gpus_per_node", "cluster.nodes"),
                                   f"Partition {','.join(parts)} has {len(fit)} usable node(s) with ≥ {gpus} GPU(s) "
                                   f"({', '.join(fit) or 'none'}) but the job asks for {len(group)} {role} node(s)"
                                   + (f"; not usable: {', '.join(down)}" if down else "") + ".",
                                   "Ask for fewer nodes or GPUs per node, or choose another partition."))
        return out

    def _probe_run_root(self, login: Runner, nnodes: int) -> list[Finding]:
        s, root = self.spec.slurm, self.spec.cluster.run_root
        where = {"partition": s.partition, "account": s.account, "qos": s.qos, "constraint": s.constraint}
        srun = ["srun", f"--immediate={PROBE_WAIT}", "--quiet", "--job-name=grpo-ui-preflight", "--time=1",
                f"--nodes={nnodes}", "--ntasks-per-node=1", *(f"--{k}={v}" for k, v in where.items() if v),
                "bash", "-c", 'touch "$0/$SLURM_NODEID"']
        res = login.run(f'd={shell.path(root)}/.grpo-ui-probe-$$ && mkdir -p "$d" || exit 9; {shell.join(srun)} "$d" '
                        '2>&1; echo "#srun $?"; ls "$d"; rm -rf "$d"', timeout=PROBE_WAIT + 60)
        if res.rc == 9:
            return [finding("SLURM-RUN-DIR", "error", "cluster.run_root",
                            f"Cannot create {root} on {login.host}: {res.err.strip()}",
                            "Choose a run_root you can write to on a file system the compute nodes share.")]
        said, _, listing = res.out.partition("#srun ")
        code, *written = listing.split() or ["?"]
        if code != "0":
            return [finding("SLURM-RUN-DIR-UNCHECKED", "info", "cluster.run_root",
                            f"No allocation within {PROBE_WAIT} s to check {root} from the compute nodes: "
                            f"{said.strip()[-300:]}", "Nothing to do if run_root is on a shared file system.")]
        unseen = sorted(set(map(str, range(nnodes))) - set(written))
        if unseen:
            return [finding("SLURM-RUN-DIR", "error", "cluster.run_root",
                            f"{len(unseen)} of {nnodes} allocated node(s) wrote into {root} but {login.host} does "
                            "not see their files: it is not shared with the compute nodes.",
                            "Put run_root on a file system every node shares (a shared home or a parallel file "
                            "system).")]
        return []

    # -- the job --------------------------------------------------------------------------------------------------

    def start(self, plan: LaunchPlan, secrets: dict[str, str], progress: Progress,
              save: Callable[[Handle], None]) -> tuple[SlurmHandle, JobStatus]:
        """Write job.sbatch (and the 0600 secrets file) into the run directory and submit it from there."""
        login, rd, bundle = self.login, plan.run_dir, plan.bundle
        progress(login.host, "submitting")
        res = login.run(f"mkdir -p {shell.path(rd)} && cd {shell.path(rd)} && rm -f {RUN_FILES}", timeout=30)
        if res.rc:
            raise BackendError(f"{login.host}: cannot create the run directory {rd}: {res.err.strip()}")
        login.write(f"{rd}/{SBATCH}", bundle.files[SBATCH], 0o755)
        if secrets:
            login.write(f"{rd}/{secrets_file(SBATCH)}", "".join(f"{k}={shell.quote(v)}\n" for k, v in secrets.items()),
                        0o600)
        res = login.run(f"cd {shell.path(rd)} && sbatch --parsable {SBATCH}", timeout=60)
        job = res.out.strip().split(";")[0]
        if res.rc or not job.isdigit():
            raise BackendError(f"sbatch on {login.host} refused the job: {(res.err or res.out).strip()}")
        handle = SlurmHandle(job, rd, [n.index for n in plan.role("trainer")], [n.index for n in plan.role("rollout")],
                             time.time())
        save(handle)
        progress(login.host, f"submitted (Slurm job {job})")
        return handle, JobStatus("queued", f"Slurm job {job}: submitted", self._nodes(handle, {}))

    def poll(self, handle: SlurmHandle) -> JobStatus:
        job, rd = shell.quote(handle.job), shell.path(handle.run_dir)
        login = self.login
        res = login.run(
            f"if s=$(scontrol show job -o {job} 2>&1); then echo \"$s\"; elif grep -q 'Invalid job id' <<< \"$s\"; "
            f"then echo '#forgotten'; sacct -n -X -P -j {job} -o State,ExitCode 2>/dev/null; else echo \"#error $s\"; "
            f"fi; echo '#files'; cd {rd} 2>/dev/null && for f in {RUN_FILES}; do [ -f \"$f\" ] && "
            "echo \"$f $(stat -c %.3Y \"$f\") $(tr '\\n' ' ' < \"$f\")\"; done; true", timeout=30)
        head, _, tail = res.out.partition("#files\n")
        if head.startswith("#error"):
            raise BackendError(f"scontrol on {login.host}: {head.removeprefix('#error').strip()}")
        files = {name: (float(mtime), words.split()) for name, mtime, words in
                 (line.split(" ", 2) for line in tail.splitlines() if line.count(" ") >= 2)}
        comps = records(head)
        lead = comps[0] if comps else {}
        if comps:
            slurm, reason, code = lead["JobState"], lead.get("Reason", "None"), lead.get("ExitCode", "")
        else:  # Slurm forgot it (MinJobAge): sacct's 'STATE|CODE', or nothing without accounting
            slurm, _, code = (head.removeprefix("#forgotten").strip().splitlines() or ["|"])[0].partition("|")
            slurm, reason = slurm.split(" ")[0], "None"
        nodes = self._nodes(handle, files)
        state = job_state(slurm) if slurm else (
            "succeeded" if all(n.exit_code == 0 for n in nodes if n.role == "trainer") else "failed")
        status = JobStatus(state, f"Slurm job {handle.job}: {slurm or 'no longer known to Slurm'}", nodes)
        if reason != "None":
            status.detail += f" ({reason})"
            status.reason = reason
        for n in nodes:
            if n.exit_code is None and state in ("succeeded", "failed", "stopped"):
                # ended without an exit code: killed (rollout servers are, when the training ends)
                n.state = "stopped" if state == "stopped" or n.role == "rollout" else "failed"
        if state == "queued":
            status.queue_position = self._queue_position(handle.job, lead)
            if lead.get("StartTime") not in (None, "Unknown", "None"):
                status.detail += f", expected start {lead['StartTime']}"
        elif state == "failed":
            status.detail += f", exit code {exit_code(code)[0]}" if code else ""
            self._explain(handle, status)
        return status

    @staticmethod
    def _nodes(handle: SlurmHandle, files: dict) -> list[NodeStatus]:
        """Each node's status from the run directory: its host once allocated, its exit code (and when it was
        written) once it ended."""
        out = []
        for role, indices, hosts in (("trainer", handle.trainers, HOSTS), ("rollout", handle.rollouts, ROLLOUT_HOSTS)):
            names = files.get(hosts, (0, []))[1]
            for k, index in enumerate(indices):
                node = NodeFiles(role, k)
                written, words = files.get(node.exit_code, (None, ["?"]))
                code = int(words[0]) if words and words[0].lstrip("-").isdigit() else None
                state = ("succeeded" if code == 0 else "failed") if code is not None else (
                    "running" if names else "pending")
                out.append(NodeStatus(index, role, k if role == "trainer" else None,
                                      names[k] if k < len(names) else None, state, code, f"{handle.run_dir}/{node.log}",
                                      why=f"exit code {code}" if code not in (None, 0) else None, ended=written))
        return out

    def _queue_position(self, job: str, lead: dict) -> int | None:
        """1 + the pending jobs of its partition that Slurm would start first (higher priority, or equal and
        submitted earlier)."""
        res = self.login.run(f"squeue -h -t PENDING -p {shell.quote(lead.get('Partition', ''))} -o '%i|%Q'",
                             timeout=30)
        if res.rc or not lead.get("Priority", "").isdigit():
            return None
        mine, ahead = (-int(lead["Priority"]), int(job)), 0
        for line in res.out.split():
            jid, _, prio = line.partition("|")
            base = jid.split("+")[0].split("_")[0]
            if ("+" in jid and not jid.endswith("+0")) or not base.isdigit() or base == job or not prio.isdigit():
                continue  # a heterogeneous job counts once, by its first component
            ahead += (-int(prio), int(base)) < mine
        return ahead + 1

    def _explain(self, handle: SlurmHandle, status: JobStatus) -> None:
        """A failed job whose nodes wrote no failing exit code: the task srun reported failed (one killed before it
        could write one), else what Slurm says and the batch script's own output."""
        if any(n.why for n in status.nodes):
            return
        out = shell.path(f"{handle.run_dir}/{SBATCH_OUTPUT.replace('%j', handle.job)}")
        batch = self.login.run(f"tail -n 200 {out} 2>&1", timeout=20).out
        reported = srun_task_error(batch)
        trainers = {n.rank: n for n in status.nodes if n.role == "trainer"}
        if reported and reported[0] in trainers:
            trainers[reported[0]].why = f"srun: task {reported[0]}: {reported[1]}"
        else:
            status.error = f"{status.detail}\n{batch[-4000:]}"

    def stop(self, handle: SlurmHandle, grace: float = 10.0) -> dict[str, str]:
        """scancel, then wait until no component is pending, running or completing (Slurm has then killed every
        task process: SIGTERM, and SIGKILL after its KillWait), and check that no allocated node was drained for
        processes that would not die ('Kill task failed')."""
        before = self.poll(handle)
        job, active = handle.job, "|".join(sorted(QUEUED | RUNNING))
        rounds = int((grace + STOP_WAIT) / 0.5)
        res = self.login.run(f"scancel {shell.quote(job)} 2>&1; for _ in $(seq {rounds}); do s=$(scontrol show job "
                             f"-o {shell.quote(job)} "
                             f"2>&1); grep -qE 'JobState=({active}) ' <<< \"$s\" || break; sleep 0.5; done; "
                             'echo "$s"', timeout=grace + STOP_WAIT + 30)
        left = [r for r in records(res.out) if r["JobState"] in QUEUED | RUNNING]
        if left:
            raise BackendError(f"Slurm job {job} is still {left[0]['JobState']} on {left[0].get('NodeList')} "
                               f"{grace + STOP_WAIT:.0f} s after scancel; its processes may be left there.")
        hosts = sorted({n.host for n in before.nodes if n.host})
        if hosts:
            drained = self.login.run(f"sinfo -h -N -n {shell.quote(','.join(hosts))} -o '%N|%E'", timeout=30).out
            stuck = [line.split("|")[0] for line in drained.splitlines() if "Kill task failed" in line]
            if stuck:
                raise BackendError(f"processes of Slurm job {job} outlived it on {', '.join(stuck)}: Slurm drained "
                                   "the node(s) (Kill task failed); an administrator must clean them up.")
        outcome = "stopped" if before.state in ("queued", "running") else "gone"
        return dict.fromkeys(hosts, outcome) or {f"Slurm job {job}": outcome}
