"""Fault injection on the sshd test hosts: a full disk on a node, SSH killed in the middle of a launch and of a log
stream, the CLI killed in the middle of a launch, broken jobs next to healthy ones, two watchers at once, and a job
that ended while nobody watched. Each fault stays with its job and host; afterwards no process of any job is left
(found by the launch's GRPO_UI_RUN token, never by name) and no log line is lost or stored twice.

The workload is a small real program put on the hosts' PATH as `swift` (tests/test_jobs.py)."""

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from grpo_ui.backends.remote.runner import SshRunner
from grpo_ui.jobs.follow import Watcher
from grpo_ui.jobs.service import Jobs, LaunchError
from grpo_ui.jobs.store import Store
from grpo_ui.spec.yaml_io import spec_to_yaml, validate_spec
from tests.hosts import stop_active_jobs
from tests.test_launcher import env_dir, job_pids, jobs, launch, workload_spec  # noqa: F401 - fixtures
from tests.wait import wait_for

ROOT = Path(__file__).parent.parent
CHATTY = """#!/bin/bash
exec python3 -c 'import os, sys, time
time.sleep(float(os.environ.get("WAIT_FIRST", "0")))
for i in range(int(os.environ.get("LINES_OUT", "0"))):
    print(f"line {i} " + "x" * int(os.environ.get("LINE_PAD", "0")))
sys.stdout.flush()
time.sleep(float(os.environ.get("WORK_SECONDS", "1")))'
"""


def with_env(spec, **env):
    return validate_spec({**spec.model_dump(), "env": {**spec.env, **env}})


def stored_lines(store: Store, job: str, node: int = 0) -> list[str]:
    return [t for _, t, _ in store.log_lines(job, node, 100_000)]


def complete_lines(path: Path) -> list[str]:
    """The log's whole lines, as a watcher can store them (an unfinished last line waits for its newline)."""
    data = path.read_bytes()
    return data[: data.rfind(b"\n") + 1].decode().splitlines()


def test_broken_jobs_each_fail_alone_and_status_shows_every_job(jobs, ssh_env, env_dir, tmp_path):  # noqa: F811
    """A full disk (an empty exit_code file), a run directory that cannot be read, an unreachable host, next to a
    healthy job: `status` lists all four, each problem named with its job and host; the full disk's log is stored
    line for line as far as it got; nothing is left running."""
    # a full disk: a 64 KiB tmpfs over the run root of one host; its job writes lines until it is full. Mounted
    # before the hosts start: each sshd runs in a mount namespace copied when it starts.
    disk = tmp_path / "full" / "runs"
    disk.mkdir(parents=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(disk)], check=True)
    try:
        ok, full, unreadable, gone = ssh_env.add(4)
        (env_dir / "bin" / "swift").write_text(CHATTY)
        healthy = launch(jobs, workload_spec([ok], env_dir, tmp_path / "ok", seconds=120), "f-healthy")
        full_job = launch(jobs, with_env(workload_spec([full], env_dir, tmp_path / "full", seconds=0),
                                            LINES_OUT="100000", WAIT_FIRST="1"), "f-disk-full")
        assert wait_for(lambda: (disk / full_job / "exit_code.0").exists() and not job_pids(full_job, jobs.store))
        lost = launch(jobs, workload_spec([unreadable], env_dir, tmp_path / "unreadable", seconds=0.5), "f-lost")
        assert wait_for(lambda: (tmp_path / "unreadable/runs" / lost / "exit_code.0").exists())
        moved = tmp_path / "unreadable/runs" / lost
        moved.rename(moved.with_name("elsewhere"))
        moved.write_text("not a directory any more")
        far = launch(jobs, workload_spec([gone], env_dir, tmp_path / "gone", seconds=120), "f-unreachable")
        gone.kill_sshd()
        env = {**os.environ, "GRPO_UI_DB": str(tmp_path / "db.sqlite"), "GRPO_UI_HOME": str(tmp_path / "home"),
               "GRPO_UI_SSH_CONFIG": str(ssh_env.ssh_config), "GRPO_UI_KNOWN_HOSTS": str(ssh_env.known_hosts)}
        out = subprocess.run([sys.executable, "-m", "grpo_ui", "status"], capture_output=True, text=True, env=env,
                             timeout=180, cwd=ROOT)
        assert out.returncode == 0 and "Traceback" not in out.stderr, out.stdout + out.stderr
        lines = out.stdout.splitlines()
        state = {line.split()[0]: line.split()[1] for line in lines if not line.startswith(" ")}
        assert state == {healthy: "running", full_job: "failed", lost: "failed", far: "running"}, out.stdout
        assert any(f"job {far}, node 0 ({gone.name}): {gone.name}: cannot connect" in line for line in lines), out.stdout
        store = Store(tmp_path / "db.sqlite")
        assert "its exit_code.0 file is empty: the disk of " + full.name + " may be full" in store.job(full_job).error
        assert store.job(lost).error.startswith(f"node 0 ({unreadable.name}, rank 0) failed first: process gone")
        got, written = stored_lines(store, full_job), complete_lines(disk / full_job / "node_0.log")
        assert len(written) > 1000 and got == written[-5000:] and store.log_lines(full_job, 0, 1)[0][0] == len(written)
        assert not job_pids(full_job, store) and not job_pids(lost, store)
        gone.start_sshd()
    finally:
        subprocess.run(["umount", str(disk)], check=False)
    assert jobs.stop(far, grace=3) == {gone.name: "stopped"} and not job_pids(far, jobs.store)


