"""The Slurm backend against a real Slurm (tests/slurm.py): job.sbatch as Slurm runs it, preflight, the queue, stop,
a heterogeneous rollout component, the SSH login node, and the tiny CPU GRPO job end to end on one and two nodes.

Where ms-swift itself is not the point, `swift` is a small recording program (the end-to-end tests run the real
ms-swift); as `swift rollout` it is a real HTTP server answering /health/ (vLLM needs a GPU).
"""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from grpo_ui.backends.slurm_text import gres_gpus
from grpo_ui.checks.assess import assess
from grpo_ui.jobs.follow import Watcher
from grpo_ui.jobs.memory_loop import comparison
from grpo_ui.jobs.service import HANDLE, STATUS, Jobs, preflight
from grpo_ui.jobs.store import Store
from grpo_ui.launch.render import render
from grpo_ui.spec.errors import SpecError
from grpo_ui.spec.yaml_io import spec_to_yaml, validate_spec
from tests.hosts import stop_active_jobs
from tests.slurm import describe
from tests.test_launcher import SERVER_WORKLOAD
from tests.test_telemetry import nvidia_smi_standin
from tests.tiny_job import ASSETS, SWIFT_VENV, tiny_spec_data
from tests.wait import wait_for

ROOT = Path(__file__).parent.parent
CAPTURED_JSONL = ROOT / "tests/data/captured/swift46_tiny_grpo_logging.jsonl"  # a real ms-swift 4.6 run's
# The recording `swift`: as `swift rollout` test_launcher's real HTTP server with /health/; as `swift rlhf` it writes
# what its node saw, the logging.jsonl METRICS_FROM into the run dir METRICS_TO, and exits 7 on FAIL_RANK, or kills
# its own task's shell on KILL_RANK.
RECORDER = SERVER_WORKLOAD.removesuffix("exec sleep 1\n") + """
echo "rank=$NODE_RANK of=$NNODES master=$MASTER_ADDR:$MASTER_PORT host=$(hostname) gpus=${CUDA_VISIBLE_DEVICES:-}\
 secret=${API_TOKEN:-} cwd=$PWD argv=$*" > "$RUN_DIR/seen.$NODE_RANK"
[ -n "${METRICS_FROM:-}" ] && mkdir -p "$METRICS_TO" && cp "$METRICS_FROM" "$METRICS_TO/logging.jsonl"
[ "$NODE_RANK" = "${KILL_RANK:-}" ] && { kill -9 "$PPID"; exit 0; }
sleep "${WORK_SECONDS:-0}"
exit $(( NODE_RANK == ${FAIL_RANK:--1} ? 7 : 0 ))
"""


def test_slurm_fields_are_checked_line_by_line_and_name_the_field_to_use():
    with pytest.raises(SpecError) as e:
        validate_spec({"slurm": {"time_limit": "2h", "extra_sbatch": ["--exclusive", "--part=gpu", "-N 2", "x",
                                                                      "--mem=1\n#SBATCH --nodes=9"]}})
    problems = dict(e.value.problems)
    assert "not a Slurm time limit" in problems["slurm.time_limit"]
    lines = problems["slurm.extra_sbatch"]
    assert "line 1" not in lines and "line 2: '--part=gpu': grpo-ui sets --partition from slurm.partition" in lines
    assert "line 3: '-N 2': grpo-ui sets --nodes" in lines and "line 4: 'x' is not one sbatch option" in lines
    assert "line 5" in lines
    ok = validate_spec({"slurm": {"time_limit": "1-12:00:00", "extra_sbatch": ["#SBATCH --mem=0", "--exclusive"]}})
    sbatch = render(ok, "j").files["job.sbatch"]
    assert "#SBATCH --time=1-12:00:00\n#SBATCH --mem=0\n#SBATCH --exclusive\n" in sbatch


