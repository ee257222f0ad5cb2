"""The job database and the app's files: owner-only modes (tightened when looser), clear errors for a damaged,
locked or shared database (browser and CLI), one name validator for job ids, duplicate ids, and offsets that
advance by compare-and-set."""

import json
import os
import sqlite3
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from grpo_ui.core.private import PrivateFileError, home
from grpo_ui.jobs.service import Jobs, LaunchError
from grpo_ui.jobs.store import DuplicateJob, MemoryAtLaunch, Store, StoreError, Unavailable, schema
from grpo_ui.launch.render import render
from grpo_ui.spec.errors import SpecError
from grpo_ui.spec.yaml_io import validate_spec

ROOT = Path(__file__).parent.parent


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_database_and_its_wal_are_owner_only_and_looser_modes_are_tightened(tmp_path):
    db = tmp_path / "jobs" / "db.sqlite"
    store = Store(db)
    store.create_job("j", "n", "name: n\n")
    assert mode(db.parent) == 0o700 and {mode(p) for p in db.parent.iterdir()} == {0o600}
    assert {p.name for p in db.parent.iterdir()} >= {"db.sqlite", "db.sqlite-wal", "db.sqlite-shm"}
    db.chmod(0o644)
    Store(db)
    assert mode(db) == 0o600


def test_the_data_directory_is_tightened_and_a_shared_one_is_refused(tmp_path, monkeypatch):
    data = tmp_path / "data"
    data.mkdir(mode=0o755)
    data.chmod(0o755)
    monkeypatch.setenv("GRPO_UI_HOME", str(data))
    assert mode(home()) == 0o700
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    with pytest.raises(PrivateFileError, match=f"{shared} is writable by other users"):
        Store(shared / "db.sqlite")
    assert not (shared / "db.sqlite").exists()


def cli(tmp_path, *args):
    env = {**os.environ, "GRPO_UI_DB": str(tmp_path / "db.sqlite"), "GRPO_UI_HOME": str(tmp_path / "home"),
           "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "grpo_ui", *args], capture_output=True, text=True, env=env,
                          timeout=120, cwd=ROOT)


def test_a_damaged_database_is_a_clear_error_with_the_way_out_in_the_cli(tmp_path):
    (tmp_path / "db.sqlite").write_bytes(b"this is not a database" * 200)
    with pytest.raises(StoreError, match="move it aside"):
        Store(tmp_path / "db.sqlite")
    out = cli(tmp_path, "status")
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert f"the job database {tmp_path / 'db.sqlite'} cannot be used" in out.stderr
    assert f"mv {tmp_path / 'db.sqlite'} {tmp_path / 'db.sqlite'}.bad" in out.stderr


def test_a_locked_database_names_what_holds_it(tmp_path):
    Store(tmp_path / "db.sqlite")
    holder = sqlite3.connect(tmp_path / "db.sqlite")
    holder.execute("BEGIN EXCLUSIVE")  # another grpo-ui in the middle of a write
    try:
        with pytest.raises(StoreError, match="locked.*another grpo-ui"):
            Store(tmp_path / "db.sqlite", timeout=0.2).create_job("j", "n", "name: n\n")
    finally:
        holder.rollback()


def local_spec(tmp_path):
    return validate_spec({"train": {"model": "m", "dataset": ["d"], "reward_funcs": ["format"],
                                    "num_generations": 2, "per_device_train_batch_size": 2},
                          "rollout": {"use_vllm": False, "vllm_mode": None},
                          "cluster": {"nodes": [{"host": "localhost"}], "run_root": str(tmp_path / "runs")}})


def test_one_validator_for_names_that_become_paths(tmp_path):
    store = Store(tmp_path / "db.sqlite")
    spec = local_spec(tmp_path)
    for bad in ("..", ".", "../x", "a/b", "", "-rf", "x" * 129, "a b", "$(id)"):
        with pytest.raises(SpecError, match="not usable as a job id"):
            store.create_job(bad, "n", "name: n\n")
        with pytest.raises(SpecError, match="not usable as a job id"):
            render(spec, bad)
        with pytest.raises(SpecError, match="not usable as a job id"):
            Jobs(store).plan(spec, bad or "..")  # an empty id means "make one up"
    with pytest.raises(SpecError, match="name: .*not usable as a job name"):
        validate_spec({"name": "../up"})
    out = cli(tmp_path, "render", str(tmp_path / "none.yaml"), "--out", str(tmp_path / "o"), "--job-id", "../x")
    assert out.returncode == 2 and "--job-id: '../x' is not usable as a job id" in out.stderr
    assert not list(tmp_path.glob("runs*")) and store.jobs() == []


