"""The Ray backend on a real Ray cluster (Ray 2.60 from the nodes' ms-swift venv) in the test network namespaces,
running real ms-swift GRPO on the CPU with the tiny model: a cluster the backend starts itself over SSH, and one
started beforehand and used by its Jobs API address, as an existing (e.g. KubeRay) cluster is. What Ray shows of a
job (its entrypoint, metadata and runtime environment) is read back from the real Jobs API. ms-swift's Ray mode
(megatron rlhf --use_ray) cannot train here, Megatron needing GPUs: its jobs run a stand-in `megatron` (STANDIN,
below) that does with ms-swift's own code everything its driver does before training."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import urllib.request
from pathlib import Path

import pytest

from grpo_ui.backends.ray import RayHandle
from grpo_ui.backends.ray_jobs import JobsApi, JobsApiError
from grpo_ui.core.errors import UserError
from grpo_ui.jobs.follow import LOGGING_PATH, Watcher
from grpo_ui.jobs.service import Jobs, LaunchError
from grpo_ui.jobs.store import Store
from grpo_ui.launch.plan import DRIVER
from grpo_ui.launch.render import RAY_CONFIG
from grpo_ui.spec.resolve import resolve
from grpo_ui.spec.yaml_io import validate_spec
from tests.hosts import stop_active_jobs
from tests.megatron_oracle import probe
from tests.test_launcher import job_pids, wait_for
from tests.tiny_job import ASSETS, CPU_ENV, SWIFT_VENV, paths, swift_python, tiny_spec_data

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
    assert wait_for(lambda: watcher.poll(job_id).state in ("succeeded", "failed", "stopped"), 400)
    job = jobs.store.job(job_id)
    assert job.state == "succeeded", job.error
    assert sorted({s for rows in jobs.store.metrics(job_id).values() for s, _ in rows}) == [1, 2, 3]
    assert [j.state for j in jobs.store.jobs() if j.id == job_id] == ["succeeded"]  # what History lists
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
    assert jobs.store.job("ray-rollback").state == "failed"
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
    assert wait_for(lambda: watcher.poll(first).new_steps or jobs.store.metrics(first), 300), \
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
        assert jobs.store.job(job_id).state == "stopped"
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
        assert wait_for(lambda: watcher.poll(job_id).new_steps or again.store.metrics(job_id), 300), \
            again.store.job(job_id)
        assert again.store.job(job_id).state == "running"
        workers = [p for p in job_pids(job_id, again.store)
                   if f"{job_id}/trainer1".encode() in Path(f"/proc/{p}/environ").read_bytes()
                   and b"rlhf.py" in Path(f"/proc/{p}/cmdline").read_bytes()]
        assert workers, "rank 1's training process not found"
        for pid in workers:
            os.kill(pid, 9)
        assert wait_for(lambda: watcher.poll(job_id).state == "failed", 180), again.store.job(job_id)
        error = again.store.job(job_id).error
        assert error.startswith(f"node 1 ({hosts[1].name}, rank 1) failed first"), error
        assert wait_for(lambda: not job_pids(job_id, again.store), 60)
        assert JobsApi(address).status(submission)["status"] in ("FAILED", "STOPPED")
    finally:
        again.close()


# A stand-in for ms-swift's `megatron` (Megatron needs GPUs: ms-swift's Ray mode cannot train here). It does what
# ms-swift's Ray driver does before training, with ms-swift's own code: reads the config with its Ray YAML reader
# (driver_utils.py parse_ray_yaml), joins the Ray cluster, asks Ray for its resource pools (MegatronRayPipeline.
# _create_pools: the STRICT_PACK placement groups) and spawns the train worker group on them (WorkerGroup.from_pool,
# each worker with ms-swift's own runtime environment). Instead of MegatronWorker's training each worker reports
# where it runs and a hash of the secret it got (never the value), prints ms-swift's `args.output_dir` line (local
# rank 0) and, on the last rank, writes logging.jsonl in the versioned run dir with ms-swift's JsonlWriter and prints
# each row, one a second; the driver writes completions.jsonl in its unversioned output_dir meanwhile. It records its
# argv, working directory, the config it read and the workers' reports in the run directory (standin.json).
STANDIN = r"""#!{python}
import datetime, hashlib, json, os, sys, time
import ray
from swift.ray.megatron.driver_utils import merge_group_dict, parse_ray_yaml
from swift.ray.megatron.pipeline import MegatronRayPipeline
from swift.ray.megatron.worker_group import WorkerGroup
from swift.utils import JsonlWriter