def test_on_slurm_the_node_entries_only_shape_the_allocation():
    nodes = [{"host": "localhost", "gpus": [0, 1]}, {"host": "localhost", "gpus": [0, 1]}]
    ssh = validate_spec({"train": {"model": "m", "dataset": ["d"], "reward_funcs": ["format"]},
                         "cluster": {"nodes": nodes, "run_root": "/shared/runs"}})
    assert {"MASTER-LOOPBACK", "CLUSTER-GPU-OVERLAP"} <= {f.id for f in assess(ssh).findings}
    slurm = validate_spec({**ssh.model_dump(exclude_unset=True), "slurm": {"gpus_per_node": 4},
                           "cluster": {**ssh.cluster.model_dump(exclude_unset=True), "backend": "slurm"}})
    found = {f.id: f for f in assess(slurm).findings}
    assert not {"MASTER-LOOPBACK", "CLUSTER-GPU-OVERLAP"} & set(found)
    assert "2 node(s) with 2 GPU(s) each" in found["SLURM-NODE-HOSTS"].message
    assert found["SLURM-GPUS-MISMATCH"].apply == {"slurm.gpus_per_node": None}
    assert "#SBATCH --nodes=2\n#SBATCH --ntasks-per-node=1\n#SBATCH --gres=gpu:4\n" in render(
        slurm, "j").files["job.sbatch"]


def test_gres_strings_as_sinfo_prints_them():
    """GRES columns from a public sinfo listing (gist.github.com/sithhell/54cbd0299c1f728fd47c6ea7b43e1572) and
    the socket-affinity suffix newer Slurm versions append."""
    assert [gres_gpus(g) for g in ("gpu:k40m:2", "gpu:k20c:1,mic:knc:1", "(null)", "mic:knc:2", "gpu:8(S:0-1)",
                                   "gpu:a100:4(S:0),gpu:v100:2(S:1)")] == [2, 1, 0, 0, 8, 6]


@pytest.fixture
def env_dir(tmp_path):
    d = tmp_path / "env"
    (d / "bin").mkdir(parents=True)
    (d / "bin/swift").write_text(RECORDER)
    (d / "bin/swift").chmod(0o755)
    return d


def recorder_spec(tmp_path, env_dir, nodes=2, partition="multi", env=None, rollout_gpus=None, **changes):
    """A Slurm job of ``nodes`` one-GPU trainers running the recording swift (and a rollout node with
    ``rollout_gpus`` GPUs); ``changes`` are merged into its sections."""
    slots = [{"host": f"slot{k}", "gpus": [0], "python_env": str(env_dir)} for k in range(nodes)]
    if rollout_gpus:
        slots.append({"host": "roll", "gpus": list(range(rollout_gpus)), "role": "rollout", "python_env": str(env_dir)})
    data = {"name": "recorded", "train": {"model": "Qwen/Qwen2.5-0.5B", "dataset": ["/data/d.jsonl"],
                                         "reward_funcs": ["format"], "num_generations": 2,
                                         "per_device_train_batch_size": 2},
            "rollout": {"use_vllm": False, "vllm_mode": None}, "env": env or {},
            "cluster": {"backend": "slurm", "run_root": str(tmp_path / "runs"), "nodes": slots},
            "slurm": {"partition": partition}}
    for key, value in changes.items():
        data[key] = {**data.get(key, {}), **value} if isinstance(value, dict) else value
    return validate_spec(data)


@pytest.fixture
def jobs(tmp_path):
    jobs = Jobs(Store(tmp_path / "db.sqlite"))
    yield jobs
    jobs.close()
    stop_active_jobs(tmp_path / "db.sqlite")


def run_to_end(jobs, spec, job_id, secrets=None, timeout=60):
    """Launch the job's plan and follow it until it ends; its node rows (host, state, exit code) and handle."""
    jobs.launch(jobs.plan(spec, job_id), secrets)
    assert wait_for(lambda: jobs.refresh(job_id).ended, timeout), jobs.store.job(job_id)
    return [(n.host, n.state, n.exit_code) for n in jobs.store.nodes(job_id)], jobs.handle(job_id)


def assert_slurm_ends_every_process(slurm_env, job: str) -> None:
    """No process of a job that ended by itself outlives Slurm's end of it: slurmd signals the tasks left (SIGTERM,
    then SIGKILL KillWait = 15 s later), which may finish after the job's state is already final."""
    assert wait_for(lambda: not slurm_env.job_pids(job), 60), describe(slurm_env.job_pids(job))


