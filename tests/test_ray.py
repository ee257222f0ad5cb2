"""The Ray backend on a real Ray cluster (Ray 2.60 from the nodes' ms-swift venv) in the test network namespaces,
running real ms-swift GRPO on the CPU with the tiny model: a cluster the backend starts itself over SSH, and one
started beforehand and used by its Jobs API address, as an existing (e.g. KubeRay) cluster is. What Ray shows of a
job (its entrypoint, metadata and runtime environment) is read back from the real Jobs API."""

from __future__ import annotations

import json
import os
import subprocess
import urllib.request
from dataclasses import replace
from pathlib import Path

import pytest

from grpo_ui.backends.ray import RayHandle
from grpo_ui.backends.ray_jobs import JobsApi
from grpo_ui.core.errors import UserError
from grpo_ui.jobs.follow import Watcher
from grpo_ui.jobs.service import Jobs, LaunchError
from grpo_ui.jobs.store import Store
from grpo_ui.launch.plan import DriverEntry
from grpo_ui.spec.yaml_io import validate_spec
from tests.hosts import stop_active_jobs
from tests.test_launcher import job_pids, wait_for
from tests.tiny_job import ASSETS, SWIFT_VENV, tiny_spec_data

pytestmark = pytest.mark.slow
SECRET = "hf_ray-test-secret-value-0123456789"
CLUSTER_MARK = "GRPO_UI_RUN=ray-test-cluster"  # the processes of the cluster started beforehand


def marked(prefix: str) -> list[int]:
    """Processes on this machine whose environment has an entry starting with ``prefix``."""
    found = []
    for d in Path("/proc").iterdir():
        try:
            if d.name.isdigit() and any(e.startswith(prefix.encode())
                                        for e in (d / "environ").read_bytes().split(b"\0")):
                found.append(int(d.name))
        except OSError:
            continue
    return found


def kill_marked(prefix: str) -> None:
    for pid in marked(prefix):
        try:
            os.kill(pid, 9)
        except ProcessLookupError:
            pass


