"""Launch, follow, stop and re-attach a job on real sshd test hosts, through the jobs service and the SSH backend.

The workload is a small real Python program put on the hosts' PATH as `swift` (the real ms-swift runs in the
end-to-end tests); it prints its rank, runs for WORK_SECONDS and exits with WORK_EXIT.
"""

import json
import os
import shutil
import stat
import subprocess
import time
from pathlib import Path

import pytest

from grpo_ui.backends.remote.ssh import Connection
from grpo_ui.jobs.service import HANDLE, Jobs, LaunchError
from grpo_ui.jobs.store import MemoryAtLaunch, Store
from grpo_ui.spec.yaml_io import validate_spec
from tests.hosts import stop_active_jobs
from tests.tiny_job import SWIFT_VENV
from tests.wait import wait_for

WORKLOAD = """#!/bin/bash
exec python3 -c 'import os, sys, time
print("rank", os.environ["NODE_RANK"], "of", os.environ["NNODES"], "master", os.environ["MASTER_ADDR"], flush=True)
if os.environ.get("SEEN_AT"):  # where the test wants the secret the job received (never in its log)
    open(os.environ["SEEN_AT"] + os.environ["NODE_RANK"], "w").write(os.environ.get("API_TOKEN", ""))
time.sleep(float(os.environ.get("WORK_SECONDS", "1")))
sys.exit(int(os.environ.get("WORK_EXIT", "0")))' "$@"
"""


def launch(jobs: Jobs, spec, job_id: str, **kwargs) -> str:
    """Plan the job once and launch that plan, as the Launch page and the CLI do."""
    return jobs.launch(jobs.plan(spec, job_id), **kwargs)


def handle_of(store: Store, job_id: str) -> dict | None:
    return json.loads(store.meta(job_id, HANDLE) or "null")


def job_pids(job_id: str, store: Store) -> list[int]:
    """Processes on this machine (all test hosts share its process table) that belong to this launch of the job;
    other test sessions on the machine may run jobs of the same id at the same time."""
    handle = handle_of(store, job_id)
    if not handle:  # nothing was started
        return []
    prefix, suffix = f"GRPO_UI_RUN={job_id}/".encode(), f"@{handle['tag']}".encode()
    found = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                entries = (d / "environ").read_bytes().split(b"\0")
            except OSError:
                continue
            if any(e.startswith(prefix) and e.endswith(suffix) for e in entries):
                found.append(int(d.name))
    return found


@pytest.fixture
def env_dir(tmp_path):
    d = tmp_path / "env"
    (d / "bin").mkdir(parents=True)
    (d / "bin" / "swift").write_text(WORKLOAD)
    (d / "bin" / "swift").chmod(0o755)
    return d


def workload_spec(hosts, env_dir, tmp_path, seconds=1.0, exit_code=0, **extra):
    nodes = [{"host": h.name, "address": h.addr, "gpus": [0], "python_env": str(env_dir)} for h in hosts]
    return validate_spec({
        "name": "workload", "train": {"model": "Qwen/Qwen2.5-0.5B", "dataset": ["/data/d.jsonl"], "reward_funcs": ["format"],
                                      "num_generations": 2, "per_device_train_batch_size": 2},
        "rollout": {"use_vllm": False, "vllm_mode": None},
        "env": {"WORK_SECONDS": str(seconds), "WORK_EXIT": str(exit_code), "ACCELERATE_USE_CPU": "true"},  # no GPU here
        "cluster": {"nodes": nodes, "run_root": str(tmp_path / "runs")}, **extra})


@pytest.fixture
def jobs(ssh_env, tmp_path):
    jobs = Jobs(Store(tmp_path / "db.sqlite"))
    yield jobs
    jobs.close()
    stop_active_jobs(tmp_path / "db.sqlite")