def test_two_nodes_get_rank_master_gpus_and_secrets_and_the_failed_rank_is_named(slurm_env, env_dir, tmp_path,
                                                                                 jobs):
    spec = recorder_spec(tmp_path, env_dir, env={"FAIL_RANK": "1"}, secret_env=["API_TOKEN"])
    nodes, handle = run_to_end(jobs, spec, "rec-two", {"API_TOKEN": "s3cr'et"})
    rd = tmp_path / "runs/rec-two"
    n1 = slurm_env.hosts[0].addr
    seen = [(rd / f"seen.{r}").read_text() for r in (0, 1)]
    port = 20000 + int(handle.job) % 20000  # master_port unset: derived from the Slurm job id
    for rank, text in enumerate(seen):
        assert f"rank={rank} of=2 master={n1}:{port} host=n{rank + 1} gpus=0 secret=s3cr'et cwd={rd}" in text
    assert "s3cr" not in (rd / "job.sbatch").read_text()
    assert not (rd / "job.secrets.env").exists()  # written 0600, read once by the batch script, then deleted
    error = jobs.store.job("rec-two").error
    assert jobs.store.job("rec-two").state == "failed" and nodes[1] == ("n2", "failed", 7)
    # rank 0 finished, or srun --kill-on-bad-exit ended it first, before it wrote its exit code
    assert nodes[0] in (("n1", "succeeded", 0), ("n1", "failed", None))
    assert error.startswith("node 1 (n2, rank 1) failed first: exit code 7; Slurm job ")
    assert "FAILED" in error and "exit code 7" in error
    assert_slurm_ends_every_process(slurm_env, handle.job)


def test_a_task_killed_before_writing_its_exit_code_is_named_from_srun_and_ends_the_others(slurm_env, env_dir,
                                                                                          tmp_path, jobs):
    spec = recorder_spec(tmp_path, env_dir, env={"KILL_RANK": "1", "WORK_SECONDS": "1200"})
    nodes, handle = run_to_end(jobs, spec, "rec-killed", timeout=600)
    # rank 0 was ended by srun --kill-on-bad-exit: had it worked its 1200 s (longer than the test waits, however
    # slowly a loaded machine starts rank 1), it would have written exit code 0. srun sends SIGTERM, then SIGKILL
    # KillWait later: its script writes 143 (128 + SIGTERM) if it gets to run in between, nothing otherwise
    assert nodes[1] == ("n2", "failed", None) and nodes[0] in (("n1", "failed", None), ("n1", "failed", 143))
    error = jobs.store.job("rec-killed").error
    assert error.startswith("node 1 (n2, rank 1) failed first: srun: task 1: Killed; Slurm job "), error
    assert_slurm_ends_every_process(slurm_env, handle.job)


def test_rollout_servers_are_a_heterogeneous_component_the_trainer_finds_and_waits_for(slurm_env, env_dir,
                                                                                        tmp_path, jobs):
    spec = recorder_spec(tmp_path, env_dir, nodes=1, rollout_gpus=2, server={"port": 18111},
                         rollout={"use_vllm": True, "vllm_mode": "server", "vllm_server_timeout": 30})
    (trainer, roll), handle = run_to_end(jobs, spec, "rec-het", timeout=90)
    rd = tmp_path / "runs/rec-het"
    assert jobs.store.job("rec-het").state == "succeeded", (rd / f"slurm-{handle.job}.out").read_text()
    assert (trainer[1], roll[1]) == ("succeeded", "stopped") and {trainer[0], roll[0]} == {"n1", "n2"}
    addr = slurm_env.hosts[int(roll[0][1:]) - 1].addr  # n1 runs on hosts[0], n2 on hosts[1]
    assert f"--vllm_server_host {addr} --vllm_server_port 18111" in (rd / "seen.0").read_text()
    assert not slurm_env.job_pids(handle.job)


def test_queued_jobs_show_reason_and_position_and_stop_while_queued(slurm_env, env_dir, tmp_path, jobs):
    """Held jobs (#SBATCH --hold from the extra lines) wait in the queue until they are cancelled."""
    spec = recorder_spec(tmp_path, env_dir, nodes=1, partition="single", slurm={"extra_sbatch": ["--hold"]})
    first, second = (jobs.launch(jobs.plan(spec, f"held-{k}")) for k in (1, 2))
    assert [jobs.refresh(j) for j in (first, second)] == ["starting", "starting"]
    words = [json.loads(jobs.store.meta(j, STATUS)) for j in (first, second)]
    assert [(w["reason"], w["queue_position"]) for w in words] == [("JobHeldUser", 1), ("JobHeldUser", 2)]
    assert "PENDING (JobHeldUser)" in words[0]["detail"]
    assert jobs.stop(first) == {f"Slurm job {jobs.handle(first).job}": "stopped"}
    assert jobs.store.job(first).state == "stopped"
    assert json.loads(jobs.store.meta(second, STATUS))["queue_position"] == 2
    jobs.refresh(second)
    assert json.loads(jobs.store.meta(second, STATUS))["queue_position"] == 1
    jobs.stop(second)
    assert [jobs.refresh(j) for j in (first, second)] == ["stopped", "stopped"]