KILLS_SSH = """# activated by the node script before it reads its secrets: SSH on this host dies mid-launch
kill -9 $(ps -o pid= --ppid "$KILL_SSHD") "$KILL_SSHD" 2> /dev/null
export PATH="$PY_ENV/bin:$PATH"
"""


def test_ssh_killed_mid_launch_leaves_nothing_once_the_host_answers_again(jobs, ssh_env, env_dir, tmp_path):  # noqa: F811
    """h1's SSH (listener and connection) dies while its start command waits for the script to read its secrets:
    the launch fails naming h1, stops h0, and says h1 could not be checked; once h1 answers, stop leaves nothing,
    and no secrets file stayed behind."""
    h0, h1 = ssh_env.add(2)
    killer_env = tmp_path / "killer-env"
    (killer_env / "bin").mkdir(parents=True)
    (killer_env / "bin" / "swift").symlink_to(env_dir / "bin" / "swift")
    (killer_env / "bin" / "activate").write_text(KILLS_SSH)
    spec = workload_spec([h0, h1], env_dir, tmp_path, seconds=120, secret_env=["API_TOKEN"])
    nodes = [n.model_dump() for n in spec.cluster.nodes]
    nodes[1].update(python_env=str(killer_env), env={"KILL_SSHD": str(h1.pid())})
    spec = validate_spec({**spec.model_dump(), "cluster": {**spec.cluster.model_dump(), "nodes": nodes}})
    with pytest.raises(LaunchError) as e:
        launch(jobs, spec, "f-ssh-dies", secrets={"API_TOKEN": "t0ken"})
    assert f"{h1.name}: the connection dropped while a command ran" in str(e.value)
    assert f"could not verify that nothing is left on {h1.name}" in str(e.value)
    assert jobs.store.job("f-ssh-dies").state == "failed"
    h1.start_sshd()
    assert jobs.stop("f-ssh-dies", grace=3)[h1.name] in ("stopped", "killed")
    assert not job_pids("f-ssh-dies", jobs.store)
    assert not list((tmp_path / "runs" / "f-ssh-dies").glob("*secrets*"))


def test_ssh_killed_mid_stream_loses_and_repeats_no_line_and_two_watchers_agree(jobs, ssh_env, env_dir,  # noqa: F811
                                                                                  tmp_path, monkeypatch):
    """A 3 MiB log is read in 1 MiB pieces; the connection dies after the first piece: that pass reports the host,
    the next one reconnects and stores every line once. Then two watchers (two stores on one database, as two
    browsers or the app and the CLI) poll the growing log at once: still every line once."""
    (h,) = ssh_env.add(1)
    (env_dir / "bin" / "swift").write_text(CHATTY)
    job = launch(jobs, with_env(workload_spec([h], env_dir, tmp_path, seconds=120), LINES_OUT="30000",
                                   LINE_PAD="100"), "f-stream")
    log = tmp_path / "runs" / job / "node_0.log"
    assert wait_for(lambda: log.exists() and log.read_bytes().count(b"\n") == 30000)
    real_read, calls = SshRunner.read, []

    def read_then_cut(self, path, offset, limit):
        data = real_read(self, path, offset, limit)
        calls.append(offset)
        if len(calls) == 1:
            h.kill_sshd()  # mid-stream: the listener and this connection die after the first piece
            h.start_sshd()
        return data
    monkeypatch.setattr(SshRunner, "read", read_then_cut)
    first = Watcher(jobs).poll(job)
    assert first.errors and first.errors[0].startswith(f"job {job}, node 0 ({h.name}): {h.name}: ")
    monkeypatch.setattr(SshRunner, "read", real_read)
    assert Watcher(jobs).poll(job).errors == []
    assert stored_lines(jobs.store, job) == complete_lines(log)[-5000:]
    assert jobs.store.log_lines(job, 0, 1)[0][0] == 30000  # line numbers: every line counted once

    others = [Jobs(Store(tmp_path / "db.sqlite")) for _ in range(2)]
    stop = threading.Event()

    def watch(lz):
        while not stop.is_set():
            Watcher(lz).poll(job)
    threads = [threading.Thread(target=watch, args=(lz,)) for lz in others]
    for t in threads:
        t.start()
    with open(log, "a") as f:
        for k in range(3000):
            f.write(f"appended {k}\n")
            f.flush()
            if k % 100 == 0:
                time.sleep(0.1)  # the watchers poll while the log grows
    stop.set()
    for t in threads:
        t.join()
    Watcher(jobs).poll(job)
    assert stored_lines(jobs.store, job) == complete_lines(log)[-5000:]
    assert jobs.store.log_lines(job, 0, 1)[0][0] == 33000
    for lz in others:
        lz.close()