argv = sys.argv[1:]
config = argv[argv.index("--config") + 1]
_, groups, shared = parse_ray_yaml(config)
train = merge_group_dict(shared, groups["train"])
out = os.path.abspath(train["output_dir"])  # the driver's, unversioned (driver_utils.py build_dataset_from_dict)


def digest(value):
    return hashlib.sha256(value.encode()).hexdigest() if value else None


class Worker:
    def report(self):
        return {"rank": int(os.environ["RANK"]), "node": ray.util.get_node_ip_address(), "cwd": os.getcwd(),
                "secret": digest(os.environ.get("HF_TOKEN", ""))}

    def train(self, version, iters):
        run = os.path.join(os.path.abspath(train["output_dir"]), version)  # its own, from its working directory
        if os.environ["LOCAL_RANK"] == "0":
            print(f"[INFO:swift] args.output_dir: {run}", flush=True)
        if int(os.environ["RANK"]) != int(os.environ["WORLD_SIZE"]) - 1:
            return
        os.makedirs(run, exist_ok=True)
        writer = JsonlWriter(os.path.join(run, "logging.jsonl"), write_on_rank="last")
        for it in range(1, iters + 1):
            row = {"loss": round(0.5 / it, 8), "reward": round(it / iters, 8), "grad_norm": 0.1,
                   "learning_rate": 1e-06, "iteration": f"{it}/{iters}", "elapsed_time": f"{it}s",
                   "remaining_time": f"{iters - it}s", "memory(GiB)": 1.0, "train_speed(s/it)": 1.0}
            print(row, flush=True)
            writer.append(row)
            time.sleep(1)


pipeline = MegatronRayPipeline(config)
ray.init(ignore_reinit_error=True)
pipeline._create_pools()
group = WorkerGroup.from_pool("train", pipeline.resource_pool_manager.get_pool("train"),
                              worker_cls=ray.remote(num_gpus=0)(Worker))
reports = ray.get([w.report.remote() for w in group.workers])
record = {"argv": argv, "cwd": os.getcwd(), "config": open(config).read(), "workers": reports,
          "driver_secret": digest(os.environ.get("HF_TOKEN", ""))}
with open(os.path.join(os.environ["RUN_DIR"], "standin.json"), "w") as f:
    json.dump(record, f)
got = sum(r["secret"] == record["driver_secret"] for r in reports)
print(f"stand-in: the secret reached {got} of {len(reports)} workers", flush=True)
version = "v0-" + datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
running = [w.train.remote(version, int(train["train_iters"])) for w in group.workers]
completions, step = JsonlWriter(os.path.join(out, "completions.jsonl")), 0
while ray.wait(running, num_returns=len(running), timeout=1.0)[1]:
    step += 1
    completions.append({"step": [step], "prompt": ["What is 2 + 3?"], "completion": ["5"], "format": [1.0]})
