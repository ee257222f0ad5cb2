"""The release before the job store was versioned (main at 15245c0), for the upgrade test (tests/test_store_upgrade.py):
its tree (library, pages, templates), kept as an archive in tests/fixtures, and — run as a script with that tree alone on PYTHONPATH — a job
database written by its own code: jobs launched, followed and sampled by its jobs service, watcher and telemetry,
a draft saved, exactly as a user of that release would have left them.

    PYTHONPATH=OLD_TREE python tests/old_release.py CONFIG.json

CONFIG: {"db": path, "draft": {"name", "yaml"}, "jobs": [{"id", "spec": a job spec as a dict, "until":
"running" (followed until its metrics, alerts, GPU samples and processes, memory peaks and pace are stored; it keeps running) or
"ended" (followed until its last lines are fetched)}]}. Prints nothing on success; exits 1 naming what never came.
"""

from __future__ import annotations

import json
import sys
import tarfile
import time
from pathlib import Path

OLD = "15245c0"  # the last release whose job database has no schema version
ARCHIVE = Path(__file__).parent / "fixtures" / f"release-{OLD}.tar.xz"


def old_tree(dest: Path) -> Path:
    """The old release's library, pages, templates and spec fixtures under ``dest``, from
    tests/fixtures/release-15245c0.tar.xz — made once with
    ``git archive --format=tar 15245c0 grpo_ui views templates app.py .streamlit tests/fixtures | xz -9`` and kept,
    so the test needs neither git nor a clone's full history (CI may clone shallow)."""
    with tarfile.open(ARCHIVE) as archive:
        archive.extractall(dest, filter="data")
    return dest


def write(config: dict) -> list[str]:
    """Launch and follow the config's jobs with the old release's own code; what never arrived, per job."""
    from grpo_ui.jobs.follow import Watcher
    from grpo_ui.jobs.service import Jobs
    from grpo_ui.jobs.store import Store
    from grpo_ui.spec.yaml_io import validate_spec

    store = Store(config["db"])
    jobs = Jobs(store, telemetry=True)
    watcher, missing = Watcher(jobs), []
    try:
        for job in config["jobs"]:
            job_id = jobs.launch(jobs.plan(validate_spec(job["spec"]), job["id"]))
            wanted = {
                "running": lambda j=job_id: {
                    "running": store.job(j)["state"] == "running", "3 logged steps": len(store.step_times(j)) >= 3,
                    "an alert": bool(store.alerts(j)), "GPU samples": bool(store.gpu_samples(j)),
                    "its GPU processes": bool(store.gpu_processes(j)),
                    "memory peaks": bool(store.memory_peaks(j)), "a measured pace": store.time_measured(j) is not None},
                "ended": lambda j=job_id: {"ended": store.job(j)["state"] in ("succeeded", "failed"),
                                           "its last lines": store.meta(j, "drained") == "1"},
            }[job["until"]]
            deadline = time.monotonic() + 180  # a bound for a broken run only
            while not all(wanted().values()) and time.monotonic() < deadline:
                watcher.poll(job_id)
                time.sleep(0.5)
            missing += [f"job {job_id}: {what}" for what, ok in wanted().items() if not ok]
        store.create_draft(config["draft"]["name"], config["draft"]["yaml"])
    finally:
        jobs.close()  # the telemetry channels end; the running job keeps running on its node
    return missing


if __name__ == "__main__":
    missing = write(json.loads(Path(sys.argv[1]).read_text()))
    if missing:
        print("never stored: " + "; ".join(missing))
        sys.exit(1)
