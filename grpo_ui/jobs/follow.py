"""One monitoring pass over a job: node states, new log lines (each node's, and the job's driver's as a stream of its
own, numbered DRIVER), new metrics from the rank that writes them (swift rlhf's rank 0, megatron rlhf's last rank:
Resolved.logging_node), GPU samples, alerts, and the measured memory peaks and pace kept next to what was predicted
at launch.

In ms-swift's Ray mode Ray runs the ranks as its workers: what they print reaches the driver's log (Ray forwards it,
each line headed by the worker and its node), so the driver's stream holds the lines the other jobs' nodes print;
logging.jsonl is read on the node of the last rank, completions.jsonl on the driver's node (node 0), where ms-swift's
driver writes it.

The app calls ``Watcher.poll`` from a timed fragment and the CLI from a loop; every offset and sample is kept in
SQLite, so a restarted app continues where the last pass stopped. Offsets advance by compare-and-set, so two watchers
(two browsers, the app and the CLI) never store a line twice or skip one. A job that ended while nobody watched gets
one last pass when it is next seen (``reattach`` after a restart), which fetches what it wrote at the end. Each node
fails alone: its error names the job and the host, and the other nodes and jobs go on.
"""

from __future__ import annotations

import posixpath
import time
from dataclasses import dataclass, field

from grpo_ui.backends.remote import pyspy
from grpo_ui.backends.remote.ssh import SshError
from grpo_ui.core import shell
from grpo_ui.core.errors import describe
from grpo_ui.doctor import curves, liveness, stacks
from grpo_ui.doctor.diagnose import Snapshot, diagnose
from grpo_ui.doctor.gpu_window import DUTY_WINDOW_S, PEAK_STEPS
from grpo_ui.doctor.logs import LogTail
from grpo_ui.doctor.metrics import (
    completions_file,
    logging_file,
    parse_completion_line,
    parse_jsonl_line,
    parse_printed_line,
)
from grpo_ui.doctor.snapshot import Alert, job_settings, overdue
from grpo_ui.jobs.memory_loop import record_peaks
from grpo_ui.jobs.service import Jobs
from grpo_ui.jobs.specs import job_spec
from grpo_ui.jobs.store import Job, JobState, Node
from grpo_ui.jobs.time_loop import record_pace
from grpo_ui.launch.plan import DRIVER
from grpo_ui.launch.runfiles import NodeFiles
from grpo_ui.spec.model import JobSpec
from grpo_ui.spec.resolve import Resolved

LOGGING_PATH = "logging_jsonl"  # job_meta key: where the logging rank writes logging.jsonl, once known
STACKS, STACKS_AT = "stacks", "stacks_at"  # job_meta keys: the last py-spy dumps of every rank, and when
STACKS_EVERY_S = 300.0  # while a hang is suspected, stacks are dumped again at most this often
DRAINED = "drained"  # job_meta key: the ended job's last lines and metrics were fetched
ROLLOUT_LEVERS = ("async_generate", "sleep_level", "offload_model", "offload_optimizer", "vllm_gpu_memory_utilization",
                  "move_model_batches")
TRAIN_LEVERS = ("deepspeed", "dataloader_num_workers", "steps_per_generation")


@dataclass
class PollResult:
    """One pass over a job: its state after it (None: no such job), what it brought, and what could not be read
    (each error names the job and the host)."""

    state: JobState | None
    new_lines: int = 0
    new_steps: int = 0
    alerts: list[Alert] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def _settings(spec: JobSpec) -> dict:
    """The settings the doctor's fixes refer to, with the job's values."""
    return {**{k: getattr(spec.rollout, k) for k in ROLLOUT_LEVERS}, **{k: getattr(spec.train, k) for k in TRAIN_LEVERS}}