ray.get(running)
print("stand-in: done", flush=True)
"""


def standin_env(tmp_path: Path) -> Path:
    """A Python environment whose `megatron` is the stand-in: a venv that sees the ms-swift venv's packages (Ray,
    ms-swift 4.6, torch) through a .pth file, with its `ray`."""
    env = tmp_path / "standin-env"
    subprocess.run([str(swift_python()), "-m", "venv", "--without-pip", str(env)], check=True, timeout=120)
    (site,) = (env / "lib").glob("python3*/site-packages")
    (ours,) = (SWIFT_VENV / "lib").glob("python3*/site-packages")
    (site / "swift_venv.pth").write_text(f"{ours}\n")
    megatron = env / "bin" / "megatron"
    megatron.write_text(STANDIN.replace("{python}", str(env / "bin" / "python")))
    megatron.chmod(0o755)
    (env / "bin" / "ray").symlink_to(SWIFT_VENV / "bin" / "ray")  # `ray start` on node 0: the ms-swift venv's Ray
    return env


def megatron_ray_spec(hosts, tmp_path: Path, env: Path, iters: int, address: str | None = None,
                      output_dir: str | None = None, **cluster):
    """A megatron rlhf job in ms-swift's Ray mode on the Ray backend: the tiny model and dataset, HF_TOKEN a secret;
    node 0 runs the driver with the stand-in `megatron`. ``cluster``: settings, `nodes` included, over the defaults."""
    p = paths()
    nodes = [{"host": h.name, "address": h.addr, "gpus": [0], "python_env": str(env if k == 0 else SWIFT_VENV)}
             for k, h in enumerate(hosts)]
    return validate_spec({
        "name": "tiny-megatron-ray", "engine": "megatron", "secret_env": ["HF_TOKEN"], "env": dict(CPU_ENV),
        "train": {"model": str(p["model"]), "model_type": "qwen2", "template": "qwen", "dataset": [str(p["dataset"])],
                  "reward_funcs": ["format"], "num_generations": 2, "micro_batch_size": 1, "global_batch_size": 4,
                  "train_iters": iters, "max_completion_length": 16, "tuner_type": "lora", "logging_steps": 1,
                  "log_completions": True, "use_ray": True, "output_dir": output_dir or str(tmp_path / "out")},
        "rollout": {"vllm_mode": None},
        "cluster": {"backend": "ray", "ray_address": address, "run_root": str(tmp_path / "runs"), "nodes": nodes,
                    **cluster}})


def everything_ray_shows(address: str, submission: str) -> str:
    """What Ray's dashboard shows of the job (ray_job) and of its tasks, actors and placement groups (the State API,
    runtime environments included), as one text."""
    state = [urllib.request.urlopen(f"{address}/api/v0/{kind}?limit=10000&detail=true", timeout=30).read().decode()
             for kind in ("tasks", "actors", "placement_groups")]
    return json.dumps(ray_job(JobsApi(address), submission)) + "".join(state)


def job_groups_alive(address: str, ray_job_id: str) -> list[dict]:
    rows = json.loads(urllib.request.urlopen(f"{address}/api/v0/placement_groups?limit=10000&detail=true",
                                             timeout=30).read())["data"]["result"]["result"]
    return [r for r in rows if r["creator_job_id"] == ray_job_id and r["state"] != "REMOVED"]


def test_ms_swift_ray_mode_on_an_existing_cluster_runs_as_rendered_with_its_secrets_is_watched_and_stopped(
        cluster, jobs, tmp_path):
    """A megatron rlhf job in ms-swift's Ray mode, separate placement (the trainer node and a rollout node, one GPU
    each), on the running cluster: preflight finds its placement groups fit (and that colocated ones, wanting two CPUs
    a GPU, would not); Ray runs exactly the rendered entrypoint, which runs `megatron` with the rendered config, and
    ms-swift's own readers accept that config; ms-swift's Ray workers get the secret, which Ray shows nowhere; the
    driver's log is a stream of its own, metrics come from the last rank's logging.jsonl, completions from the
    driver's output_dir; stopped through the Jobs API, nothing of it is left (processes, placement groups, secrets)."""
    hosts, address = cluster
    env = standin_env(tmp_path)
    colocated = megatron_ray_spec(hosts, tmp_path, env, 400, address)
    ray_errors = {f.id: f for f in jobs.preflight(colocated)[1] if f.severity == "error" and f.id.startswith("RAY")}
    assert list(ray_errors) == ["RAY-PLACEMENT"], ray_errors  # (and PREFLIGHT-NO-VLLM: the stand-in needs none)
    assert "cannot hold 2 × train+rollout (1 GPU)" in ray_errors["RAY-PLACEMENT"].message
    assert f"{hosts[0].addr} 1 GPU / 1 CPU" in ray_errors["RAY-PLACEMENT"].message
    spec = colocated.model_copy(update={"cluster": colocated.cluster.model_copy(update={"nodes": [
        colocated.cluster.nodes[0], colocated.cluster.nodes[1].model_copy(update={"role": "rollout"})]})})
    assert not [f for f in jobs.preflight(spec)[1] if f.severity == "error" and f.id.startswith("RAY")]
    plan = jobs.plan(spec, "ray-megatron")
    assert plan.bundle.ray and not plan.errors and [n.role for n in plan.nodes] == ["trainer", "rollout"]
    run_dir = tmp_path / "runs" / "ray-megatron"
    job_id = jobs.launch(plan, {"HF_TOKEN": SECRET})
    handle = jobs.handle(job_id)
    assert isinstance(handle, RayHandle) and handle.driver and handle.worker_secrets
    watcher = Watcher(jobs)
    assert wait_for(lambda: watcher.poll(job_id).new_steps and jobs.store.completions(job_id), 300), \
        (jobs.store.job(job_id), jobs.store.log_lines(job_id, DRIVER, 40))
    assert jobs.store.job(job_id).state == "running"

    # what Ray ran: the rendered entrypoint, which ran `megatron rlhf --use_ray true --config <the rendered YAML>`
    details = JobsApi(address).status(handle.submission)
    assert details["entrypoint"] == plan.bundle.ray.entrypoint(plan.run_dir)
    record = json.loads((run_dir / "standin.json").read_text())
    assert record["argv"] == ["rlhf", "--use_ray", "true", "--config", str(run_dir / RAY_CONFIG)]
    assert record["config"] == plan.bundle.files[RAY_CONFIG] == (run_dir / RAY_CONFIG).read_text()
    # ms-swift's own Ray YAML reader and Megatron argument classes (the Megatron venv) take its train group
    (parsed,) = probe([], ray_configs=[(str(run_dir / RAY_CONFIG), 1)], cwd=tmp_path)["results"]
    assert parsed["unknown"] == [] and parsed["post_init"] == "ok" and parsed["ns"]["train_iters"] == 400

    # the secret reached the driver and ms-swift's workers, and Ray shows it nowhere
    secret = hashlib.sha256(SECRET.encode()).hexdigest()
    assert record["driver_secret"] == secret and [w["secret"] for w in record["workers"]] == [secret]
    shown = everything_ray_shows(address, handle.submission)
    assert SECRET not in shown and "HF_TOKEN" not in json.dumps(details)
    assert set(details["runtime_env"]["env_vars"]) == {*CPU_ENV, "GRPO_UI_RUN", "GRPO_UI_SECRETS_FILE",
                                                       "RAY_COLOR_PREFIX"}
    assert oct((run_dir / "ray_workers.secrets.env").stat().st_mode & 0o777) == "0o600"
    assert not (run_dir / "ray_job.secrets.env").exists()  # the driver's script read and deleted its own

    # watched: the driver's log as its own stream, metrics from logging.jsonl in the workers' versioned run dir
    driver = [t for _, t, _ in jobs.store.log_lines(job_id, DRIVER, 2000)]
    assert "stand-in: the secret reached 1 of 1 workers" in driver and not any(SECRET in t for t in driver)
    logging = jobs.store.meta(job_id, LOGGING_PATH)
    assert logging.startswith(f"{tmp_path}/out/v0-") and logging.endswith("/logging.jsonl")
    assert jobs.store.offset(job_id, 0, logging) > 0  # read from the file, not only the printed lines
    assert jobs.store.completions(job_id)[0]["completion"] == "5"

    # a second such job waits for the GPUs the first holds, and says so like a queued Slurm job
    second = jobs.launch(jobs.plan(spec, "ray-megatron-2"), {"HF_TOKEN": SECRET})
    assert wait_for(lambda: jobs.refresh(second) == "starting" and "placement group" in (
        jobs.store.meta(second, "backend_status") or ""), 120), jobs.store.meta(second, "backend_status")
    waiting = json.loads(jobs.store.meta(second, "backend_status"))["reason"]
    assert waiting.startswith("waiting for resources: ") and "1 GPU" in waiting, waiting

    for job in (second, job_id):
        outcome = jobs.stop(job)
        assert all(what.startswith(("gone", "stopped", "killed", "ended")) for what in outcome.values()), outcome
        assert jobs.store.job(job).state == "stopped"
        assert JobsApi(address).status(jobs.handle(job).submission)["status"] == "STOPPED"
        assert not job_pids(job, jobs.store)
        assert not list((tmp_path / "runs" / job).glob("*.secrets.env"))
    assert wait_for(lambda: not job_groups_alive(address, details["job_id"]), 60)