def test_two_hosts_run_to_success_with_secrets_kept_out_of_scripts(jobs, ssh_env, env_dir, tmp_path, monkeypatch):
    """The secret reaches both jobs through a 0600 file that is gone once they run: no command line, no file of the
    run directory, no log and no byte of the job database holds it."""
    hosts = ssh_env.add(2)
    commands, run = [], Connection.run
    monkeypatch.setattr(Connection, "run", lambda self, command, *a, **k: (commands.append(command),
                                                                           run(self, command, *a, **k))[1])
    spec = workload_spec(hosts, env_dir, tmp_path, seconds=1, secret_env=["API_TOKEN"])
    spec = validate_spec({**spec.model_dump(), "env": {**spec.env, "SEEN_AT": str(tmp_path / "seen")}})
    with pytest.raises(LaunchError, match="API_TOKEN"):
        launch(jobs, spec, "wl-secret-missing")
    progress, modes = [], []
    secret = "s3cr'et $(touch /tmp/grpo-ui-pwned) `id`"
    rd = tmp_path / "runs" / "wl-ok"

    def watch(host, msg):  # the secrets files while they exist (before the scripts have read them)
        progress.append((host, msg))
        modes.extend(stat.S_IMODE(p.stat().st_mode) for p in rd.glob("*.secrets.env") if p.exists())
    job = launch(jobs, spec, "wl-ok", secrets={"API_TOKEN": secret}, progress=watch)
    assert not list(rd.glob("*secrets*")), "a secrets file stayed on a node after the start"
    nodes = jobs.store.nodes(job)
    assert [n.state for n in nodes] == ["running", "running"]
    assert all(n["pid"] == n["pgid"] for n in handle_of(jobs.store, job)["nodes"])  # each its own session
    assert {h for h, m in progress if m.startswith("running")} == {h.name for h in hosts}
    assert wait_for(lambda: jobs.refresh(job) == "succeeded")
    assert [(tmp_path / f"seen{r}").read_text() for r in (0, 1)] == [secret, secret]  # the jobs got the value
    assert set(modes) <= {0o600} and not os.path.exists("/tmp/grpo-ui-pwned")
    assert all("s3cr" not in p.read_text() for p in rd.iterdir())  # scripts, logs, pid and exit files
    assert commands and not any("s3cr" in c for c in commands)  # it travelled in the SSH session's input
    assert not any(b"s3cr" in p.read_bytes() for p in tmp_path.glob("db.sqlite*"))
    assert "rank 1 of 2 master " + hosts[0].addr in (rd / "node_1.log").read_text()
    assert [n.exit_code for n in jobs.store.nodes(job)] == [0, 0]
    assert not job_pids(job, jobs.store)


def test_stop_mid_run_leaves_nothing(jobs, ssh_env, env_dir, tmp_path):
    hosts = ssh_env.add(2)
    job = launch(jobs, workload_spec(hosts, env_dir, tmp_path, seconds=120), "wl-stop")
    assert wait_for(lambda: len(job_pids(job, jobs.store)) >= 4)  # bash + python per node
    outcome = jobs.stop(job, grace=5)
    assert set(outcome) == {h.name for h in hosts} and all(o in ("stopped", "killed") for o in outcome.values())
    assert not job_pids(job, jobs.store)
    assert jobs.store.job(job).state == "stopped"


def test_partial_launch_failure_stops_what_started_and_names_the_host(jobs, ssh_env, env_dir, tmp_path):
    hosts = ssh_env.add(2)
    spec = workload_spec(hosts, env_dir, tmp_path, seconds=120)
    nodes = [n.model_dump() for n in spec.cluster.nodes]
    nodes[1]["python_env"] = "/nonexistent/env"  # swift is not found there: that node exits at once
    spec = validate_spec({**spec.model_dump(), "cluster": {**spec.cluster.model_dump(), "nodes": nodes}})
    with pytest.raises(LaunchError) as e:
        launch(jobs, spec, "wl-partial")
    assert f"{hosts[1].name}: node_1.sh did not start" in str(e.value) and "swift: command not found" in str(e.value)
    assert jobs.store.job("wl-partial").state == "failed"
    assert wait_for(lambda: not job_pids("wl-partial", jobs.store), 10)


def test_unreachable_host_fails_before_anything_starts(jobs, ssh_env, env_dir, tmp_path):
    hosts = ssh_env.add(1)
    spec = workload_spec(hosts, env_dir, tmp_path)
    nodes = [n.model_dump() for n in spec.cluster.nodes] + [{"host": f"10.{ssh_env.subnet}.0.251", "user": "root",
                                                             "gpus": [0], "python_env": str(env_dir)}]
    spec = validate_spec({**spec.model_dump(), "cluster": {**spec.cluster.model_dump(), "nodes": nodes}})
    with pytest.raises(LaunchError, match=f"10.{ssh_env.subnet}.0.251"):
        launch(jobs, spec, "wl-unreachable")
    assert not job_pids("wl-unreachable", jobs.store)


