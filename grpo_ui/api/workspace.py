"""One process's way into grpo-ui (the app's, or a command's): the job store at GRPO_UI_DB (else grpo-ui.db in the
data directory) and the jobs service over it — launch, follow, stop, re-attach — its drafts, each stored job as a
JobView, the doctor's report on a job and the calibration rows of its measurements."""

from __future__ import annotations

import time
from pathlib import Path

from grpo_ui.api.cluster import check_connection
from grpo_ui.api.jobs import JobView
from grpo_ui.backends.base import Progress
from grpo_ui.backends.preflight import HostFacts
from grpo_ui.backends.preflight.status import ConnectionTest
from grpo_ui.backends.remote.ssh import UnknownHostKey
from grpo_ui.core.findings import Finding
from grpo_ui.doctor.diagnose import Report
from grpo_ui.jobs import drafts, memory_loop, time_loop
from grpo_ui.jobs.diagnosis import job_report
from grpo_ui.jobs.drafts import Draft
from grpo_ui.jobs.follow import STACKS, STACKS_AT, PollResult, Watcher
from grpo_ui.jobs.service import Jobs
from grpo_ui.jobs.specs import job_spec
from grpo_ui.jobs.store import Job, Store, StoredDraft, db_path
from grpo_ui.launch.plan import LaunchPlan
from grpo_ui.spec.cluster import Node
from grpo_ui.spec.model import JobSpec
from grpo_ui.spec.yaml_io import spec_to_yaml

__all__ = ["Draft", "Workspace", "db_path"]


class Workspace:
    """The store and the jobs service of one process. With ``telemetry`` the service samples the GPUs of the running
    jobs it follows (the app, ``launch --wait``)."""

    def __init__(self, path: str | Path | None = None, telemetry: bool = False):
        self._store = Store(path)
        self.jobs = Jobs(self._store, telemetry=telemetry)
        self._watcher = Watcher(self.jobs)

    def close(self) -> None:
        """Stop sampling GPUs and close the SSH connections."""
        self.jobs.close()

    # jobs: launch, follow, stop
    def plan(self, spec: JobSpec, job_id: str | None = None) -> LaunchPlan:
        return self.jobs.plan(spec, job_id)

    def launch(self, plan: LaunchPlan, secrets: dict[str, str] | None = None,
               progress: Progress = lambda where, msg: None, preflight: bool = False, override: str | None = None) -> str:
        return self.jobs.launch(plan, secrets, progress, preflight, override)

    def preflight(self, spec: JobSpec, progress: Progress = lambda where, msg: None
                  ) -> tuple[list[HostFacts], list[Finding]]:
        return self.jobs.preflight(spec, progress)

    def stop(self, job_id: str, grace: float = 10.0) -> dict[str, str]:
        return self.jobs.stop(job_id, grace)

    def all_jobs(self) -> list[Job]:
        """Every stored job, the latest launched first."""
        return self._store.jobs()

    def job(self, job_id: str) -> Job | None:
        return self._store.job(job_id)

    def view(self, job_id: str) -> JobView | None:
        job = self._store.job(job_id)
        return JobView(self._store, job) if job else None

    def follow(self, job_id: str) -> PollResult | None:
        """One pass over the job while it is active (and once more when it ended, for its last lines); None when it
        needs none."""
        job = self._store.job(job_id)
        return self._watcher.poll(job_id) if job and self._watcher.needs_poll(job) else None

    def poll(self, job_id: str) -> PollResult:
        return self._watcher.poll(job_id)

    def reattach(self) -> dict[str, list[str]]:
        """After a restart: every unfinished job re-checked, what ended jobs wrote last fetched; job id → the errors
        that job alone had."""
        return self._watcher.reattach()

    def dump_stacks(self, job_id: str) -> None:
        """py-spy dumps of every rank of the job now, kept with it (JobView.stacks)."""
        job = self._store.job(job_id)
        self._store.set_meta(job_id, STACKS, self._watcher.dump_stacks(job_id, job_spec(job).spec,
                                                                       self._store.nodes(job_id)))
        self._store.set_meta(job_id, STACKS_AT, str(time.time()))

    def report(self, job_id: str) -> Report:
        """The doctor's report on what the store kept of the job (its node logs, metrics, spec, state and error)."""
        return job_report(self._store, job_id)

    def check_connection(self, node: Node) -> tuple[ConnectionTest, UnknownHostKey | None]:
        """A connection test of the node's host over this process's SSH connections (grpo_ui.api.cluster)."""
        return check_connection(self.jobs.pool, node)

    # calibration rows of the jobs' measurements
    def memory_rows(self, job_ids: list[str]) -> list[dict]:
        return memory_loop.export_rows(self._store, job_ids)

    def time_rows(self, job_ids: list[str]) -> tuple[list[dict], dict[str, str]]:
        return time_loop.export_rows(self._store, job_ids)

    # drafts: the configs being edited, each saved compare-and-set on its version
    def open_draft(self, draft_id: int | None = None) -> tuple[Draft, str | None]:
        """The draft (else the latest saved, else a new one from the first preset) and a notice, or None."""
        return drafts.open_draft(self._store, draft_id)

    def drafts(self) -> list[StoredDraft]:
        return self._store.drafts()

    def new_draft(self, name: str, spec: JobSpec) -> Draft:
        return drafts.new_draft(self._store, name, spec)

    def save_draft(self, draft: Draft, spec: JobSpec) -> bool:
        """Save ``spec`` over ``draft`` (the version it was read at); False when another editor saved it first."""
        return self._store.save_draft(draft.id, spec_to_yaml(spec), draft.version) is not None

    def rename_draft(self, draft_id: int, name: str) -> None:
        self._store.rename_draft(draft_id, name)

    def delete_draft(self, draft_id: int) -> None:
        self._store.delete_draft(draft_id)