def test_ms_swift_ray_mode_on_a_started_cluster_runs_where_the_job_works_and_keeps_the_drivers_log(net, jobs, tmp_path):
    """Colocated on two trainer nodes (nnodes 2, a placement group of one GPU on each) on a cluster the backend
    starts: Ray's workers run in the job's workdir, as the driver does, so a relative output_dir means the same
    directory to both; the last rank is on the node whose address sorts last; the job succeeds, the cluster and the
    secrets files are gone, and the driver's log, kept in the run directory before the cluster ended, is read to its
    last line."""
    hosts = net.add(2)
    env = standin_env(tmp_path)
    workdir = tmp_path / "work"
    workdir.mkdir()
    spec = megatron_ray_spec(hosts, tmp_path, env, 3, output_dir="out", workdir=str(workdir), ray_port=6392,
                             ray_dashboard_port=8277)
    job_id = jobs.launch(jobs.plan(spec, "ray-megatron-start"), {"HF_TOKEN": SECRET})
    handle = jobs.handle(job_id)
    assert handle.mode == "start" and handle.driver
    watcher = Watcher(jobs)
    assert wait_for(lambda: watcher.poll(job_id).state in ("succeeded", "failed", "stopped"), 400)
    job = jobs.store.job(job_id)
    assert job.state == "succeeded", (job.error, jobs.store.log_lines(job_id, DRIVER, 40))
    watcher.poll(job_id)  # the ended job's last pass (the cluster is gone by now)
    record = json.loads((tmp_path / "runs/ray-megatron-start/standin.json").read_text())
    assert {w["cwd"] for w in record["workers"]} == {str(workdir)} == {record["cwd"]}
    secret = hashlib.sha256(SECRET.encode()).hexdigest()
    assert [w["secret"] for w in record["workers"]] == [secret, secret]
    last = max(record["workers"], key=lambda w: w["rank"])["node"]  # ms-swift's last rank, where logging.jsonl is
    assert last == max(h.addr for h in hosts) == hosts[resolve(spec).logging_node].addr
    assert jobs.store.meta(job_id, LOGGING_PATH).startswith(f"{workdir}/out/v0-")
    assert sorted({s for rows in jobs.store.metrics(job_id).values() for s, _ in rows}) == [1, 2, 3]
    assert jobs.store.completions(job_id)
    driver = [t for _, t, _ in jobs.store.log_lines(job_id, DRIVER, 2000)]
    assert "stand-in: done" in driver and not any(SECRET in t for t in driver)
    assert any(t.startswith("(Worker pid=") and "'iteration': '3/3'" in t for t in driver)  # forwarded, no colours
    kept = (tmp_path / "runs/ray-megatron-start/ray_driver.log").read_bytes()  # kept before the cluster was ended
    with pytest.raises(JobsApiError):
        JobsApi(handle.dashboard, timeout=5).version()
    read, path = jobs.backend(spec).job_log(handle)
    assert read(path, 0, 1 << 24) == kept and b"stand-in: done" in kept
    assert not job_pids(job_id, jobs.store), "processes of the launch (job or Ray) left"
    assert not list((tmp_path / "runs/ray-megatron-start").glob("*.secrets.env"))
