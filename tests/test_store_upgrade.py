"""Upgrading keeps the job history: a database written by the release before the store was versioned
(tests/old_release.py: main at 15245c0, whose own code launched, followed and sampled the jobs on real sshd hosts)
opens in this release. It is copied aside first, migrated to the latest schema, and every page and the ``status``
command show what the old release showed over the same file — everything read from the store, in the same order;
this release may add fields and lines, and what it works out anew from its own models (a draft's assessment, the
doctor's words) is left out — and the job that was running while the user upgraded is still followed, and stopped,
through its stored handle.

No GPU here: each node's nvidia-smi is the stand-in of tests/test_telemetry.py (nvidia-smi's documented formats); the
job's output is a real ms-swift 4.6 run's stdout (tests/data/captured/swift46_tiny_grpo_stdout.log), printed by the
node's `swift` as far as its third logged step, after which the job waits as a training run between steps does.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from grpo_ui.jobs.follow import Watcher
from grpo_ui.jobs.service import Jobs
from grpo_ui.jobs.store import MemoryAtLaunch, Store, Unavailable
from grpo_ui.jobs.store.schema import LATEST
from tests.old_release import OLD, old_tree
from tests.test_launcher import job_pids
from tests.test_telemetry import nvidia_smi_standin

ROOT = Path(__file__).parent.parent
CAPTURE = ROOT / "tests/data/captured/swift46_tiny_grpo_stdout.log"
PAGES = ("configure", "cluster", "launch", "monitor", "history", "diagnose")
WORKLOAD = """#!/bin/bash
head -n "$WORK_LINES" "$WORK_LOG"
exec sleep "$WORK_SECONDS"
"""
RUNNING, ENDED = "up-running", "up-ended"
# Labels this release renames on purpose, (page, before, now): Monitor's log picker lists a Ray job's driver's log
# beside the nodes', so it picks a log, not a node (its options, a node's log's words, are unchanged).
RENAMED = [("monitor", '"label": "Node"', '"label": "Log"'),
           ("monitor", '"label": "Search this node\'s log window"', '"label": "Search this log\'s window"')]


def spec(host, env_dir: Path, tmp_path: Path, name: str, gpu_model: str | None, lines: int, seconds: int) -> dict:
    return {"name": name, "train": {"model": "Qwen/Qwen2.5-0.5B", "dataset": ["/data/d.jsonl"],
                                    "reward_funcs": ["format"], "num_generations": 2,
                                    "per_device_train_batch_size": 2, "max_steps": 3, "max_completion_length": 16},
            "rollout": {"use_vllm": False, "vllm_mode": None},
            "env": {"WORK_LOG": str(CAPTURE), "WORK_LINES": str(lines), "WORK_SECONDS": str(seconds)},
            "cluster": {"nodes": [{"host": host.name, "address": host.addr, "gpus": [0], "gpu_model": gpu_model,
                                   "python_env": str(env_dir)}], "run_root": str(tmp_path / "runs")}}


def run(tree: Path, db: Path, home: Path, *args: str) -> str:
    """A command of the release in ``tree`` (its library alone on the path) over the database ``db``."""
    env = {**os.environ, "PYTHONPATH": str(tree), "GRPO_UI_DB": str(db), "GRPO_UI_HOME": str(home)}
    done = subprocess.run([sys.executable, *args], cwd=tree, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"{args} under {tree}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout


def copy(db: Path, to: Path) -> Path:
    """A consistent copy of the database (its WAL included), as it is: no schema change."""
    source, target = sqlite3.connect(db), sqlite3.connect(to)
    source.backup(target)
    source.close(), target.close()
    return to


def steady(text: str) -> str:
    """What a page or status says, without what moves with the clock (times of day, durations since a moment —
    minutes run, ETAs —, default job ids stamped with the time) and with each alert as its id: the doctor looks at
    a running job again on every pass, each release with its own rules and words."""
    text = re.sub(r"\d{8}-\d{6}", "<stamp>", text)
    text = re.sub(r"\d{1,2}:\d\d(:\d\d)?", "<time>", text)
    text = re.sub(r"(  \[\w+\] [A-Z0-9-]+): .*", r"\1", text)  # status: an alert's id
    return re.sub(r'"minutes": "[\d.]+"', '"minutes": "<n>"', text)


# What a release works out anew from its own models rather than reads from the store — a draft's assessment
# (memory, step time, findings), the doctor's report — is left out of the comparison; the values the pages show
# from the store (the form's fields, the node table, jobs, metrics, predictions kept at launch) are compared.
ASSESSED = {"Metric", "plotly_chart", "Markdown", "Caption", "Error", "Warning", "Info", "Success", "Expander"}
RECOMPUTED = {"configure": ASSESSED, "launch": ASSESSED, "diagnose": ASSESSED | {"Code"}}
ALERT = re.compile(r":material/\w+: ([A-Z0-9-]+) — ")


def stored(page: str, node: dict | None) -> dict | None:
    """The part of a page's dump (tests/page_dump.py) that shows what the store holds."""
    if node is None or node["kind"] in RECOMPUTED.get(page, ()):
        return None
    if node["kind"] == "Expander" and (alert := ALERT.match(node["label"] or "")):
        return {"kind": "alert", "id": alert[1]}
    if "children" in node:
        return {**node, "children": [c for c in (stored(page, c) for c in node["children"]) if c is not None]}
    return {k: v for k, v in node.items() if k != "options"}  # a picker's choices are the release's, its value stored