def test_restart_reattaches_and_a_node_killed_from_outside_fails_the_job(ssh_env, env_dir, tmp_path):
    hosts = ssh_env.add(2)
    first = Jobs(Store(tmp_path / "db.sqlite"))
    job = launch(first, workload_spec(hosts, env_dir, tmp_path, seconds=120), "wl-reattach")
    first.close()
    del first  # the app goes away; the job does not
    again = Jobs(Store(tmp_path / "db.sqlite"))
    assert again.reattach() == {job: "running"}
    node1 = next(n for n in again.store.nodes(job) if n.node_rank == 1)
    workload = [p for p in job_pids(job, again.store) if b"python3" in Path(f"/proc/{p}/cmdline").read_bytes()
                and f"{job}/trainer1".encode() in Path(f"/proc/{p}/environ").read_bytes()]
    os.kill(workload[0], 9)
    assert wait_for(lambda: again.refresh(job) == "failed")
    error = again.store.job(job).error
    assert error.startswith(f"node {node1.node_index} ({hosts[1].name}, rank 1) failed first: exit code 137")
    assert wait_for(lambda: not job_pids(job, again.store), 15)
    again.close()


def test_local_node_runs_through_the_same_backend_without_ssh(env_dir, tmp_path):
    """The dashboard's own machine ('localhost'): subprocess instead of SSH, same run dir, pid and exit-code files."""
    jobs = Jobs(Store(tmp_path / "db.sqlite"))
    spec = validate_spec({**workload_spec([], env_dir, tmp_path).model_dump(), "cluster": {
        "run_root": str(tmp_path / "runs"), "nodes": [{"host": "localhost", "gpus": [0], "python_env": str(env_dir)}]}})
    job = launch(jobs, spec, "local-ok")
    assert wait_for(lambda: jobs.refresh(job) == "succeeded")
    assert (tmp_path / "runs/local-ok/exit_code.0").read_text().strip() == "0"
    assert (tmp_path / "runs/local-ok/node_0.pid").exists()
    spec_long = validate_spec({**spec.model_dump(), "env": {"WORK_SECONDS": "120", "WORK_EXIT": "0"}})
    job = launch(jobs, spec_long, "local-stop")
    assert wait_for(lambda: len(job_pids(job, jobs.store)) >= 2)
    assert jobs.stop(job, grace=5) == {"localhost": "stopped"}
    assert not job_pids(job, jobs.store)


SERVER_WORKLOAD = """#!/bin/bash
if [ "$1" = rollout ]; then  # stands in for `swift rollout`: a real HTTP server with /health/ on --port
  port=$(echo "$@" | sed 's/.*--port \\([0-9]*\\).*/\\1/')
  [ -n "$ROLLOUT_BROKEN" ] && { echo "failed to load the model" >&2; exit 1; }
  exec python3 -c 'import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == "/health/" else 404); self.end_headers()
    def log_message(self, *a): pass
http.server.HTTPServer(("0.0.0.0", int(sys.argv[1])), H).serve_forever()' "$port"
fi
exec sleep 1
"""


def server_spec(trainer, roll, env_dir, tmp_path, broken=False, timeout=20):
    base = workload_spec([trainer], env_dir, tmp_path)
    nodes = [n.model_dump() for n in base.cluster.nodes] + [
        {"host": roll.name, "address": roll.addr, "gpus": [0], "python_env": str(env_dir), "role": "rollout"}]
    return validate_spec({**base.model_dump(), "rollout": {"use_vllm": True, "vllm_mode": "server",
                                                           "vllm_server_timeout": timeout},
                          "server": {"port": 18111}, "env": {"ROLLOUT_BROKEN": "1"} if broken else {},
                          "cluster": {**base.cluster.model_dump(), "nodes": nodes}})


