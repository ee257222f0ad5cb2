"""The jobs service: every job, on any backend, from its launch plan to its end, recorded in the store. Pages, CLI
commands and the watcher go through it; it talks to backends only through grpo_ui.backends.base.Backend.

States: pending → preflight (when asked) → starting → running → succeeded / failed / stopped; a node lost without
an exit code fails the job. What lives here, once for every backend:
- launch: the job's and its nodes' rows, the estimate kept for the closed loop, preflight, the start, and the
  rollback of a start that failed half-way (whatever the handle saved so far says may run is stopped);
- refresh: the backend's status recorded; a failed job names the node that failed first with its log tail, and
  whatever still runs is stopped;
- a launch belongs to the process that runs it: when that process is gone (the app or CLI was killed mid-launch),
  the next refresh stops what the launch had started and fails the job; a job left pending or in preflight by a
  process elsewhere counts as abandoned after a while;
- stop, reattach after a restart, and the GPU telemetry of running jobs (grpo_ui.jobs.telemetry) when asked for.
The backend's Handle is kept in the job's meta (``backend_handle``, as Handle.to_json writes it), its last status
words in ``backend_status``.
"""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path

from grpo_ui.backends.base import Backend, Handle, JobStatus, NodeStatus, Progress
from grpo_ui.backends.preflight import HostFacts
from grpo_ui.backends.ray import RayBackend
from grpo_ui.backends.remote.runner import Runner
from grpo_ui.backends.remote.ssh import Pool, SshError
from grpo_ui.backends.slurm import SlurmBackend
from grpo_ui.backends.ssh import SshBackend
from grpo_ui.core import shell
from grpo_ui.core.errors import UserError, describe
from grpo_ui.core.findings import Finding, format_findings
from grpo_ui.jobs.specs import job_spec
from grpo_ui.jobs.store import (
    DuplicateJob,
    Job,
    JobState,
    MemoryAtLaunch,
    Store,
    TimeAtLaunch,
)
from grpo_ui.jobs.telemetry import Collector
from grpo_ui.knowledge.catalog import fetch_hf_config
from grpo_ui.launch.plan import LaunchPlan, make_plan
from grpo_ui.spec.model import JobSpec
from grpo_ui.spec.resolve import resolve
from grpo_ui.spec.yaml_io import spec_to_yaml

HANDLE, STATUS, OWNER, OVERRIDE = "backend_handle", "backend_status", "launcher", "override"  # job_meta keys
BACKENDS: dict[str, type[Backend]] = {"ssh": SshBackend, "slurm": SlurmBackend, "ray": RayBackend}
UNALLOCATED = "(not allocated)"  # a node's host until the backend places it
ABANDONED_AFTER = 600.0  # seconds; preflight's own timeouts end it well before
STORE_STATE = {"queued": JobState.STARTING, "running": JobState.RUNNING, "succeeded": JobState.SUCCEEDED,
               "failed": JobState.FAILED, "stopped": JobState.STOPPED}  # the backend's word → the job's state


class LaunchError(UserError):
    pass


def override_note(store: Store, job_id: str) -> str | None:
    """The errors a job was launched despite and the user's reason, as a sentence; None when there were none."""
    kept = store.meta(job_id, OVERRIDE)
    if not kept:
        return None
    kept = json.loads(kept)
    return f"Launched despite {', '.join(kept['errors'])}, with the reason: {kept['reason']}"


def backend_for(spec: JobSpec, pool: Pool | None = None) -> Backend:
    """The backend that runs the spec (cluster.backend)."""
    return BACKENDS[spec.cluster.backend](spec, pool)


def where(spec: JobSpec) -> str:
    """Where the spec's job runs, in a few words: its backend's (Launch, the CLI's plan)."""
    return backend_for(spec).where()


