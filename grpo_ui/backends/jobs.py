"""Jobs run through a Backend and recorded in the store: launch (check, render, preflight, start), refresh, stop.

It has the SSH launcher's shape (``store``, ``launch``, ``refresh``, ``stop``, ``runner``), so the Watcher
and the CLI commands use either; ``launcher_for`` picks by the spec's ``cluster.backend``. The backend's handle is
kept in the job's meta (``backend_handle``), its last status words in ``backend_status``. A queued job is
'starting' in the store: submitted, waiting for its machines.
"""

from __future__ import annotations

import json
import time

from grpo_ui.backends.base import Backend, BackendError, JobStatus
from grpo_ui.backends.slurm import SlurmBackend
from grpo_ui.findings import format_findings
from grpo_ui.remote.launcher import Launcher, LaunchError, launch_checks
from grpo_ui.remote.runner import Runner
from grpo_ui.remote.ssh import Pool, SshError
from grpo_ui.render import render, run_dir
from grpo_ui.spec import JobSpec, spec_from_yaml, spec_to_yaml
from grpo_ui.store import Store

HANDLE, STATUS = "backend_handle", "backend_status"
UNALLOCATED = "(not allocated)"  # a node's host until the backend places it
BACKENDS: dict[str, type[Backend]] = {"slurm": SlurmBackend}
STORE_STATE = {"queued": "starting", "running": "running", "succeeded": "succeeded", "failed": "failed",
               "stopped": "stopped"}


class BackendJobs:
    """Launch, follow and stop jobs through their spec's backend; one instance per app or CLI process."""

    def __init__(self, store: Store, pool: Pool | None = None):
        self.store = store
        self.pool = pool or Pool()

    def backend(self, spec: JobSpec) -> Backend:
        return BACKENDS[spec.cluster.backend](spec, self.pool)

    def runner(self, spec: JobSpec, index: int) -> Runner:
        return self.backend(spec).runner(index)

    def _job(self, job_id: str) -> tuple[dict, JobSpec, dict]:
        job = self.store.job(job_id)
        if not job:
            raise LaunchError(f"no job {job_id!r}")
        return job, spec_from_yaml(job["spec_yaml"]), json.loads(self.store.meta(job_id, HANDLE) or "{}")

    def launch(self, spec: JobSpec, job_id: str | None = None, secrets: dict[str, str] | None = None,
               progress=lambda where, msg: None, preflight: bool = False) -> str:
        """Submit the job; returns its id. With ``preflight`` the backend's checks run first and their errors fail
        the job before anything is submitted. Raises LaunchError with the reasons."""
        job_id = launch_checks(spec, job_id, secrets)
        bundle, backend, where = render(spec, job_id), self.backend(spec), spec.cluster.login
        self.store.create_job(job_id, spec.name, spec_to_yaml(spec), "pending")
        # A node's log is named after its script (node_<rank>.sh → node_<rank>.log), as srun writes it.
        for rank, index in enumerate(bundle.node_files):
            self.store.add_node(job_id, index, UNALLOCATED, "trainer", rank, f"node_{rank}.sh", run_dir(spec, job_id))
        for k, index in enumerate(bundle.rollout_files):
            self.store.add_node(job_id, index, UNALLOCATED, "rollout", None, f"rollout_{k}.sh", run_dir(spec, job_id))
        try:
            if preflight:
                self.store.set_job(job_id, state="preflight")
                progress(where, "preflight")
                errors = [f for f in backend.prepare(bundle) if f.severity == "error"]
                if errors:
                    raise LaunchError("preflight found errors, nothing was started:\n" + format_findings(errors))
            self.store.set_job(job_id, state="starting")
            progress(where, "submitting")
            handle = backend.start(bundle, secrets or {})
        except (LaunchError, BackendError, SshError) as e:
            self.store.set_job(job_id, state="failed", ended=time.time(), error=str(e))
            raise LaunchError(str(e)) from None
        self.store.set_meta(job_id, HANDLE, json.dumps(handle))
        progress(where, f"submitted ({backend.name} job {handle.get('job', '')})")
        return job_id

    def refresh(self, job_id: str) -> str:
        """Poll the backend; update the job, its nodes and the status words; return the job's state."""
        job, spec, handle = self._job(job_id)
        if job["state"] not in ("starting", "running") or not handle:
            return job["state"]
        try:
            status = self.backend(spec).poll(handle)
        except BackendError as e:  # the Watcher reports an unreachable node's SshError and keeps the last state
            raise SshError(spec.cluster.login, str(e)) from None
        self._record(job_id, job, status)
        return self.store.job(job_id)["state"]

    def _record(self, job_id: str, job: dict, status: JobStatus) -> None:
        for n in status.nodes:
            self.store.set_node(job_id, n.index, host=n.host or UNALLOCATED, state=n.state,
                                exit_code=n.exit_code)
        self.store.set_meta(job_id, STATUS, json.dumps({"detail": status.detail, "reason": status.reason,
                                                        "queue_position": status.queue_position}))
        state = STORE_STATE[status.state]
        fields: dict = {"state": state}
        if state == "running" and not job["started"]:
            fields["started"] = time.time()
        if state in ("succeeded", "failed", "stopped"):
            fields.update(ended=time.time(), error=status.error)
        self.store.set_job(job_id, **fields)

    def stop(self, job_id: str, grace: float = 10.0) -> dict[str, str]:
        """Stop the job and verify nothing is left; returns node → outcome. Raises LaunchError otherwise."""
        job, spec, handle = self._job(job_id)
        if not handle:  # never submitted
            return {}
        try:
            outcome = self.backend(spec).stop(handle, grace)
        except (BackendError, SshError) as e:
            self.store.set_job(job_id, error=f"stop incomplete: {e}")
            raise LaunchError(f"could not verify that everything stopped: {e}") from None
        for n in self.store.nodes(job_id):
            if n["state"] in ("pending", "running"):
                self.store.set_node(job_id, n["node_index"], state="stopped")
        if job["state"] in ("starting", "running"):
            self.store.set_job(job_id, state="stopped", ended=time.time())
        return outcome


def launcher_for(spec: JobSpec, store: Store, pool: Pool | None = None) -> Launcher | BackendJobs:
    """The SSH launcher, or the jobs of the spec's backend."""
    return Launcher(store, pool) if spec.cluster.backend == "ssh" else BackendJobs(store, pool)


def launcher_of(job_id: str, store: Store, pool: Pool | None = None) -> Launcher | BackendJobs:
    """The launcher that runs a stored job; LaunchError when there is no such job."""
    job = store.job(job_id)
    if not job:
        raise LaunchError(f"no job {job_id!r}")
    return launcher_for(spec_from_yaml(job["spec_yaml"]), store, pool)