def test_rollout_servers_start_first_and_must_be_healthy(jobs, ssh_env, env_dir, tmp_path):
    trainer, roll = ssh_env.add(2)
    (env_dir / "bin" / "swift").write_text(SERVER_WORKLOAD)
    progress = []
    job = launch(jobs, server_spec(trainer, roll, env_dir, tmp_path), "srv-ok",
                          progress=lambda host, msg: progress.append((host, msg)))
    assert (roll.name, "healthy") in progress
    assert progress.index((roll.name, "healthy")) < progress.index((trainer.name, "starting"))
    assert wait_for(lambda: jobs.refresh(job) == "succeeded")  # the trainer finished; the server is stopped
    assert not job_pids(job, jobs.store)
    with pytest.raises(LaunchError, match=f"{roll.name}: .*did not start|did not answer /health/"):
        launch(jobs, server_spec(trainer, roll, env_dir, tmp_path, broken=True, timeout=4), "srv-broken")
    assert jobs.store.job("srv-broken").state == "failed" and not job_pids("srv-broken", jobs.store)


ENV_I_WORKLOAD = """#!/bin/bash
env -i /bin/bash -c 'echo $$ > "$0"; exec sleep 300' "$CHILD_PIDFILE" &
exec python3 -c 'import time; time.sleep(300)'
"""


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_stop_reaches_a_child_that_cleared_its_environment_through_the_process_group(jobs, ssh_env, env_dir,
                                                                                      tmp_path):
    (h,) = ssh_env.add(1)
    (env_dir / "bin" / "swift").write_text(ENV_I_WORKLOAD)
    pidfile = tmp_path / "child.pid"
    spec = workload_spec([h], env_dir, tmp_path)
    spec = validate_spec({**spec.model_dump(), "env": {"CHILD_PIDFILE": str(pidfile)}})
    job = launch(jobs, spec, "wl-env-i")
    assert wait_for(lambda: pidfile.exists() and pidfile.read_text().strip())
    child = int(pidfile.read_text())
    node = handle_of(jobs.store, job)["nodes"][0]
    assert b"GRPO_UI_RUN" not in Path(f"/proc/{child}/environ").read_bytes()  # invisible to the token search
    assert os.getpgid(child) == node["pgid"]
    assert jobs.stop(job, grace=5) == {h.name: "stopped"}
    assert wait_for(lambda: not alive(child), 5), "the env -i child survived the stop"
    assert not job_pids(job, jobs.store)


def test_a_recycled_process_group_is_never_signalled(jobs, ssh_env, env_dir, tmp_path):
    """A stored pgid whose leader now has another start time (the pid was reused) is left alone."""
    (h,) = ssh_env.add(1)
    job = launch(jobs, workload_spec([h], env_dir, tmp_path, seconds=120), "wl-recycled")
    stranger = subprocess.Popen(["sleep", "60"], start_new_session=True)  # its own group, pgid == pid
    try:
        handle = handle_of(jobs.store, job)
        handle["nodes"][0].update(pgid=stranger.pid, start="1")
        jobs.store.set_meta(job, HANDLE, json.dumps(handle))
        assert jobs.stop(job, grace=5) == {h.name: "stopped"}  # the job's own processes, by their token
        assert not job_pids(job, jobs.store)
        assert stranger.poll() is None, "a process group that is not the job's was signalled"
    finally:
        stranger.kill()


@pytest.fixture
def swift_env(tmp_path):
    """A view of the ms-swift venv (its pyvenv.cfg and site-packages, so preflight finds ms-swift) whose bin/ has
    the workload as `swift`."""
    d = tmp_path / "swiftenv" / "bin"
    d.mkdir(parents=True)
    shutil.copy(SWIFT_VENV / "pyvenv.cfg", d.parent / "pyvenv.cfg")
    (d.parent / "lib").symlink_to(SWIFT_VENV / "lib")
    (d / "python3").symlink_to((SWIFT_VENV / "bin" / "python3").resolve())
    (d / "swift").write_text(WORKLOAD)
    (d / "swift").chmod(0o755)
    return d.parent