def test_the_cli_killed_mid_launch_is_cleaned_up_on_reattach(ssh_env, env_dir, tmp_path):  # noqa: F811
    """The CLI is killed while it waits for a rollout server that never gets healthy: the job is left 'starting'
    with the server running. Reattach sees that its launch's process is gone, stops what it started and fails it."""
    trainer, roll = ssh_env.add(2)
    (env_dir / "bin" / "swift").write_text('#!/bin/bash\nexec sleep 300\n')  # never answers /health/
    base = workload_spec([trainer], env_dir, tmp_path)
    nodes = [n.model_dump() for n in base.cluster.nodes] + [
        {"host": roll.name, "address": roll.addr, "gpus": [0], "python_env": str(env_dir), "role": "rollout"}]
    spec = validate_spec({**base.model_dump(), "rollout": {"use_vllm": True, "vllm_mode": "server",
                                                           "vllm_server_timeout": 240}, "server": {"port": 18112},
                          "cluster": {**base.cluster.model_dump(), "nodes": nodes}})
    (tmp_path / "job.yaml").write_text(spec_to_yaml(spec))
    env = {**os.environ, "GRPO_UI_DB": str(tmp_path / "db.sqlite"), "GRPO_UI_HOME": str(tmp_path / "home"),
           "GRPO_UI_SSH_CONFIG": str(ssh_env.ssh_config), "GRPO_UI_KNOWN_HOSTS": str(ssh_env.known_hosts),
           "PYTHONUNBUFFERED": "1"}
    cli = subprocess.Popen([sys.executable, "-m", "grpo_ui", "launch", str(tmp_path / "job.yaml"), "--job-id",
                            "f-cli-killed", "--no-preflight"], env=env, cwd=ROOT, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
    try:
        for line in cli.stdout:  # the server started; the CLI now waits for its /health/
            if f"{roll.name}: waiting for /health/" in line:
                break
        os.kill(cli.pid, signal.SIGKILL)
        cli.wait(10)
        store = Store(tmp_path / "db.sqlite")
        assert store.job("f-cli-killed").state == "starting" and job_pids("f-cli-killed", store)
        lz = Jobs(store)
        assert lz.reattach() == {"f-cli-killed": "failed"}
        assert "interrupted during starting" in store.job("f-cli-killed").error
        assert not job_pids("f-cli-killed", store)  # the server, and the health probe on the trainer's host
        lz.close()
    finally:
        cli.kill()
        stop_active_jobs(tmp_path / "db.sqlite")


def test_a_job_that_ended_unwatched_is_fetched_once_after_a_restart(jobs, ssh_env, env_dir, tmp_path):  # noqa: F811
    (h,) = ssh_env.add(1)
    (env_dir / "bin" / "swift").write_text(CHATTY)
    job = launch(jobs, with_env(workload_spec([h], env_dir, tmp_path, seconds=0.5), LINES_OUT="200"), "f-unwatched")
    assert wait_for(lambda: (tmp_path / "runs" / job / "exit_code.0").exists())
    jobs.close()  # the app is gone; the job ends meanwhile
    again = Jobs(Store(tmp_path / "db.sqlite"))
    assert Watcher(again).reattach() == {job: []}
    assert again.store.job(job).state == "succeeded"
    assert stored_lines(again.store, job) == [f"line {i} " for i in range(200)]
    assert Watcher(again).reattach() == {}  # fetched once: nothing left to do for it
    again.close()