def test_a_duplicate_job_id_is_a_clear_error(tmp_path):
    store = Store(tmp_path / "db.sqlite")
    store.create_job("same", "n", "name: n\n")
    with pytest.raises(DuplicateJob, match="a job with id 'same' already exists"):
        store.create_job("same", "n", "name: n\n")
    with pytest.raises(LaunchError, match="already exists: pick another job id"):
        jobs = Jobs(store)
        jobs.launch(jobs.plan(local_spec(tmp_path), "same"))
    assert not (tmp_path / "runs").exists()


def test_offsets_advance_by_compare_and_set(tmp_path):
    a, b = Store(tmp_path / "db.sqlite"), Store(tmp_path / "db.sqlite")  # two watchers, one database
    a.create_job("j", "n", "name: n\n")
    with a.claim("j", 0, "log", 0, 10) as mine:
        assert mine
        a.add_log_lines("j", 0, ["one", "two"])
    with b.claim("j", 0, "log", 0, 10) as mine:  # b read the same bytes: a stored them already
        assert not mine
    with pytest.raises(RuntimeError), a.claim("j", 0, "log", 10, 20):
        a.add_log_lines("j", 0, ["lost?"])
        raise RuntimeError("the watcher died before committing")
    assert b.offset("j", 0, "log") == 10 and [t for _, t, _ in b.log_lines("j", 0)] == ["one", "two"]


def user_version(path: Path) -> int:
    return sqlite3.connect(path).execute("PRAGMA user_version").fetchone()[0]


def test_a_new_database_starts_at_the_latest_schema_without_a_copy(tmp_path):
    Store(tmp_path / "db.sqlite").create_job("j", "n", "name: n\n")
    assert user_version(tmp_path / "db.sqlite") == schema.LATEST
    assert not list(tmp_path.glob("*.bak"))
    Store(tmp_path / "db.sqlite")  # opened again: nothing to do, nothing copied
    assert not list(tmp_path.glob("*.bak"))


def test_a_database_from_a_newer_release_is_refused_untouched(tmp_path):
    db = tmp_path / "db.sqlite"
    Store(db).create_job("j", "n", "name: n\n")
    newer = sqlite3.connect(db)
    newer.execute(f"PRAGMA user_version = {schema.LATEST + 1}")
    newer.close()
    before = list(sqlite3.connect(db).iterdump())
    with pytest.raises(StoreError, match=rf"{db} cannot be used \(it was written by a newer grpo-ui \(schema version "
                                         rf"{schema.LATEST + 1}; this release reads versions up to {schema.LATEST}\)\):"
                                         r" run the grpo-ui release that wrote it"):
        Store(db)
    out = cli(tmp_path, "status")
    assert out.returncode == 2 and "Traceback" not in out.stderr and "written by a newer grpo-ui" in out.stderr
    assert list(sqlite3.connect(db).iterdump()) == before and user_version(db) == schema.LATEST + 1


def test_a_failed_migration_changes_nothing_and_names_the_copy(tmp_path, monkeypatch):
    """Every migration the file lacks runs in one transaction: one that fails takes the others back with it."""
    db = tmp_path / "db.sqlite"
    Store(db).create_job("j", "n", "name: n\n")

    def adds_a_table(c):
        c.execute("CREATE TABLE next_release (x)")

    def fails(c):
        c.execute("ALTER TABLE no_such_table ADD COLUMN y")
    monkeypatch.setattr(schema, "MIGRATIONS", [*schema.MIGRATIONS, adds_a_table, fails])
    monkeypatch.setattr(schema, "LATEST", schema.LATEST + 2)
    copy = tmp_path / f"db.sqlite.v{schema.LATEST - 2}.bak"
    with pytest.raises(StoreError, match=f"upgrading its schema from version {schema.LATEST - 2} to {schema.LATEST} "
                                         f"failed: no such table: no_such_table.*a copy from before the upgrade is "
                                         f"{copy}"):
        Store(db)
    assert user_version(db) == schema.LATEST - 2
    assert not sqlite3.connect(db).execute("SELECT 1 FROM sqlite_master WHERE name = 'next_release'").fetchone()
    assert [r[0] for r in sqlite3.connect(copy).execute("SELECT id FROM jobs")] == ["j"] and mode(copy) == 0o600