def test_preflight_names_partition_capacity_and_refused_requests_over_the_ssh_login_node(slurm_env, env_dir,
                                                                                         tmp_path):
    login = {"backend": "slurm", "login": slurm_env.hosts[0].name}

    def findings(**changes):
        spec = recorder_spec(tmp_path, env_dir, cluster=login, **changes)
        return {f.id: f for f in preflight(spec)[1]}  # as the Cluster page and the preflight command ask

    assert findings() == {}  # two nodes wrote into run_root from their allocation, the login node saw it
    assert "single" in findings(slurm={"partition": "nope"})["SLURM-PARTITION"].message
    capacity = findings(slurm={"gpus_per_node": 4})["SLURM-NODES"].message
    assert "0 usable node(s) with ≥ 4 GPU(s)" in capacity and "2 trainer node(s)" in capacity
    refused = findings(slurm={"extra_sbatch": ["--mem=99999999"]})["SLURM-REQUEST"].message
    assert "Requested node configuration is not available" in refused


def test_gpu_samples_are_the_allocations_and_metrics_are_found_in_output_dir_without_log_anchors(slurm_env, env_dir,
                                                                                                tmp_path):
    """Another job holds GPU 0 of s0, so Slurm gives this one GPU 1: its samples, taken in a step beside the job's
    (srun --overlap, which gets the job's GPUs), are GPU 1's only, and the step ends with the job's stop. Its swift
    prints no log anchors and writes logging.jsonl into a new versioned run dir of output_dir, next to an older one:
    the watcher lists output_dir for the run dir newer than the job's job.sbatch."""
    holder = slurm_env.run("sbatch", "--parsable", "--partition=single", "--gres=gpu:1", "--output=/dev/null",
                           "--wrap=sleep 300").stdout.strip()
    try:
        assert wait_for(lambda: "JobState=RUNNING" in slurm_env.run("scontrol", "show", "job", holder).stdout)
        nvidia_smi_standin(env_dir / "bin", gpus=2)
        out = tmp_path / "out"
        (out / "v0-20261121-090000").mkdir(parents=True)
        (out / "v0-20261121-090000/logging.jsonl").write_text('{"reward": 9.0, "global_step/max_steps": "7/9"}\n')
        os.utime(out / "v0-20261121-090000/logging.jsonl", (time.time() - 86400, time.time() - 86400))
        spec = recorder_spec(tmp_path, env_dir, nodes=1, partition="single", train={"output_dir": str(out)},
                             env={"WORK_SECONDS": "120", "METRICS_FROM": str(CAPTURED_JSONL),
                                  "METRICS_TO": str(out / "v1-20261124-120000")})
        jobs = Jobs(Store(tmp_path / "db.sqlite"), telemetry=True)
        watcher = Watcher(jobs)
        job = jobs.launch(jobs.plan(spec, "slurm-gpus"))
        assert wait_for(lambda: watcher.poll(job).state == "running" and jobs.store.metrics(job)
                        and len(jobs.store.gpu_samples(job)) >= 3, 60), jobs.store.meta(job, STATUS)
        assert {(s["host"], s["gpu_index"]) for s in jobs.store.gpu_samples(job)} == {("s0", 1)}
        (row,) = comparison(jobs.store, job, spec)  # the estimate at launch next to the GPU Slurm gave rank 0
        assert (row["host"], row["GPU"], row["rank"], row["nvidia-smi peak GiB"]) == ("s0", 1, 0, round(61234 / 1024, 2))
        assert jobs.store.meta(job, "logging_jsonl") == str(out / "v1-20261124-120000/logging.jsonl")
        steps = jobs.handle(job).job
        assert jobs.stop(job, grace=3) == {"s0": "stopped"}
        jobs.close()
        assert wait_for(lambda: not slurm_env.job_pids(steps), 30), describe(slurm_env.job_pids(steps))
    finally:
        slurm_env.run("scancel", holder, check=False)


# ---------------------------------------------------------------------------------------------------------------
# The tiny CPU GRPO job (real ms-swift) through the CLI.

