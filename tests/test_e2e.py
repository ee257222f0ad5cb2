"""End to end on real software: real `swift rlhf --rlhf_type grpo` (ms-swift 4.6, CPU, the tiny local model) started
over real SSH on network-namespace hosts by grpo-ui's CLI, its logs and metrics flowing back, the doctor's alert on
real data, the memory estimate stored at launch and exported next to the measured peak, the measured step time shown
beside the prediction (or the reason there is none), and stops that leave nothing behind."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from bench.calibration import problems
from grpo_ui.backends.remote.gpu import SmiChannel
from grpo_ui.backends.remote.ssh import Pool
from grpo_ui.doctor.pace import seconds_text
from grpo_ui.jobs.store import Store
from grpo_ui.jobs.time_loop import no_prediction
from grpo_ui.spec.yaml_io import spec_to_yaml, validate_spec
from tests.hosts import stop_active_jobs
from tests.test_launcher import job_pids
from tests.test_monitor import collect
from tests.tiny_job import ASSETS, tiny_spec_data
from tests.wait import wait_for

pytestmark = pytest.mark.slow
ROOT = Path(__file__).parent.parent


@pytest.fixture
def cli(ssh_env, tmp_path):
    if not (ASSETS / "model" / "config.json").exists():
        pytest.fail(f"tiny model missing at {ASSETS}: run `make assets` (make test does it)")
    env = {**os.environ, "GRPO_UI_DB": str(tmp_path / "db.sqlite"), "GRPO_UI_SSH_CONFIG": str(ssh_env.ssh_config),
           "GRPO_UI_KNOWN_HOSTS": str(ssh_env.known_hosts), "PYTHONPATH": str(ROOT)}

    def run(*args, timeout=300):
        return subprocess.run([sys.executable, "-m", "grpo_ui", *args], capture_output=True, text=True, env=env,
                              timeout=timeout, cwd=ROOT)
    yield run
    stop_active_jobs(tmp_path / "db.sqlite")


def job_yaml(tmp_path, hosts, max_steps, env=None, **train):
    data = tiny_spec_data(max_steps=max_steps)
    data["train"].update(output_dir=str(tmp_path / "out"), **train)
    data["env"].update(env or {})
    data["cluster"] = {"run_root": str(tmp_path / "runs"), "master_addr": hosts[0].addr, "nodes": [
        {"host": h.name, "address": h.addr, "gpus": [0], "python_env": data["cluster"]["nodes"][0]["python_env"]}
        for h in hosts]}
    if len(hosts) > 1:  # gloo must use each host's own interface (a per-node setting, reported as a finding)
        for host, node in zip(hosts, data["cluster"]["nodes"], strict=True):
            node["env"] = {"GLOO_SOCKET_IFNAME": host.iface}
    path = tmp_path / "job.yaml"
    path.write_text(spec_to_yaml(validate_spec(data)))
    return path


def test_scenario1_one_host_validate_render_preflight_launch_watch_succeed(cli, ssh_env, tmp_path, monkeypatch):
    (h,) = ssh_env.add(1)
    spec = job_yaml(tmp_path, [h], max_steps=3, log_completions=True)
    start = time.time()
    v = cli("validate", str(spec))
    assert v.returncode == 0, v.stdout + v.stderr
    r = cli("render", str(spec), "--out", str(tmp_path / "bundle"), "--job-id", "e2e-render")
    assert r.returncode == 0 and (tmp_path / "bundle" / "node_0.sh").exists(), r.stdout + r.stderr
    p = cli("preflight", str(spec), "--json")
    assert p.returncode == 0, p.stdout + p.stderr
    facts = json.loads(p.stdout)
    assert facts["hosts"][0]["versions"]["ms-swift"].startswith("4.6")
    assert {f["id"] for f in facts["findings"]} <= {"PREFLIGHT-NO-GPU", "PREFLIGHT-DISK", "PREFLIGHT-PY-SPY"}
    launch = cli("launch", str(spec), "--job-id", "e2e-one", "--wait", timeout=600)
    assert launch.returncode == 0, launch.stdout[-3000:] + launch.stderr[-3000:]
    status = cli("status", "e2e-one")
    assert "e2e-one: succeeded" in status.stdout, status.stdout
    assert "step 3:" in status.stdout and "reward_std=0" in status.stdout
    assert "NO-LEARNING-SIGNAL" in status.stdout and "KL-STUCK-ZERO" in status.stdout
    sampled = Store(tmp_path / "db.sqlite").completions("e2e-one")
    assert sampled and all("completion" in row and "step" in row for row in sampled)
    memory_closed_loop(cli, h, tmp_path)
    time_closed_loop(cli, tmp_path, monkeypatch)
    print(f"scenario 1 took {time.time() - start:.0f} s")


def memory_closed_loop(cli, h, tmp_path):
    """The launch stored the estimate (the tiny model read from its config.json); GPU samples reach the store through
    an nvidia-smi channel over SSH, the watcher raises the peaks, and `calibration export` writes the pair. No GPU
    here: the channel runs a stand-in printing one tick in nvidia-smi's documented format
    (tests/data/nvidia-smi/busy.csv); a CPU run logs no memory(GiB), so only the nvidia-smi row comes out."""
    store = Store(tmp_path / "db.sqlite")
    estimate = store.memory_estimate("e2e-one")
    assert estimate and estimate.roles[0].role == "trainer" and estimate.roles[0].peak_gib > 0
    standin = tmp_path / "smi" / "nvidia-smi"
    standin.parent.mkdir()
    standin.write_text(f"#!/bin/bash\nhead -n 8 {ROOT / 'tests/data/nvidia-smi/busy.csv'}\nsleep 5\n")
    standin.chmod(0o755)
    pool, samples = Pool(), []

    def open_stream(cmd):
        _, out, _ = pool.get(h.name).client.exec_command(f"export PATH={standin.parent}:$PATH; {cmd}", timeout=10)
        return iter(out.readline, "")
    collect(SmiChannel(h.name, open_stream, lambda s: (samples.append(s), store.add_gpu_samples("e2e-one", [s]))),
            samples, 8, 30)
    pool.close()
    assert cli("status", "e2e-one").returncode == 0  # a watcher pass records the peaks
    out = cli("calibration", "export", "e2e-one", "--only", "memory")
    assert out.returncode == 0, out.stderr
    (row,) = [json.loads(line) for line in out.stdout.splitlines()]
    assert (row["compare"], row["measured_gib"]) == ("peak", round(61234 / 1024, 3))  # GPU 0: the job's only GPU
    assert row["estimated_gib"] == estimate.roles[0].peak_gib and problems(row) == []


def time_closed_loop(cli, tmp_path, monkeypatch):
    """The watcher recorded the job's measured pace (3 steps: the first apart, 2 logged intervals); `status` and the
    Monitor page (AppTest over the same store) show it beside the prediction stored at launch, or beside the reason
    there is none (these CPU hosts have no GPU facts)."""
    store = Store(tmp_path / "db.sqlite")
    measured = store.time_measured("e2e-one")
    assert (measured["first_step"], measured["step"], measured["total"], measured["logged_intervals"]) == (1, 3, 3, 2)
    assert measured["warmup_s"] > 0 and measured["median_s"] > 0 and measured["startup_s"] > 0
    assert "step time: " + seconds_text(measured["median_s"]) + " per step measured" in cli("status", "e2e-one").stdout
    reason = no_prediction(store.time_estimate("e2e-one"))
    monkeypatch.setenv("GRPO_UI_HOME", str(tmp_path))
    monkeypatch.setenv("GRPO_UI_DB", str(tmp_path / "db.sqlite"))
    import streamlit as st
    st.cache_resource.clear()  # the app's jobs service is cached per process: open this test's store
    monitor = AppTest.from_file(str(ROOT / "views/monitor.py"), default_timeout=60).run()
    assert not monitor.exception, monitor.exception
    shown = {m.label: m.value for m in monitor.metric}
    assert shown["measured s/step (median)"] == seconds_text(measured["median_s"])
    captions = [c.value for c in monitor.caption]
    if reason:  # no prediction: the reason, beside the measurement
        assert shown["predicted s/step"] == "—" and reason[0].upper() + reason[1:] + "." in captions
    else:
        predicted = store.time_estimate("e2e-one").step_s
        assert shown["measured / predicted"] == f"{measured['median_s'] / predicted:.2f}×"


def test_metrics_found_by_listing_the_output_dir_when_swift_logs_only_warnings(cli, ssh_env, tmp_path):
    """LOG_LEVEL=WARNING hides ms-swift's `output_dir:` and `logging file` lines: the watcher lists the output dir
    on the node for the run dir written since the launch (an older run sits in the same output dir)."""
    (h,) = ssh_env.add(1)
    old = tmp_path / "out/v0-20261121-090000"
    old.mkdir(parents=True)
    (old / "logging.jsonl").write_text('{"reward": 9.0, "global_step/max_steps": "7/9"}\n')
    os.utime(old / "logging.jsonl", (time.time() - 86400, time.time() - 86400))
    spec = job_yaml(tmp_path, [h], max_steps=2, env={"LOG_LEVEL": "WARNING"})
    launch = cli("launch", str(spec), "--job-id", "e2e-quiet", "--wait", timeout=600)
    assert launch.returncode == 0, launch.stdout[-3000:] + launch.stderr[-3000:]
    store = Store(tmp_path / "db.sqlite")
    for hidden in ("output_dir: ", "The logging file will be saved in"):
        assert not store.log_lines("e2e-quiet", 0, 1, contains=hidden)
    found = Path(store.meta("e2e-quiet", "logging_jsonl"))
    assert found.parent.parent == tmp_path / "out" and found.parent.name.startswith("v1-") and found.exists()
    assert sorted({s for rows in store.metrics("e2e-quiet").values() for s, _ in rows}) == [1, 2]


def test_scenario2_two_hosts_rendezvous_then_stop_mid_run(cli, ssh_env, tmp_path):
    hosts = ssh_env.add(2)
    spec = job_yaml(tmp_path, hosts, max_steps=400)
    start = time.time()
    launch = cli("launch", str(spec), "--job-id", "e2e-two")
    assert launch.returncode == 0, launch.stdout + launch.stderr

    def metrics_arrived():
        out = cli("status", "e2e-two").stdout
        return "step " in out and "e2e-two: running" in out and out
    out = wait_for(metrics_arrived, 240)
    assert out, cli("status", "e2e-two").stdout
    log0 = (tmp_path / "runs/e2e-two/node_0.log").read_text()
    assert "--nnodes 2 --node_rank 0 --master_addr " + hosts[0].addr in log0
    stop = cli("stop", "e2e-two")
    assert stop.returncode == 0 and ("stopped" in stop.stdout or "killed" in stop.stdout), stop.stdout
    assert not job_pids("e2e-two", Store(tmp_path / "db.sqlite"))
    print(f"scenario 2 took {time.time() - start:.0f} s")


def test_scenario3_a_node_dies_and_is_named_first(cli, ssh_env, tmp_path):
    hosts = ssh_env.add(2)
    spec = job_yaml(tmp_path, hosts, max_steps=400)
    start = time.time()
    assert cli("launch", str(spec), "--job-id", "e2e-die").returncode == 0
    assert wait_for(lambda: "step " in cli("status", "e2e-die").stdout, 240)
    workers = [p for p in job_pids("e2e-die", Store(tmp_path / "db.sqlite")) if b"e2e-die/trainer1" in Path(f"/proc/{p}/environ").read_bytes()
               and b"rlhf.py" in Path(f"/proc/{p}/cmdline").read_bytes()]
    assert workers, "rank 1's training process not found"
    for pid in workers:
        os.kill(pid, 9)
    out = wait_for(lambda: "e2e-die: failed" in (s := cli("status", "e2e-die").stdout) and s, 180)
    assert out, cli("status", "e2e-die").stdout
    assert f"({hosts[1].name}, rank 1) failed first" in out
    assert "NODE-FAILED" in out
    failed = next(a for a in Store(tmp_path / "db.sqlite").alerts("e2e-die") if a.alert_id == "NODE-FAILED")
    # the test kills rank 1's whole torchrun on h1: no error there; h0's rank 0 only loses its peer (gloo)
    assert failed.message.startswith(f"node 1 ({hosts[1].name}, rank 1) failed first")
    assert wait_for(lambda: not job_pids("e2e-die", Store(tmp_path / "db.sqlite")), 60)
    print(f"scenario 3 took {time.time() - start:.0f} s")