def ssh(net, host, command: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(["ssh", "-F", str(net.ssh_config), "-o", f"UserKnownHostsFile={net.known_hosts}", host.name,
                           command], capture_output=True, text=True, timeout=timeout)


def ray_spec(hosts, tmp_path: Path, max_steps: int, address: str | None = None, **cluster):
    data = tiny_spec_data(max_steps=max_steps)
    data["train"]["output_dir"] = str(tmp_path / "out")
    data["secret_env"] = ["HF_TOKEN"]
    data["cluster"] = {"backend": "ray", "ray_address": address, "run_root": str(tmp_path / "runs"), **cluster,
                       "nodes": [{"host": h.name, "address": h.addr, "gpus": [0], "python_env": str(SWIFT_VENV),
                                  "env": {"GLOO_SOCKET_IFNAME": h.iface}} for h in hosts]}
    return validate_spec(data)


@pytest.fixture(scope="module")
def net(hostnet):
    if not (ASSETS / "model" / "config.json").exists():
        pytest.fail(f"tiny model missing at {ASSETS}: run `make assets` (make test does it)")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("GRPO_UI_SSH_CONFIG", str(hostnet.ssh_config))
        mp.setenv("GRPO_UI_KNOWN_HOSTS", str(hostnet.known_hosts))
        mp.setenv("RAY_USAGE_STATS_ENABLED", "0")
        yield hostnet


@pytest.fixture(scope="module")
def cluster(net, tmp_path_factory):
    """A Ray cluster started beforehand (head and one worker, each with one GPU resource), as a user or KubeRay
    would have it running; its Jobs API address is what the jobs name. Ended by its processes' marker."""
    hosts = net.add(2)
    mark = f"{CLUSTER_MARK}/{os.getpid()}"
    head = hosts[0].addr
    for k, h in enumerate(hosts):
        role = (f"--head --port=6379 --dashboard-host={head} --dashboard-port=8265" if k == 0
                else f"--address={head}:6379")
        res = ssh(net, h, f"env {mark}-{k} RAY_USAGE_STATS_ENABLED=0 {SWIFT_VENV}/bin/ray start {role} "
                          f"--node-ip-address={h.addr} --num-gpus=1 --num-cpus=1 --temp-dir=/tmp/grpo-ui-test-ray-"
                          f"{os.getpid()}-{k} --disable-usage-stats < /dev/null 2>&1")
        assert res.returncode == 0, res.stdout[-3000:]
    try:
        yield hosts, f"http://{head}:8265"
    finally:
        kill_marked(mark)
        for k in range(2):
            subprocess.run(["rm", "-rf", f"/tmp/grpo-ui-test-ray-{os.getpid()}-{k}"], check=False)


@pytest.fixture
def jobs(net, tmp_path):
    service = Jobs(Store(tmp_path / "db.sqlite"))
    yield service
    service.close()
    stop_active_jobs(tmp_path / "db.sqlite")


def ray_job(api: JobsApi, submission: str) -> dict:
    """Everything Ray's dashboard shows of the job: its details, its row in the job list, and its driver log."""
    listed = json.loads(urllib.request.urlopen(f"{api.address}/api/jobs/", timeout=20).read())
    return {"details": api.status(submission), "listed": [j for j in listed if j["submission_id"] == submission],
            "logs": api.logs(submission)}


def test_hostile_ray_addresses_are_refused_like_other_host_fields(tmp_path):
    data = tiny_spec_data()
    for bad in ("http://10.0.0.1:8265/api;rm -rf ~", "http://user:pw@head:8265", "http://$(reboot):8265",
                "head:8265", "http://head", "javascript:alert(1)"):
        with pytest.raises(UserError) as e:
            validate_spec({**data, "cluster": {**data["cluster"], "backend": "ray", "ray_address": bad}})
        assert "cluster.ray_address" in str(e.value)
    ok = validate_spec({**data, "cluster": {**data["cluster"], "backend": "ray", "ray_address": "http://[fd00::1]:8265/"}})
    assert ok.cluster.ray_address == "http://[fd00::1]:8265"


def test_started_cluster_runs_grpo_on_two_nodes_shows_no_secret_and_is_ended(net, jobs, tmp_path):
    """The backend starts Ray on two hosts (head on node 0, dashboard bound to its address), submits the job, the
    tiny GRPO job trains on both nodes with its metrics reaching the store, finishes, and the cluster is ended:
    nothing of the launch (job or Ray) is left on any node. Ray shows no secret value anywhere."""
    hosts = net.add(2)
    spec = ray_spec(hosts, tmp_path, max_steps=3, ray_port=6390, ray_dashboard_port=8275)
    job_id = jobs.launch(jobs.plan(spec, "ray-start"), {"HF_TOKEN": SECRET}, preflight=True)
    handle = jobs.handle(job_id)
    assert isinstance(handle, RayHandle) and handle.mode == "start" and handle.dashboard == f"http://{hosts[0].addr}:8275"
    listening = subprocess.run(["ip", "netns", "exec", hosts[0].ns, "ss", "-tlnH", "sport = :8275"],
                               capture_output=True, text=True).stdout.split()
    assert f"{hosts[0].addr}:8275" in listening and "0.0.0.0:8275" not in listening and "*:8275" not in listening
    shown = json.dumps(ray_job(JobsApi(handle.dashboard), handle.submission))
    assert SECRET not in shown and "HF_TOKEN" not in shown
    assert "ray_driver.py" in shown and "OMP_NUM_THREADS" in shown  # the entrypoint and the job's own env are there
    watcher = Watcher(jobs)
    assert wait_for(lambda: watcher.poll(job_id)["state"] in ("succeeded", "failed", "stopped"), 400)
    job = jobs.store.job(job_id)
    assert job["state"] == "succeeded", job["error"]
    assert sorted({s for rows in jobs.store.metrics(job_id).values() for s, _ in rows}) == [1, 2, 3]
    assert [j["state"] for j in jobs.store.jobs() if j["id"] == job_id] == ["succeeded"]  # what History lists
    assert not any(SECRET in line for _, line, _ in jobs.store.log_lines(job_id, 0, 10000))
    assert not job_pids(job_id, jobs.store), "processes of the launch (job or Ray) left"
    assert not (tmp_path / "runs/ray-start/node_0.secrets.env").exists()
    assert not Path(f"/tmp/grpo-ui-ray-{handle.tag}-0").exists()


def test_rollback_when_ray_cannot_start_on_a_node_leaves_nothing(net, jobs, tmp_path):
    """Node 1's environment has no Ray: its `ray start` fails after the head started; the launch fails naming the
    host, and the head's Ray processes and the secrets files are gone."""
    hosts = net.add(2)
    spec = ray_spec(hosts, tmp_path, max_steps=3, ray_port=6391, ray_dashboard_port=8276)
    nodes = [spec.cluster.nodes[0], spec.cluster.nodes[1].model_copy(update={"python_env": str(tmp_path / "nope")})]
    spec = spec.model_copy(update={"cluster": spec.cluster.model_copy(update={"nodes": nodes})})
    with pytest.raises(LaunchError) as e:
        jobs.launch(jobs.plan(spec, "ray-rollback"), {"HF_TOKEN": SECRET})
    assert hosts[1].name in str(e.value) and "nothing left running" in str(e.value)
    assert jobs.store.job("ray-rollback")["state"] == "failed"
    assert not job_pids("ray-rollback", jobs.store)
    assert not list((tmp_path / "runs/ray-rollback").glob("*.secrets.env"))


def test_existing_cluster_preflight_names_missing_nodes_and_gpus(cluster, jobs, tmp_path, net):
    hosts, address = cluster
    (stranger,) = net.add(1)
    spec = ray_spec([hosts[0], stranger], tmp_path, max_steps=3, address=address)
    nodes = [spec.cluster.nodes[0].model_copy(update={"gpus": [0, 1]}), spec.cluster.nodes[1]]
    spec = spec.model_copy(update={"cluster": spec.cluster.model_copy(update={"nodes": nodes})})
    _, found = jobs.preflight(spec)
    by_id = {f.id: f for f in found}
    assert f"No alive node of the Ray cluster at {stranger.addr}" in by_id["RAY-NODE-MISSING"].message
    assert "uses 2 GPU(s) but its Ray node has 1" in by_id["RAY-GPUS"].message
    down = spec.model_copy(update={"cluster": spec.cluster.model_copy(update={"ray_address": "http://127.0.0.1:9"})})
    assert "RAY-UNREACHABLE" in {f.id for f in jobs.preflight(down)[1]}


def test_existing_cluster_waiting_for_resources_then_stop_leaves_nothing(cluster, jobs, tmp_path):
    """A job on the existing cluster runs; a second one on the same nodes waits for their GPUs and says so, like a
    queued Slurm job; both are stopped mid-way through the Jobs API and nothing of either is left on any node,
    while the cluster itself keeps running (grpo-ui started nothing there)."""
    hosts, address = cluster
    spec = ray_spec(hosts, tmp_path, max_steps=400, address=address)
    first = jobs.launch(jobs.plan(spec, "ray-first"), {"HF_TOKEN": SECRET}, preflight=True)
    watcher = Watcher(jobs)
    assert wait_for(lambda: watcher.poll(first)["new_steps"] or jobs.store.metrics(first), 300), \
        jobs.store.job(first)
    second = jobs.launch(jobs.plan(spec, "ray-second"), {"HF_TOKEN": SECRET})
    assert wait_for(lambda: jobs.refresh(second) == "starting" and "needs GPU" in (
        jobs.store.meta(second, "backend_status") or ""), 60)
    waiting = json.loads(jobs.store.meta(second, "backend_status"))
    assert waiting["reason"].startswith(f"waiting for resources: node 0 ({hosts[0].addr}) needs GPU 1")
    assert (tmp_path / "runs/ray-second/node_1.secrets.env").exists()  # sent, not read yet: the job never started
    for job_id in (second, first):
        outcome = jobs.stop(job_id)
        assert all(what.startswith(("gone", "stopped", "killed", "ended")) for what in outcome.values()), outcome
        assert jobs.store.job(job_id)["state"] == "stopped"
        assert not job_pids(job_id, jobs.store)
        assert JobsApi(address).status(jobs.handle(job_id).submission)["status"] == "STOPPED"
    assert not list((tmp_path / "runs/ray-second").glob("*.secrets.env"))
    assert JobsApi(address).version() == "2.60.0"  # the cluster still runs


def test_existing_cluster_restarted_app_reattaches_then_a_killed_node_is_named_first(cluster, jobs, tmp_path):
    """The app (its jobs service) goes away mid-job; a new one on the same store finds the job by its submission id
    and follows it; then node 1's training process is killed: the job fails with node 1 named as the node that
    failed first, and nothing of it is left on any node."""
    hosts, address = cluster
    spec = ray_spec(hosts, tmp_path, max_steps=400, address=address)
    job_id = jobs.launch(jobs.plan(spec, "ray-reattach"), {"HF_TOKEN": SECRET})
    submission = jobs.handle(job_id).submission
    jobs.close()
    again = Jobs(Store(tmp_path / "db.sqlite"))
    try:
        watcher = Watcher(again)
        assert job_id in watcher.reattach()
        assert again.handle(job_id).submission == submission
        assert wait_for(lambda: watcher.poll(job_id)["new_steps"] or again.store.metrics(job_id), 300), \
            again.store.job(job_id)
        assert again.store.job(job_id)["state"] == "running"
        workers = [p for p in job_pids(job_id, again.store)
                   if f"{job_id}/trainer1".encode() in Path(f"/proc/{p}/environ").read_bytes()
                   and b"rlhf.py" in Path(f"/proc/{p}/cmdline").read_bytes()]
        assert workers, "rank 1's training process not found"
        for pid in workers:
            os.kill(pid, 9)
        assert wait_for(lambda: watcher.poll(job_id)["state"] == "failed", 180), again.store.job(job_id)
        error = again.store.job(job_id)["error"]
        assert error.startswith(f"node 1 ({hosts[1].name}, rank 1) failed first"), error
        assert wait_for(lambda: not job_pids(job_id, again.store), 60)
        assert JobsApi(address).status(submission)["status"] in ("FAILED", "STOPPED")
    finally:
        again.close()


def test_ms_swift_ray_mode_entrypoint_with_its_config_is_accepted(cluster, jobs, tmp_path):
    """ms-swift's Ray mode (Megatron needs GPUs: not here): node 0's script runs `megatron rlhf --use_ray true
    --config <the rendered YAML>` as the Ray job's entrypoint, the YAML shipped beside it. A stand-in `megatron`
    (first on the node's PATH, said so here) prints what it was given; Ray runs the entrypoint on node 0 and the job
    succeeds, its config read from the run directory, its secret read from the 0600 file and shown nowhere."""
    hosts, address = cluster
    standin = tmp_path / "env/bin/megatron"
    standin.parent.mkdir(parents=True)
    standin.write_text('#!/bin/bash\necho "megatron $*"; cat "${@: -1}"; [ -n "$HF_TOKEN" ] && echo "token read"\n')
    standin.chmod(0o755)
    spec = ray_spec(hosts, tmp_path, max_steps=3, address=address)
    nodes = [spec.cluster.nodes[0].model_copy(update={"python_env": str(tmp_path / "env")}), spec.cluster.nodes[1]]
    spec = spec.model_copy(update={"cluster": spec.cluster.model_copy(update={"nodes": nodes})})
    plan = jobs.plan(spec, "ray-megatron")
    # the Megatron render (another change) writes node 0's script with this command; here it stands in for it
    script = plan.bundle.files["node_0.sh"]
    start, end = script.index("\nswift "), script.index("\ncode=$?")
    files = {**plan.bundle.files, "megatron_ray.yaml": "rlhf_type: grpo\ntrain:\n  gpus: 1\nrollout:\n  gpus: 1\n",
             "node_0.sh": script[:start] + "\nmegatron rlhf --use_ray true --config megatron_ray.yaml" + script[end:]}
    plan = replace(plan, bundle=replace(plan.bundle, files=files), driver=DriverEntry("megatron_ray.yaml"))
    job_id = jobs.launch(plan, {"HF_TOKEN": SECRET})
    handle = jobs.handle(job_id)
    assert wait_for(lambda: jobs.refresh(job_id) == "succeeded", 120), jobs.store.job(job_id)
    log = (tmp_path / "runs/ray-megatron/node_0.log").read_text()
    assert "megatron rlhf --use_ray true --config megatron_ray.yaml" in log and "rollout:\n  gpus: 1" in log
    assert "token read" in log
    shown = json.dumps(ray_job(JobsApi(address), handle.submission))
    assert "node_0.sh" in shown and SECRET not in shown
