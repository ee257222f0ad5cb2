"""Preflight against real sshd hosts: a healthy host, and each failure made on purpose.

GPU facts come from an `nvidia-smi` stand-in on the node's PATH that prints lines in nvidia-smi's documented
CSV format (no GPU machine was available to capture from; see tests/data/nvidia-smi/README.md)."""

import shutil
import subprocess
import sys

import pytest

from grpo_ui.remote.preflight import preflight
from grpo_ui.remote.ssh import Pool
from grpo_ui.spec import validate_spec
from tests.tiny_job import SWIFT_VENV

SMI = """#!/bin/bash
case "$*" in
  *--query-gpu*) printf '0, NVIDIA H100 80GB HBM3, 81559, 1, 550.54.15\\n1, NVIDIA H100 80GB HBM3, 81559, 40211, 550.54.15\\n' ;;
  *--query-compute-apps*) printf 'GPU-5f1c, 4242, 40200\\n' ;;
esac
"""


def spec_for(hosts, envs, tmp_path, **cluster):
    nodes = [{"host": h.name, "address": h.addr, "gpus": [0], "python_env": str(e)} for h, e in zip(hosts, envs, strict=True)]
    return validate_spec({"train": {"model": "Qwen/Qwen2.5-0.5B", "dataset": [str(tmp_path / "data.jsonl")],
                                    "reward_funcs": ["format"], "num_generations": 2,
                                    "per_device_train_batch_size": 2},
                          "rollout": {"use_vllm": False, "vllm_mode": None},
                          "cluster": {"nodes": nodes, "run_root": str(tmp_path / "runs"), **cluster}})


@pytest.fixture
def gpu_env(tmp_path):
    """A view of the ms-swift venv (same pyvenv.cfg and site-packages) whose bin/ also has the nvidia-smi stand-in."""
    d = tmp_path / "gpuenv" / "bin"
    d.mkdir(parents=True)
    shutil.copy(SWIFT_VENV / "pyvenv.cfg", d.parent / "pyvenv.cfg")
    (d.parent / "lib").symlink_to(SWIFT_VENV / "lib")
    (d / "python3").symlink_to((SWIFT_VENV / "bin" / "python3").resolve())
    (d / "nvidia-smi").write_text(SMI)
    (d / "nvidia-smi").chmod(0o755)
    (tmp_path / "data.jsonl").write_text("{}\n")
    return d.parent


def ids(findings):
    return {f.id for f in findings}


def test_healthy_host_reports_versions_and_gpus(ssh_env, gpu_env, tmp_path):
    (h,) = ssh_env.add(1)
    facts, findings = preflight(spec_for([h], [gpu_env], tmp_path), Pool())
    assert not [f for f in findings if f.severity == "error"], findings
    assert facts[0].versions["ms-swift"].startswith("4.6") and facts[0].versions["vllm"] is None
    assert [g["name"] for g in facts[0].gpus] == ["NVIDIA H100 80GB HBM3"] * 2 and facts[0].driver == "550.54.15"
    assert abs(facts[0].clock_skew_s) < 5
    vllm_on = validate_spec({**spec_for([h], [gpu_env], tmp_path).model_dump(),
                             "rollout": {"use_vllm": True, "vllm_mode": "colocate"}})
    _, findings = preflight(vllm_on, Pool())
    assert any(f.id == "PREFLIGHT-NO-VLLM" and h.name in f.message for f in findings)


def test_each_problem_is_found_and_names_the_host(ssh_env, gpu_env, tmp_path):
    a, b = ssh_env.add(2)
    plain = tmp_path / "plain-venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(plain)], check=True)
    spec = spec_for([a, b], [gpu_env, plain], tmp_path)
    spec = validate_spec({**spec.model_dump(), "train": {**spec.train.model_dump(), "dataset": ["/no/such.jsonl"]},
                          "cluster": {**spec.cluster.model_dump(), "nodes": [
                              {**spec.cluster.nodes[0].model_dump(), "gpus": [1, 9]},
                              {**spec.cluster.nodes[1].model_dump(), "gpus": [1, 9]}]}})
    _, findings = preflight(spec, Pool())
    by_id = {}
    for f in findings:
        by_id.setdefault(f.id, []).append(f.message)
    assert any(b.name in m and "ms-swift is not installed" in m for m in by_id["PREFLIGHT-NO-SWIFT"])
    assert any("ms-swift differs" in m for m in by_id["PREFLIGHT-VERSION-MISMATCH"])
    assert any("/no/such.jsonl does not exist" in m for m in by_id["PREFLIGHT-PATH-MISSING"])
    assert any("[9] do not exist" in m for m in by_id["PREFLIGHT-GPU-MISSING"])
    assert any("GPU(s) [1] already hold memory" in m for m in by_id["PREFLIGHT-GPU-BUSY"])


def test_master_port_taken_and_unreachable_master(ssh_env, gpu_env, tmp_path):
    a, b = ssh_env.add(2)
    listener = subprocess.Popen(["ip", "netns", "exec", a.ns, sys.executable, "-c",
                                 "import socket,time; s=socket.socket(); s.bind(('127.0.0.1', 29500)); s.listen(); "
                                 "time.sleep(60)"])
    try:
        for _ in range(50):
            if subprocess.run(["ip", "netns", "exec", a.ns, "bash", "-c", "exec 3<>/dev/tcp/127.0.0.1/29500"],
                              capture_output=True).returncode == 0:
                break
        _, findings = preflight(spec_for([a, b], [gpu_env, gpu_env], tmp_path, master_addr=a.addr), Pool())
        assert "PREFLIGHT-PORT-TAKEN" in ids(findings)
    finally:
        listener.kill()
    _, findings = preflight(spec_for([a, b], [gpu_env, gpu_env], tmp_path, master_addr=f"10.{ssh_env.subnet}.0.249"),
                            Pool())
    assert any(b.name in f.message for f in findings if f.id == "PREFLIGHT-MASTER-UNREACHABLE")
    _, ok = preflight(spec_for([a, b], [gpu_env, gpu_env], tmp_path, master_addr=a.addr), Pool())
    assert not {"PREFLIGHT-PORT-TAKEN", "PREFLIGHT-MASTER-UNREACHABLE"} & ids(ok)


def test_unknown_key_wrong_user_and_unreachable_host(ssh_env, gpu_env, tmp_path):
    (a,) = ssh_env.add(1, trusted=False)
    (b,) = ssh_env.add(1)
    spec = spec_for([a, b], [gpu_env, gpu_env], tmp_path)
    nodes = [n.model_dump() for n in spec.cluster.nodes]
    nodes[1]["user"] = "nobody"
    nodes.append({"host": f"10.{ssh_env.subnet}.0.248", "user": "root", "gpus": [0]})
    spec = validate_spec({**spec.model_dump(), "cluster": {**spec.cluster.model_dump(), "nodes": nodes}})
    facts, findings = preflight(spec, Pool())
    msgs = {f.id: [] for f in findings}
    for f in findings:
        msgs[f.id].append(f.message)
    assert any(a.name in m and "SHA256:" in m for m in msgs["PREFLIGHT-UNKNOWN-HOST-KEY"])
    unreachable = " ".join(msgs["PREFLIGHT-UNREACHABLE"])
    assert "authentication failed for user 'nobody'" in unreachable and "cannot connect" in unreachable
    assert all(f.error for f in facts)