def preflight(spec: JobSpec, pool: Pool | None = None, progress: Progress = lambda where, msg: None
              ) -> tuple[list[HostFacts], list[Finding]]:
    """The backend's preflight of a job before any launch (the Cluster page, the ``preflight`` command): facts about
    the machines and findings, checked as a launch's preflight checks them; no plan, no job id."""
    return backend_for(spec, pool).prepare(resolve(spec), progress)


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


class Jobs:
    """Plan, launch, refresh, stop and re-attach jobs; one instance per app or CLI process. With ``telemetry`` it
    also collects the GPU samples of the running jobs it refreshes (the app, ``launch --wait``)."""

    def __init__(self, store: Store, pool: Pool | None = None, telemetry: bool = False):
        self.store = store
        self.pool = pool or Pool()
        self.collector = Collector(store) if telemetry else None

    def backend(self, spec: JobSpec) -> Backend:
        return backend_for(spec, self.pool)

    def runner(self, spec: JobSpec, index: int) -> Runner:
        return self.backend(spec).runner(index)

    def handle(self, job_id: str) -> Handle | None:
        """The backend's handle of the job, once its start began (None before)."""
        text = self.store.meta(job_id, HANDLE)
        return Handle.from_json(text) if text else None

    def close(self) -> None:
        """Stop collecting telemetry and close the SSH connections."""
        if self.collector:
            self.collector.close()
        self.pool.close()

    # -- launch ---------------------------------------------------------------------------------------------------

    def plan(self, spec: JobSpec, job_id: str | None = None, arch=None) -> LaunchPlan:
        """The job resolved once (grpo_ui.launch.plan); a model the catalogue lacks is read from its config.json where the
        job's first trainer runs."""
        backend = self.backend(spec)
        first = next((i for i, _ in spec.numbered("trainer")), 0)  # rank 0
        return make_plan(spec, job_id, arch, lambda path: fetch_hf_config(backend.runner(first), path))

    def preflight(self, spec: JobSpec, progress: Progress = lambda where, msg: None
                  ) -> tuple[list[HostFacts], list[Finding]]:
        return preflight(spec, self.pool, progress)

    def launch(self, plan: LaunchPlan, secrets: dict[str, str] | None = None,
               progress: Progress = lambda where, msg: None, preflight: bool = False, override: str | None = None) -> str:
        """Start the plan's job; returns its id. With ``preflight`` the backend's checks run first and their errors
        fail the job before anything starts. The spec's errors stop it too, unless ``override`` gives the reason to
        run anyway (kept with the job: ``overridden``). Raises LaunchError with every reason, and leaves nothing
        running."""
        if plan.assessment.held(override):
            raise LaunchError("the spec has errors:\n" + format_findings(plan.errors))
        secrets = secrets or {}
        missing = [n for n in plan.spec.secret_env if not secrets.get(n)]
        if missing:
            raise LaunchError(f"secret value(s) missing for {', '.join(missing)}: enter them before launching")
        job_id, backend = plan.job_id, self.backend(plan.spec)
        try:
            self.store.create_job(job_id, plan.spec.name, spec_to_yaml(plan.spec), JobState.PENDING)
        except DuplicateJob as e:
            raise LaunchError(str(e)) from None
        self.store.set_meta(job_id, OWNER, _this_process())
        if plan.assessment.blocked:  # launched despite its errors: the reason is kept with it
            self.store.set_meta(job_id, OVERRIDE, json.dumps({"reason": override.strip(),
                                                              "errors": [f.id for f in plan.errors]}))
        for n in plan.nodes:
            self.store.add_node(job_id, n.index, UNALLOCATED if backend.places_nodes else n.host, n.role, n.rank,
                                n.script, plan.run_dir)
        self.store.set_memory_estimate(job_id, MemoryAtLaunch.kept(plan.estimate))
        self.store.set_time_estimate(job_id, TimeAtLaunch.kept(plan.time))
        try:
            if preflight:
                self.store.set_job(job_id, state=JobState.PREFLIGHT)
                errors = [f for f in backend.prepare(plan.resolved, progress)[1] if f.severity == "error"]
                if errors:
                    raise LaunchError("preflight found errors, nothing was started:\n" + format_findings(errors))
            self.store.set_job(job_id, state=JobState.STARTING)
            handle, status = backend.start(plan, secrets, progress,
                                           lambda h: self.store.set_meta(job_id, HANDLE, h.to_json()))
        except LaunchError as e:
            self._fail(job_id, str(e))
            raise
        except Exception as e:  # noqa: BLE001 - any failure of the start: roll back, name it
            self._roll_back(backend, job_id, e)
        self.store.set_meta(job_id, HANDLE, handle.to_json())
        self.store.set_meta(job_id, OWNER, None)  # launched: from now on the job is followed, not started
        self._follow(self.store.job(job_id), backend, handle, status)
        return job_id

    def _fail(self, job_id: str, error: str) -> None:
        self.store.set_job(job_id, state=JobState.FAILED, ended=time.time(), error=error)
        self.store.set_meta(job_id, OWNER, None)

    def _roll_back(self, backend: Backend, job_id: str, error: Exception) -> None:
        """A start failed: stop whatever the saved handle says may run, fail the job, raise LaunchError."""
        reasons, handle, left = describe(error), self.handle(job_id), ""
        if handle:
            try:
                backend.stop(handle)
            except UserError as e:  # that machine may still run part of the job
                left = f"; {e}: run `python -m grpo_ui stop {job_id}` once it answers"
        failed = getattr(error, "nodes", ())
        for n in self.store.nodes(job_id):
            self.store.set_node(job_id, n.node_index, state="failed" if n.node_index in failed else "stopped")
        self._fail(job_id, f"launch failed: {reasons}{left}")
        raise LaunchError(f"launch failed{'' if left else ', nothing left running'}: {reasons}{left}") from None

    # -- follow ---------------------------------------------------------------------------------------------------

    def refresh(self, job_id: str) -> JobState:
        """Ask the job's backend how it is; record that and return the job's state. Raises (UserError) when the
        backend cannot be asked now: the job keeps its last known state."""
        job = self.store.job(job_id)
        if not job:
            raise LaunchError(f"no job {job_id!r}")
        state, owner = job.state, self.store.meta(job_id, OWNER)
        before_start = state in (JobState.PENDING, JobState.PREFLIGHT)
        if (before_start or state == JobState.STARTING) and _owner_gone(owner):
            return self._interrupted(job)
        if before_start and time.time() - job.created > ABANDONED_AFTER:
            self._fail(job_id, f"the launch stopped during {state} (the app or CLI exited); no node was started")
            return JobState.FAILED
        handle = self.handle(job_id)
        if not state.launched or owner or not handle:  # ended, or its launch still runs
            if self.collector and state.ended:
                self.collector.drop(job_id)
            return state
        backend = self.backend(job_spec(job).spec)
        return self._follow(job, backend, handle, backend.poll(handle))

    def _follow(self, job: Job, backend: Backend, handle: Handle, status: JobStatus) -> JobState:
        """Record the status; sample the GPUs of a running job, stop sampling an ended one. Returns the state."""
        state = self._record(job, backend, handle, status)
        if self.collector:
            if state == JobState.RUNNING:
                self.collector.follow(job.id, backend, handle, status.nodes)
            elif state.ended:
                self.collector.drop(job.id)
        return state

    def _record(self, job: Job, backend: Backend, handle: Handle, status: JobStatus) -> JobState:
        job_id = job.id
        for n in status.nodes:
            if n.state != "unknown":
                self.store.set_node(job_id, n.index, host=n.host or UNALLOCATED, state=n.state,
                                    exit_code=n.exit_code, pid=n.pid)
        if status.detail:
            self.store.set_meta(job_id, STATUS, json.dumps({"detail": status.detail, "reason": status.reason,
                                                            "queue_position": status.queue_position}))
        state = STORE_STATE[status.state]
        fields: dict = {"state": state}
        if state == JobState.RUNNING and not job.started:
            fields["started"] = time.time()
        if state.ended:
            note = self._stop_rest(job_id, backend, handle, status)
            fields.update(ended=time.time(), error=self._root_cause(backend, status, note) if state == JobState.FAILED
                          else note.removeprefix("; ") or None)
        self.store.set_job(job_id, **fields)
        return state

    def _stop_rest(self, job_id: str, backend: Backend, handle: Handle, status: JobStatus) -> str:
        """Stop whatever of an ended job still runs (after a failure, a succeeded job's rollout servers, what the
        backend says remains); '' or '; ' + why that could not be verified."""
        rest = [n for n in status.nodes if n.state in ("pending", "running", "unknown")]
        if not rest and not status.remains:
            return ""
        try:
            backend.stop(handle, grace=5)
        except UserError as e:
            return f"; {e}"
        for n in rest:
            self.store.set_node(job_id, n.index, state="stopped")
        return ""

    def _root_cause(self, backend: Backend, status: JobStatus, note: str) -> str:
        """The node that failed first (the earliest end among those that say why), what happened and its log
        tail; else the backend's own words."""
        failed = sorted((n for n in status.nodes if n.why), key=lambda n: n.ended or float("inf"))
        if not failed:
            return (status.error or status.detail or "the job failed") + note
        first = failed[0]
        label = f"rank {first.rank}" if first.role == "trainer" else "rollout server"
        detail = f"; {status.detail}" if status.detail else ""
        return (f"node {first.index} ({first.host}, {label}) failed first: {first.why}{detail}{note}\n"
                f"{self._tail(backend, first)}")

    @staticmethod
    def _tail(backend: Backend, node: NodeStatus, lines: int = 50) -> str:
        try:
            return backend.runner(node.index).run(f"tail -n {lines} {shell.path(node.log)}", timeout=20).out
        except SshError as e:
            return f"(log unavailable: {e})"

    def _interrupted(self, job: Job) -> JobState:
        """The launch's process exited mid-launch: stop what it had started, fail the job."""
        handle, outcome = self.handle(job.id), "; no node was started"
        if handle:
            try:
                self.backend(job_spec(job).spec).stop(handle, grace=5)
                outcome = "; everything it had started was stopped"
            except UserError as e:
                outcome = f"; {e}"
        self._fail(job.id, f"the launch was interrupted during {job.state} (the app or CLI running it "
                           f"exited){outcome}")
        return JobState.FAILED

    def reattach(self) -> dict[str, str]:
        """After an app restart: re-check every job that was not finished; each job alone may fail (its entry then
        says why, naming it)."""
        out = {}
        for job in self.store.jobs(active_only=True):
            try:
                out[job.id] = self.refresh(job.id)
            except Exception as e:  # noqa: BLE001 - this job alone; the others are still checked
                out[job.id] = f"error: job {job.id}: {describe(e)}"
        return out

    # -- stop -----------------------------------------------------------------------------------------------------

    def stop(self, job_id: str, grace: float = 10.0) -> dict[str, str]:
        """Stop the job and verify nothing of it is left; returns node → outcome. Raises LaunchError otherwise."""
        job, handle = self.store.job(job_id), self.handle(job_id)
        if not job:
            raise LaunchError(f"no job {job_id!r}")
        if not handle:  # nothing was started
            return {}
        try:
            outcome = self.backend(job_spec(job).spec).stop(handle, grace)
        except UserError as e:
            self.store.set_job(job_id, error=f"stop incomplete: {e}")
            raise LaunchError(f"could not verify that everything stopped: {e}") from None
        for n in self.store.nodes(job_id):
            if n.state in ("pending", "running"):
                self.store.set_node(job_id, n.node_index, state="stopped")
        if job.state.launched:
            self.store.set_job(job_id, state=JobState.STOPPED, ended=time.time())
        if self.collector:
            self.collector.drop(job_id)
        return outcome