class Watcher:
    def __init__(self, jobs: Jobs):
        self.jobs = jobs
        self.store = jobs.store

    def needs_poll(self, job: Job) -> bool:
        """Active, or ended without its last lines and metrics fetched yet."""
        return job.state.active or self.store.meta(job.id, DRAINED) is None

    def reattach(self) -> dict[str, list[str]]:
        """After an app restart (or from ``status``): re-check every unfinished job and fetch what ended jobs wrote
        last; job id → the errors that job alone had (each names the job and host), [] when none."""
        out = {}
        for job in self.store.jobs():
            if self.needs_poll(job):
                try:
                    out[job.id] = self.poll(job.id).errors
                except Exception as e:  # noqa: BLE001 - this job alone fails; the message names it
                    out[job.id] = [f"job {job.id}: {describe(e)}"]
        return out

    def poll(self, job_id: str) -> PollResult:
        """Refresh the job, fetch what it wrote, diagnose it; one node's error leaves the others polled."""
        job = self.store.job(job_id)
        if job is None:
            return PollResult(None)
        errors: list[str] = []
        state = job.state
        try:
            eff = job_spec(job)  # parsed and resolved once per job, not on every pass
            spec = eff.spec
            if state.active:
                state = self.jobs.refresh(job_id)
        except Exception as e:  # noqa: BLE001 - this job alone fails; the message names it
            return PollResult(state, errors=[f"job {job_id}: {describe(e)}"])
        ended = state.ended  # decided before tailing: an ended job's files are complete
        driver = self._tail_driver(job_id, spec, errors)
        new_lines, new_steps = len(driver), 0
        nodes = self.store.nodes(job_id)
        for n in nodes:
            try:
                runner = self.jobs.runner(spec, n.node_index)
                lines = [] if eff.ray else self._tail(job_id, n.node_index, runner.read, f"{n.run_dir}/"
                                                      f"{NodeFiles.of_script(n.script).log}")  # Ray mode: no script
                new_lines += len(lines)
                if n.node_rank == eff.logging_node:  # swift rlhf's rank 0, megatron rlhf's last rank
                    new_steps += self._metrics(job_id, eff, n, runner, driver if eff.ray else lines, nodes)
            except Exception as e:  # noqa: BLE001 - one node fails alone, named
                errors.append(f"job {job_id}, {n.label}: {describe(e)}")
        if ended and not errors:
            self.store.set_meta(job_id, DRAINED, "1")
        record_peaks(self.store, job_id, eff)  # measured memory next to the launch's estimate
        if new_steps or ended or self.store.time_measured(job_id) is None:  # the pace moves with each logged step
            record_pace(self.store, job_id, eff)  # measured step time next to the launch's prediction
        alerts = self._diagnose(job_id, eff, self.store.job(job_id), nodes)
        return PollResult(state, new_lines, new_steps, alerts, errors)

    def _tail_driver(self, job_id: str, spec: JobSpec, errors: list[str]) -> list[str]:
        """The new lines of the job's driver (the backend's job_log; none for SSH and Slurm jobs)."""
        handle = self.jobs.handle(job_id)
        source = self.jobs.backend(spec).job_log(handle) if handle else None
        if not source:
            return []
        try:
            return self._tail(job_id, DRIVER, *source)
        except Exception as e:  # noqa: BLE001 - the driver's log fails alone, named
            errors.append(f"job {job_id}, its driver's log: {describe(e)}")
            return []

    def _tail(self, job_id: str, stream: int, read, path: str) -> list[str]:
        """New lines of one log (a node's, or DRIVER) into the store, from its stored offset."""
        start = self.store.offset(job_id, stream, path)
        tail = LogTail(read, path, start)
        lines = tail.poll()
        with self.store.claim(job_id, stream, path, start, tail.offset) as mine:
            if mine:
                self.store.add_log_lines(job_id, stream, lines)
        mark = liveness.progress_mark(tail.pending)  # tqdm's bar moving on an unfinished line is progress too
        if mark and mark != self.store.meta(job_id, f"pending:{stream}"):
            self.store.set_meta(job_id, f"pending:{stream}", mark)
            self.store.set_meta(job_id, f"progress_at:{stream}", str(time.time()))
        return lines if mine else []

    def _metrics(self, job_id: str, eff: Resolved, n: Node, runner, new_lines: list[str], nodes: list[Node]) -> int:
        """New steps from the writing rank's logging.jsonl; while there is none (yet), from the lines it prints on
        stdout (``new_lines``: its node's, or in Ray mode the driver's). A step first taken from stdout is
        overwritten, not repeated, when logging.jsonl brings it. completions.jsonl beside it, or in Ray mode in the
        driver's output_dir on the driver's node (the first)."""
        path = self.store.meta(job_id, LOGGING_PATH) or self._find_logging_path(job_id, eff, n, runner, new_lines)
        new_steps = 0
        if not path or self.store.offset(job_id, n.node_index, path) == 0:  # no logging.jsonl read (yet)
            new_steps = self._store_steps(job_id, [p for p in map(parse_printed_line, new_lines) if p])
        if path:
            new_steps += self._tail_rows(job_id, n, runner, path, parse_jsonl_line, self._store_steps)
            writer = nodes[0] if eff.ray else n
            self._tail_rows(job_id, writer, self.jobs.runner(eff.spec, writer.node_index) if eff.ray else runner,
                            completions_file(path, ray=eff.ray is not None), parse_completion_line,
                            lambda job, rows: self.store.add_completions(job, [r for rs in rows for r in rs]))
        return new_steps

    def _store_steps(self, job_id: str, rows: list) -> int:
        return sum(self.store.add_metrics(job_id, step, values) for step, values in rows if step is not None)

    def _tail_rows(self, job_id: str, n: Node, runner, path: str, parse, store) -> int:
        """Parse the new lines of a file next to the job (logging.jsonl, completions.jsonl) and ``store(job_id,
        rows)`` them with the offset (compare-and-set); 0 when it cannot be read (yet) or another watcher was first."""
        start = self.store.offset(job_id, n.node_index, path)
        tail = LogTail(runner.read, path, start)
        try:
            rows = [r for r in map(parse, tail.poll()) if r]
        except (SshError, OSError):  # unreadable (permissions, a path that is a directory): try again next pass
            return 0
        with self.store.claim(job_id, n.node_index, path, start, tail.offset) as mine:
            return (store(job_id, rows) or 0) if mine else 0

    def _find_logging_path(self, job_id: str, eff: Resolved, n: Node, runner, new_lines: list[str]) -> str | None:
        """From the logging rank's node's log lines (new ones, then the stored window), else the newest versioned run dir written
        since the job started; remembered once found, as those log lines later leave the window."""
        stream = DRIVER if eff.ray else n.node_index
        found = logging_file(new_lines) or logging_file(
            [t for _, t, _ in self.store.log_lines(job_id, stream, 1, contains="The logging file will be")
             + self.store.log_lines(job_id, stream, 1, contains="] logging_path: ")
             + self.store.log_lines(job_id, stream, 1, contains="output_dir: ")])
        spec = eff.spec
        workdir = spec.cluster.nodes[n.node_index].workdir or spec.cluster.workdir or n.run_dir
        if found and not found.startswith(("/", "~/")):
            found = f"{workdir}/{found}"
        handle = self.jobs.handle(job_id)
        if not found and handle:
            since = self.jobs.backend(spec).launched_file(handle, n.node_index)
            found = self._newest_run_dir(eff, runner, workdir, since)
        if found:
            self.store.set_meta(job_id, LOGGING_PATH, found)
        return found

    @staticmethod
    def _newest_run_dir(eff: Resolved, runner, workdir: str, since: str) -> str | None:
        """``<output_dir>/vN-YYYYMMDD-HHMMSS/logging.jsonl`` (or ``<output_dir>/logging.jsonl`` without versions)
        modified after the file ``since`` (the backend wrote it at the start), the newest one: a listing where the
        node's files are, by that machine's clock."""
        out = eff.output_dir
        out = out if out.startswith("/") else "./" + out  # swift's own argument: relative to the workdir
        res = runner.run(f"cd {shell.path(workdir)} && find {shell.quote(out)} -maxdepth 2 -name logging.jsonl "
                         f"-newer {shell.path(since)} -printf '%T@ %p\\n' 2>/dev/null", timeout=20)
        stamped = [line.split(" ", 1) for line in res.out.splitlines() if " " in line]
        if not stamped:
            return None
        path = max(stamped, key=lambda x: float(x[0]))[1]
        return path if path.startswith("/") else posixpath.normpath(f"{workdir}/{path}")

    def _diagnose(self, job_id: str, eff: Resolved, job: Job, nodes: list[Node]) -> list[Alert]:
        now = time.time()
        logs, last_out = {}, {}
        for label, stream in [*((n.label, n.node_index) for n in nodes), ("the driver", DRIVER)]:
            rows = self.store.log_lines(job_id, stream, 400)
            if not rows and stream == DRIVER:
                continue
            logs[label] = [r.text for r in rows]
            marks = [rows[-1].ts] if rows else []  # the last line, or tqdm's bar moving after it
            if moved := self.store.meta(job_id, f"progress_at:{stream}"):
                marks.append(float(moved))
            if marks:
                last_out[label] = max(marks)
        metrics = self.store.metrics(job_id)
        step_times = self.store.step_times(job_id)
        first, last = (step_times[0][1], step_times[-1][1]) if step_times else (None, None)
        spec = eff.spec
        window = self.jobs.collector.window(job_id) if self.jobs.collector else None  # kept as samples arrive
        snap = Snapshot(metrics=metrics, logs=logs, now=now, last_step_at=last, first_step_at=first,
                        last_output_at=last_out, started_at=job.started, gpu_window=window,
                        gpu=[] if window else self.store.gpu_samples(job_id, now - DUTY_WINDOW_S), job_state=job.state,
                        job_error=job.error, settings={**_settings(spec), "world_size": eff.world_size},
                        **job_settings(eff),
                        gpu_by_step=self._step_peaks(job_id, window, step_times))
        snap.stacks = self._stacks(job_id, spec, nodes, snap)
        alerts = diagnose(snap)
        for a in alerts:
            self.store.upsert_alert(job_id, a.id, a.severity, a.title + ": " + a.explanation, a.evidence, a.fix)
        return alerts

    def _step_peaks(self, job_id: str, window, step_times: list[tuple[int, float]]) -> dict:
        """Each GPU's memory peak per step over the last steps (enough to see memory climb): kept by the job's
        running window as samples arrive, else read from the stored samples."""
        if window is not None:
            return window.step_peaks(step_times, history=lambda since: self.store.gpu_samples(job_id, since))
        since = step_times[-PEAK_STEPS][1] if len(step_times) > PEAK_STEPS else 0
        return curves.memory_per_gpu(self.store.gpu_samples(job_id, since), step_times)

    def _stacks(self, job_id: str, spec: JobSpec, nodes: list[Node], snap: Snapshot) -> list[stacks.RankStack]:
        """While a hang is suspected: py-spy dumps of every rank on every node (again at most every
        STACKS_EVERY_S), kept in job_meta for the Monitor page; the last dumps otherwise."""
        kept = self.store.meta(job_id, STACKS) or ""
        taken = float(self.store.meta(job_id, STACKS_AT) or 0)
        if snap.job_state == JobState.RUNNING and overdue(snap) and snap.now - taken > STACKS_EVERY_S:
            kept = self.dump_stacks(job_id, spec, nodes)
            self.store.set_meta(job_id, STACKS, kept)
            self.store.set_meta(job_id, STACKS_AT, str(snap.now))
        return stacks.parse_dumps(kept)

    def dump_stacks(self, job_id: str, spec: JobSpec, nodes: list[Node]) -> str:
        """``py-spy dump`` of every rank of the job on every trainer node (the py-spy preflight installed, else the
        node's python_env's, else PATH's), each dump under a '## node … rank …' line."""
        backend, handle = self.jobs.backend(spec), self.jobs.handle(job_id)
        out = []
        for n in nodes:
            if n.role != "trainer" or not handle:
                continue
            spy = pyspy.py_spy_candidates(spec.cluster.run_root, spec.cluster.nodes[n.node_index].python_env)
            try:
                res = backend.node_shell(handle, n.node_index, n.host).run(
                    pyspy.dump_command(backend.process_marker(handle, n.node_index), spy), timeout=120)
            except SshError as e:
                out.append(f"## {n.label}: unreachable ({e})")
                continue
            out.append(pyspy.label_node(res.out, n.label))
        return "\n".join(out)
