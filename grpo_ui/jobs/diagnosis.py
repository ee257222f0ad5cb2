"""The doctor's report on a job grpo-ui launched, from what the job store kept of it: each node's last log lines,
the metrics from its logging.jsonl, its spec, state and error (the Diagnose page's "a job's node logs")."""

from __future__ import annotations

from grpo_ui.doctor.diagnose import Report, report
from grpo_ui.doctor.logfiles import from_texts
from grpo_ui.jobs.store import Store
from grpo_ui.spec.errors import SpecError
from grpo_ui.spec.yaml_io import spec_from_yaml

LOG_LINES = 5000  # of each node, the last lines the store keeps


def job_report(store: Store, job_id: str) -> Report:
    job = store.job(job_id)
    if job is None:
        raise KeyError(f"no job {job_id!r} in the job store")
    texts = {n.label: "\n".join(line.text for line in store.log_lines(job_id, n.node_index, LOG_LINES))
             for n in store.nodes(job_id)}
    try:
        spec = spec_from_yaml(job.spec_yaml)
    except SpecError:
        spec = None  # written by an older grpo-ui: the logs' own argument dump tells the settings
    snap = from_texts(texts, spec, source="job")
    snap.job_state, snap.job_error = job.state, job.error
    snap.metrics = store.metrics(job_id) or snap.metrics
    return report(snap)