def test_migrations_run_in_order_once_after_a_copy(tmp_path, monkeypatch):
    db = tmp_path / "db.sqlite"
    Store(db).create_job("j", "n", "name: n\n")
    ran = []

    def adds_a_column(c):
        ran.append("column")
        c.execute("ALTER TABLE jobs ADD COLUMN note TEXT")

    def fills_it(c):
        ran.append("fill")
        c.execute("UPDATE jobs SET note = 'from ' || state")
    monkeypatch.setattr(schema, "MIGRATIONS", [*schema.MIGRATIONS, adds_a_column, fills_it])
    monkeypatch.setattr(schema, "LATEST", schema.LATEST + 2)
    store = Store(db)
    Store(db)  # a second process: already at the latest version
    assert ran == ["column", "fill"] and user_version(db) == schema.LATEST
    assert store.conn().execute("SELECT note FROM jobs").fetchone()[0] == "from pending"
    (copy,) = tmp_path.glob("*.bak")
    assert copy.name == f"db.sqlite.v{schema.LATEST - 2}.bak" and user_version(copy) == schema.LATEST - 2


def test_version_2_keeps_why_a_prediction_is_missing_apart_from_the_predictions(tmp_path):
    """A version-1 file (predictions and their absence both JSON documents, {"error": why} for the latter) reads
    back as MemoryAtLaunch / TimeAtLaunch, or Unavailable(why)."""
    db = tmp_path / "db.sqlite"
    c = sqlite3.connect(db, isolation_level=None)
    schema.baseline(c)
    c.execute("PRAGMA user_version = 1")
    estimate = {"model": "m", "roles": [{"role": "trainer", "peak_gib": 17.0, "expected_gib": 20.0, "verdict": "fits"}]}
    c.executemany("INSERT INTO memory_estimates VALUES (?, ?, 1.0)",
                  [("a", json.dumps(estimate)), ("b", json.dumps({"error": "unknown model m"}))])
    c.executemany("INSERT INTO time_estimates VALUES (?, ?, 1.0)",
                  [("a", json.dumps({"step_s": 3.2, "range": [2.4, 4.3], "total_h": 1.5})),
                   ("b", json.dumps({"error": "no GPU speed facts"}))])
    c.close()
    store = Store(db)
    assert store.memory_estimate("a") == MemoryAtLaunch(estimate) and store.memory_estimate("a").role("trainer").peak_gib == 17
    assert store.memory_estimate("b") == Unavailable("unknown model m") and store.memory_estimate("c") is None
    assert (store.time_estimate("a").step_s, store.time_estimate("a").range) == (3.2, (2.4, 4.3))
    assert store.time_estimate("b") == Unavailable("no GPU speed facts")


def test_an_unwritable_data_directory_is_a_clear_error_not_a_traceback(tmp_path):
    """The command line opens errors.log in the data directory before anything else: where it cannot (here a file
    stands where the directory's parent should be, which stops root as well), it says so and what to do."""
    (tmp_path / "a-file").write_text("")
    env = {**os.environ, "GRPO_UI_HOME": str(tmp_path / "a-file" / "home"), "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-m", "grpo_ui", "status"], capture_output=True, text=True, env=env,
                         timeout=120, cwd=ROOT)
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
    assert out.stderr.strip() == (f"grpo-ui's data directory {tmp_path / 'a-file' / 'home'} cannot be written (Not a "
                                  "directory): make it writable, or point GRPO_UI_HOME at a directory of your own")