def elements(node: dict | None, depth: int = 0) -> list[str]:
    """A dump as what it shows in page order, each with its depth (labelled blocks by kind and label; a table cell by
    cell, so a column a release adds is an element added). Nothing of what shows nothing: an empty placeholder, or an
    unlabelled layout block (a column, a container) itself — its contents are listed."""
    if node is None or node["kind"] == "empty":
        return []
    if "children" in node and node.get("label") is None and node["kind"] in ("Column", "Block"):
        return [e for c in node["children"] for e in elements(c, depth + 1)]
    if node["kind"] == "Dataframe":
        return [f"{depth} [Dataframe]", *(f"{depth + 1} row {k} {json.dumps({c: v})}" for k, row in
                                          enumerate(node["rows"]) for c, v in sorted(row.items()))]
    if "children" not in node:
        return [f"{depth} {json.dumps(node, sort_keys=True)}"]
    return [f"{depth} [{node['kind']}] {node.get('label')}", *(e for c in node["children"] for e in elements(c, depth + 1))]


def renamed(page: str, shown: list[str]) -> list[str]:
    """The elements an earlier release showed on ``page``, with the labels this one renames (RENAMED) as it says them."""
    for where, before, now in RENAMED:
        shown = [e.replace(before, now) for e in shown] if where == page else shown
    return shown


def missing(before: list[str], now: list[str]) -> str | None:
    """The first element shown before that is not shown now, in the same order (a release may add fields and
    lines; it may not lose or change what a stored job or draft showed)."""
    rest = iter(now)
    return next((e for e in before if e not in rest), None)


def lost(before: list[str], now: list[str]) -> str | None:
    """The first element shown before that is not shown now, as many times, in any order: a page's fields and lines
    may be laid out anew (three settings a row instead of two), but none lost or changed."""
    left = Counter(now)
    for e in before:
        if not left[e]:
            return e
        left[e] -= 1
    return None


@pytest.fixture
def old_database(ssh_env, tmp_path):
    """The old release's tree, and a database its own code wrote: a job that ended, a job running on h0 (its nodes, logged steps, an
    alert, GPU samples, memory peaks, both predictions and the measured pace), and a draft."""
    old = old_tree(tmp_path / "old")
    (host,) = ssh_env.add(1)
    env_dir = tmp_path / "env"
    (env_dir / "bin").mkdir(parents=True)
    (env_dir / "bin" / "swift").write_text(WORKLOAD)
    (env_dir / "bin" / "swift").chmod(0o755)
    nvidia_smi_standin(env_dir / "bin", gpus=1)
    db, home = tmp_path / "data" / "grpo-ui.db", tmp_path / "data"
    draft = (old / "tests/fixtures/every_setting.yaml").read_text()  # every setting that release knew
    config = {"db": str(db), "draft": {"name": "kept", "yaml": draft},
              "jobs": [{"id": ENDED, "until": "ended", "spec": spec(host, env_dir, tmp_path, "ended", None, 714, 2)},
                       {"id": RUNNING, "until": "running",  # launched last: the one the pages open
                        "spec": spec(host, env_dir, tmp_path, "running", "NVIDIA H100 80GB HBM3", 708, 900)}]}
    (tmp_path / "config.json").write_text(json.dumps(config))
    run(old, db, home, str(ROOT / "tests/old_release.py"), str(tmp_path / "config.json"))
    yield old, db, home
    jobs = Jobs(Store(db))
    for job in jobs.store.jobs(active_only=True):  # whatever a failed test left running: no orphan
        jobs.stop(job.id, grace=3)
    jobs.close()


