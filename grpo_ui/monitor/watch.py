"""One monitoring pass over a job: node states, new log lines, new metrics from rank 0, GPU samples, alerts.

The app calls ``Watcher.poll`` from a timed fragment and the CLI from a loop; every offset and sample is kept in
SQLite, so a restarted app continues where the last pass stopped.
"""

from __future__ import annotations

import time

from grpo_ui.monitor.doctor import Snapshot, diagnose
from grpo_ui.monitor.logs import LogTail
from grpo_ui.monitor.metrics import completions_file, logging_file, parse_completion_line, parse_jsonl_line
from grpo_ui.remote.launcher import Launcher
from grpo_ui.remote.ssh import SshError
from grpo_ui.spec import spec_from_yaml


class Watcher:
    def __init__(self, launcher: Launcher):
        self.launcher = launcher
        self.store = launcher.store

    def poll(self, job_id: str) -> dict:
        """Refresh the job; returns {'state', 'new_lines', 'new_steps', 'alerts', 'errors'}."""
        job = self.store.job(job_id)
        if job is None:
            return {"state": "unknown", "new_lines": 0, "new_steps": 0, "alerts": [], "errors": []}
        spec = spec_from_yaml(job["spec_yaml"])
        errors: list[str] = []
        state = job["state"]
        if state in ("starting", "running"):
            try:
                state = self.launcher.refresh(job_id)
            except SshError as e:
                errors.append(str(e))
        new_lines = new_steps = 0
        nodes = self.store.nodes(job_id)
        for n in nodes:
            try:
                runner = self.launcher.runner(spec, n["node_index"])
                new_lines += self._tail(job_id, n, runner)
                if n["node_rank"] == 0:
                    new_steps += self._metrics(job_id, n, runner)
            except SshError as e:
                errors.append(str(e))
        alerts = self._diagnose(job_id, spec, self.store.job(job_id), nodes)
        return {"state": state, "new_lines": new_lines, "new_steps": new_steps, "alerts": alerts, "errors": errors}

    def _tail(self, job_id: str, n: dict, runner) -> int:
        path = f"{n['run_dir']}/{n['script'].removesuffix('.sh')}.log"
        tail = LogTail(runner.read, path, self.store.offset(job_id, n["node_index"], path))
        lines = tail.poll()
        self.store.add_log_lines(job_id, n["node_index"], lines)
        self.store.set_offset(job_id, n["node_index"], path, tail.offset)
        return len(lines)

    def _metrics(self, job_id: str, n: dict, runner) -> int:
        found = self.store.log_lines(job_id, n["node_index"], 1, contains="The logging file will be saved in") or \
            self.store.log_lines(job_id, n["node_index"], 1, contains="] output_dir: ")
        path = logging_file([found[0][1]]) if found else None
        if not path:
            return 0
        if not path.startswith("/"):
            path = f"{n['run_dir']}/{path}"
        tail = LogTail(runner.read, path, self.store.offset(job_id, n["node_index"], path))
        steps = 0
        for line in tail.poll():
            parsed = parse_jsonl_line(line)
            if parsed and parsed[0] is not None:
                self.store.add_metrics(job_id, parsed[0], parsed[1])
                steps += 1
        self.store.set_offset(job_id, n["node_index"], path, tail.offset)
        comp = completions_file(path)
        ctail = LogTail(runner.read, comp, self.store.offset(job_id, n["node_index"], comp))
        rows = [row for line in ctail.poll() for row in parse_completion_line(line)]
        self.store.add_completions(job_id, rows)
        self.store.set_offset(job_id, n["node_index"], comp, ctail.offset)
        return steps

    def _diagnose(self, job_id: str, spec, job: dict, nodes: list[dict]) -> list[dict]:
        now = time.time()
        logs, last_out = {}, {}
        for n in nodes:
            label = f"node {n['node_index']} ({n['host']})"
            rows = self.store.log_lines(job_id, n["node_index"], 400)
            logs[label] = [r[1] for r in rows]
            if rows:
                last_out[label] = rows[-1][2]
        metrics = self.store.metrics(job_id)
        step_rows = self.store.conn().execute("SELECT MAX(ts) FROM metrics WHERE job_id = ?", (job_id,)).fetchone()
        snap = Snapshot(metrics=metrics, logs=logs, beta=0.04 if spec.train.beta is None else spec.train.beta,
                        now=now, last_step_at=step_rows[0], last_output_at=last_out, started_at=job["started"],
                        gpu=self.store.gpu_samples(job_id, now - 600), job_state=job["state"],
                        job_error=job["error"], server_mode=spec.rollout.vllm_mode == "server")
        alerts = diagnose(snap)
        for a in alerts:
            self.store.upsert_alert(job_id, a.id, a.severity, a.title + ": " + a.explanation, a.evidence, a.fix)
        return [a.__dict__ for a in alerts]