@pytest.fixture
def cli(slurm_env, tmp_path):
    if not (ASSETS / "model" / "config.json").exists():
        pytest.fail(f"tiny model missing at {ASSETS}: run `make assets` (make test does it)")
    env = {**os.environ, "GRPO_UI_DB": str(tmp_path / "db.sqlite"), "PYTHONPATH": str(ROOT)}

    def run(*args, timeout=300):
        return subprocess.run([sys.executable, "-m", "grpo_ui", *args], capture_output=True, text=True, env=env,
                              timeout=timeout, cwd=ROOT)
    yield run
    stop_active_jobs(tmp_path / "db.sqlite")


def tiny_yaml(tmp_path, nodes, partition, login="localhost", max_steps=3, **train):
    data = tiny_spec_data(max_steps=max_steps)
    data["train"].update(output_dir=str(tmp_path / "out"), **train)
    data["env"]["GLOO_SOCKET_IFNAME"] = "eth0" if nodes > 1 else "lo"
    data["cluster"] = {"backend": "slurm", "login": login, "run_root": str(tmp_path / "runs"),  # MASTER_PORT: from the job id
                       "nodes": [{"host": f"slot{k}", "gpus": [0], "python_env": str(SWIFT_VENV)} for k in range(nodes)]}
    data["slurm"] = {"partition": partition, "time_limit": "10"}
    path = tmp_path / "job.yaml"
    path.write_text(spec_to_yaml(validate_spec(data)))
    return path


@pytest.mark.slow
def test_tiny_grpo_on_one_slurm_node_succeeds_with_metrics(cli, tmp_path):
    start = time.time()
    launch = cli("launch", str(tiny_yaml(tmp_path, 1, "single")), "--job-id", "slurm-one", "--wait", timeout=400)
    assert launch.returncode == 0, launch.stdout[-3000:] + launch.stderr[-3000:]
    status = cli("status", "slurm-one").stdout
    assert "slurm-one: succeeded" in status and "COMPLETED" in status, status
    assert "node 0 s0" in status and "step 3:" in status, status
    # master_port unset: the rendezvous port comes from the Slurm job id, as ms-swift's own torchrun line shows
    slurm_job = json.loads(Store(tmp_path / "db.sqlite").meta("slurm-one", HANDLE))["job"]
    log = (tmp_path / "runs/slurm-one/node_0.log").read_text()
    assert f"--master_port {20000 + int(slurm_job) % 20000} " in log, log[:3000]
    print(f"one node took {time.time() - start:.0f} s")


@pytest.mark.slow
def test_tiny_grpo_with_a_bad_dataset_fails_naming_node_exit_code_and_log(cli, tmp_path):
    launch = cli("launch", str(tiny_yaml(tmp_path, 1, "single", dataset=[str(tmp_path / "missing.jsonl")])),
                 "--job-id", "slurm-bad", "--wait", timeout=400)
    assert launch.returncode == 1, launch.stdout[-3000:] + launch.stderr[-3000:]
    status = cli("status", "slurm-bad").stdout
    assert "slurm-bad: failed" in status
    assert "node 0 (s0, rank 0) failed first: exit code 1; Slurm job " in status and "FAILED" in status, status
    assert "missing.jsonl" in status, status  # the log tail shows ms-swift's complaint
    assert "NODE-FAILED" in status


@pytest.mark.slow
def test_tiny_grpo_on_two_slurm_nodes_via_the_ssh_login_node_watched_then_stopped(cli, slurm_env, tmp_path):
    start = time.time()
    spec = tiny_yaml(tmp_path, 2, "multi", login=slurm_env.hosts[0].name, max_steps=400)
    launch = cli("launch", str(spec), "--job-id", "slurm-two")
    assert launch.returncode == 0, launch.stdout + launch.stderr

    store = Store(tmp_path / "db.sqlite")
    assert wait_for(lambda: "step " in cli("status", "slurm-two").stdout and store.metrics("slurm-two"), 240), \
        cli("status", "slurm-two").stdout
    assert store.job("slurm-two").state == "running"  # metrics read while it runs
    log0 = (tmp_path / "runs/slurm-two/node_0.log").read_text()
    assert f"--nnodes 2 --node_rank 0 --master_addr {slurm_env.hosts[0].addr}" in log0
    job = json.loads(store.meta("slurm-two", "backend_handle"))["job"]
    assert slurm_env.job_pids(job)
    stop = cli("stop", "slurm-two")
    assert stop.returncode == 0 and stop.stdout.split() == ["n1:", "stopped", "n2:", "stopped"], stop.stdout
    assert not (left := slurm_env.job_pids(job)), describe(left)
    assert "slurm-two: stopped" in cli("status", "slurm-two").stdout
    print(f"two nodes took {time.time() - start:.0f} s")