@pytest.mark.slow
def test_a_database_of_the_release_before_opens_migrated_and_shows_the_same(old_database, tmp_path):
    old, db, home = old_database
    assert sqlite3.connect(db).execute("PRAGMA user_version").fetchone()[0] == 0, f"{OLD} wrote no schema version"
    before = copy(db, tmp_path / "before.db")  # the old release reads its own file; this one upgrades the original
    old_pages, new_pages = tmp_path / "old-pages.json", tmp_path / "new-pages.json"
    old_status = [run(old, before, home, "-m", "grpo_ui", "status", *job) for job in ([], [RUNNING], [ENDED])]
    run(old, before, home, str(ROOT / "tests/page_dump.py"), str(old), str(old_pages), *PAGES)

    store = Store(db)
    assert sqlite3.connect(db).execute("PRAGMA user_version").fetchone()[0] == LATEST
    kept = db.with_name(f"{db.name}.v0.bak")
    assert sqlite3.connect(kept).execute("PRAGMA user_version").fetchone()[0] == 0
    assert {r[0] for r in sqlite3.connect(kept).execute("SELECT id FROM jobs")} == {RUNNING, ENDED}
    assert isinstance(store.memory_estimate(RUNNING), MemoryAtLaunch) and store.time_estimate(RUNNING).step_s > 0
    assert store.time_estimate(ENDED) == Unavailable("no step time: the trainer nodes' GPU model is not set; choose it "
                                                     "(cluster.nodes[0].gpu_model) from the catalogue")
    new_status = [run(ROOT, db, home, "-m", "grpo_ui", "status", *job) for job in ([], [RUNNING], [ENDED])]
    run(ROOT, db, home, str(ROOT / "tests/page_dump.py"), str(ROOT), str(new_pages), *PAGES)

    for before, now in zip(old_status, new_status, strict=True):
        assert missing(steady(before).splitlines(), steady(now).splitlines()) is None, (before, now)
    assert f"{RUNNING}: running" in new_status[1] and "NO-LEARNING-SIGNAL" in new_status[1]
    shown_old, shown_new = (json.loads(steady(p.read_text())) for p in (old_pages, new_pages))
    for page in PAGES:
        assert not shown_new[page]["exception"] and "Something went wrong" not in json.dumps(shown_new[page]), page
        for part in ("main", "sidebar"):
            before, now = (elements(stored(page, shown[page][part])) for shown in (shown_old, shown_new))
            assert len(before) > 2 or part == "sidebar", (page, before)
            before = renamed(page, before)
            assert lost(before, now) is None, (page, part, lost(before, now))
    assert '"id": "NO-LEARNING-SIGNAL"' in json.dumps(new_monitor := stored("monitor", shown_new["monitor"]["main"]))
    assert '"value": "running"' in json.dumps(new_monitor) and '"nvidia-smi peak GiB": "59.8"' in json.dumps(new_monitor)

    jobs = Jobs(store)  # the running job, re-attached by this release through the handle the old one stored
    assert Watcher(jobs).reattach() == {RUNNING: []}
    assert store.job(RUNNING).state == "running" and job_pids(RUNNING, store)
    assert set(jobs.stop(RUNNING, grace=3).values()) <= {"stopped", "killed"}
    assert store.job(RUNNING).state == "stopped" and not job_pids(RUNNING, store)
    jobs.close()