def test_preflight_is_the_first_state_and_its_errors_start_nothing(jobs, ssh_env, swift_env, tmp_path):
    (h,) = ssh_env.add(1)
    base = workload_spec([h], swift_env, tmp_path).model_dump()
    data = tmp_path / "data.jsonl"
    spec = validate_spec({**base, "train": {**base["train"], "dataset": [str(data)]}})
    states = []

    def progress(host, msg, job="wl-preflight-bad"):
        states.append((msg, jobs.store.job(job).state))
    with pytest.raises(LaunchError, match=f"PREFLIGHT-PATH-MISSING.*\\n.*{h.name}: {data} does not exist"):
        launch(jobs, spec, "wl-preflight-bad", progress=progress, preflight=True)
    assert ("checked", "preflight") in states and not any(m == "starting" for m, _ in states)
    job = jobs.store.job("wl-preflight-bad")
    assert job.state == "failed" and "PREFLIGHT-PATH-MISSING" in job.error
    assert not (tmp_path / "runs" / "wl-preflight-bad").exists() and not jobs.store.nodes(job.id)[0].pid
    data.write_text("{}\n")
    states.clear()
    start = time.time()
    job = launch(jobs, spec, "wl-preflight-ok", progress=lambda host, msg: progress(host, msg, "wl-preflight-ok"),
                          preflight=True)
    print(f"launch with preflight on one host: {time.time() - start:.2f} s")
    assert ("checked", "preflight") in states and ("starting", "starting") in states
    assert wait_for(lambda: jobs.refresh(job) == "succeeded")


def test_a_launch_abandoned_during_preflight_fails_on_reattach(tmp_path):
    """The app exited while a job was in preflight: nothing was started, and the job must not stay active forever."""
    store = Store(tmp_path / "db.sqlite")
    store.create_job("left-in-preflight", "n", "name: n\n", "preflight")
    store.create_job("just-started-preflight", "n", "name: n\n", "preflight")
    store.set_job("left-in-preflight", created=time.time() - 3600)
    assert Jobs(store).reattach() == {"left-in-preflight": "failed", "just-started-preflight": "preflight"}
    assert "stopped during preflight" in store.job("left-in-preflight").error


def test_stopping_a_job_leaves_a_job_of_the_same_id_from_another_dashboard_alone(ssh_env, env_dir, tmp_path):
    (h,) = ssh_env.add(1)
    mine, theirs = (Jobs(Store(tmp_path / f"{who}.sqlite")) for who in ("mine", "theirs"))
    try:
        for jobs, who in ((mine, "mine"), (theirs, "theirs")):
            launch(jobs, workload_spec([h], env_dir, tmp_path / who, seconds=120), "same-id")
        assert wait_for(lambda: len(job_pids("same-id", theirs.store)) >= 2)
        assert mine.stop("same-id", grace=5) == {h.name: "stopped"}
        assert not job_pids("same-id", mine.store)
        assert len(job_pids("same-id", theirs.store)) >= 2 and theirs.refresh("same-id") == "running"
        assert theirs.stop("same-id", grace=5) == {h.name: "stopped"}
    finally:
        for who, jobs in (("mine", mine), ("theirs", theirs)):
            jobs.close()
            stop_active_jobs(tmp_path / f"{who}.sqlite")


def test_a_launch_starts_its_plan_as_it_was_resolved(env_dir, tmp_path, monkeypatch):
    """The plan is resolved once: launching it validates, estimates, fits and renders nothing again; the estimate
    kept with the job and the script each node runs are the plan's."""
    jobs = Jobs(Store(tmp_path / "db.sqlite"))
    spec = validate_spec({**workload_spec([], env_dir, tmp_path).model_dump(), "cluster": {
        "run_root": str(tmp_path / "runs"), "nodes": [{"host": "localhost", "gpus": [0], "python_env": str(env_dir)}]}})
    plan = jobs.plan(spec, "planned")

    def again(*args, **kwargs):
        raise AssertionError("the launch resolved the job again")
    for module, name in (("grpo_ui.launch.plan", "assess"), ("grpo_ui.launch.plan", "render"),
                         ("grpo_ui.checks.assess", "estimate_spec"), ("grpo_ui.checks.assess", "suggest"),
                         ("grpo_ui.launch.render", "render"), ("grpo_ui.checks.rules", "validate")):
        monkeypatch.setattr(f"{module}.{name}", again)
    job = jobs.launch(plan)
    assert wait_for(lambda: jobs.refresh(job) == "succeeded")
    assert jobs.store.memory_estimate(job) == MemoryAtLaunch(plan.estimate) and plan.estimate["roles"][0]["peak_gib"] > 0
    assert (tmp_path / "runs/planned/node_0.sh").read_text() == plan.bundle.files["node_0.sh"]
