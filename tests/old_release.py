"""The release before the job store was versioned (main at 15245c0), for the upgrade test (tests/test_store_upgrade.py):
its tree (library, pages, templates), taken from this clone's git history, and — run as a script with that tree alone on PYTHONPATH — a job
database written by its own code: jobs launched, followed and sampled by its jobs service, watcher and telemetry,
a draft saved, exactly as a user of that release would have left them.

    PYTHONPATH=OLD_TREE python tests/old_release.py CONFIG.json

CONFIG: {"db": path, "draft": {"name", "yaml"}, "jobs": [{"id", "spec": a job spec as a dict, "until":
"running" (followed until its metrics, alerts, GPU samples and processes, memory peaks and pace are stored; it keeps running) or
"ended" (followed until its last lines are fetched)}]}. Prints nothing on success; exits 1 naming what never came.
"""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

OLD = "15245c0"  # the last release whose job database has no schema version
ROOT = Path(__file__).parent.parent


def old_tree(dest: Path) -> Path:
    """The old release's library, pages, templates and spec fixtures under ``dest``. Fails (never skips) when git
    or the commit is missing: a shallow CI clone must fetch its history (actions/checkout with fetch-depth: 0)."""
    import pytest
    if not shutil.which("git"):
        pytest.fail(f"the upgrade test needs git, to take grpo-ui {OLD} from this clone's history: install git")
    if subprocess.run(["git", "-C", str(ROOT), "cat-file", "-e", f"{OLD}^{{commit}}"], capture_output=True).returncode:
        shallow = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--is-shallow-repository"], capture_output=True,
                                 text=True).stdout.strip() == "true"
        pytest.fail(f"the upgrade test needs commit {OLD} (the release before the store was versioned) in this "
                    f"clone's history, which lacks it" + (": this is a shallow clone; run `git fetch --unshallow` "
                                                          "(CI: fetch-depth: 0)" if shallow else ""))
    tar = subprocess.run(["git", "-C", str(ROOT), "archive", "--format=tar", OLD, "grpo_ui", "views", "templates", "app.py", ".streamlit",
                          "tests/fixtures"],
                         capture_output=True, check=True).stdout
    with tarfile.open(fileobj=io.BytesIO(tar)) as archive:
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
