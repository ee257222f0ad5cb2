"""Preflight against real sshd hosts: a healthy host, and each failure made on purpose.

GPU facts come from an `nvidia-smi` stand-in on the node's PATH that prints lines in nvidia-smi's documented
formats: the --query-gpu / --query-compute-apps CSV (noheader, nounits) and the header of the plain table, whose
"CUDA Version" is the newest CUDA the driver supports (no GPU machine was available to capture from; see
tests/data/nvidia-smi/README.md)."""

import contextlib
import shutil
import subprocess
import sys

import pytest

from grpo_ui.backends.preflight import preflight
from grpo_ui.backends.remote.ssh import Pool
from grpo_ui.spec.yaml_io import validate_spec
from tests.tiny_job import SWIFT_VENV
from tests.wait import wait_for

GPU0, GPU1 = "GPU-0b7c3a6e-2b4d-4c8e-9f10-1a2b3c4d5e6f", "GPU-5f1c9d2a-7e3b-4f6a-8c1d-2e3f4a5b6c7d"
SMI = """#!/bin/bash
case "$*" in
  *--query-gpu*) printf '0, %(gpu0)s, NVIDIA H100 80GB HBM3, 81559, %(used0)s, 550.54.15\\n'
                 printf '1, %(gpu1)s, NVIDIA H100 80GB HBM3, 81559, 40211, 550.54.15\\n' ;;
  *--query-compute-apps*) printf '%(gpu1)s, 4242, 40200\\n%(apps0)s' ;;
  "") date
      echo "+-----------------------------------------------------------------------------------------+"
      echo "| NVIDIA-SMI 550.54.15             Driver Version: 550.54.15      CUDA Version: %(cuda)s     |"
      echo "|-----------------------------------------+------------------------+----------------------+" ;;
esac
"""


def smi(cuda="12.4", apps0=""):
    """The stand-in's text: GPU 1 runs pid 4242; ``apps0`` adds compute-app lines for GPU 0."""
    used0 = 1 + sum(int(line.split(",")[2]) for line in apps0.splitlines())
    return SMI % {"gpu0": GPU0, "gpu1": GPU1, "cuda": cuda, "apps0": apps0.replace("\n", "\\n"), "used0": used0}


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
    (d / "nvidia-smi").write_text(smi())
    (d / "nvidia-smi").chmod(0o755)
    (tmp_path / "data.jsonl").write_text("{}\n")
    return d.parent


def wait_until_open(ns: str, addr: str, port: int) -> None:
    """Until a connection to ``addr:port`` from namespace ``ns`` succeeds (the process listening there started)."""
    if not wait_for(lambda: subprocess.run(["ip", "netns", "exec", ns, "bash", "-c", f"exec 3<>/dev/tcp/{addr}/{port}"],
                                           capture_output=True).returncode == 0, 120, 0.05):
        raise AssertionError(f"nothing listens on {addr}:{port} in {ns}")


@contextlib.contextmanager
def listening(ns: str, addr: str, port: int):
    """A process in namespace ``ns`` holding ``addr:port`` open for the duration of the block."""
    listener = subprocess.Popen(["ip", "netns", "exec", ns, sys.executable, "-c",
                                 f"import socket,time; s=socket.socket(); s.bind(({addr!r}, {port})); s.listen(); "
                                 "time.sleep(60)"])
    try:
        wait_until_open(ns, "127.0.0.1", port)
        yield
    finally:
        listener.kill()


def ids(findings):
    return {f.id for f in findings}


def test_healthy_host_reports_versions_and_gpus(ssh_env, gpu_env, tmp_path):
    (h,) = ssh_env.add(1)
    facts, findings = preflight(spec_for([h], [gpu_env], tmp_path), Pool())
    assert not [f for f in findings if f.severity == "error"], findings
    assert facts[0].versions["ms-swift"].startswith("4.6") and facts[0].versions["vllm"] is None
    assert [g["name"] for g in facts[0].gpus] == ["NVIDIA H100 80GB HBM3"] * 2 and facts[0].driver == "550.54.15"
    assert facts[0].driver_cuda == "12.4" and facts[0].torch_cuda is None  # the real CPU build of torch
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
    assert any("GPU(s) [1] are in use" in m and "pid 4242 (40200 MiB)" in m for m in by_id["PREFLIGHT-GPU-BUSY"])


def test_relative_paths_are_checked_from_the_workdir_swift_runs_in(ssh_env, gpu_env, tmp_path):
    """ms-swift resolves relative model/dataset paths from its cwd, the node's workdir, not the login's home."""
    (h,) = ssh_env.add(1)
    spec = spec_for([h], [gpu_env], tmp_path, workdir=str(tmp_path))
    spec = validate_spec({**spec.model_dump(), "train": {**spec.train.model_dump(),
                                                         "dataset": ["./data.jsonl", "./absent.jsonl#100"]}})
    _, findings = preflight(spec, Pool())
    missing = [f.message for f in findings if f.id == "PREFLIGHT-PATH-MISSING"]
    assert missing == [f"{h.name}: ./absent.jsonl does not exist in {tmp_path} (the working directory)."], missing


def test_master_port_taken_and_unreachable_master(ssh_env, gpu_env, tmp_path):
    a, b = ssh_env.add(2)
    with listening(a.ns, "127.0.0.1", 29500):
        _, findings = preflight(spec_for([a, b], [gpu_env, gpu_env], tmp_path, master_addr=a.addr), Pool())
        assert "PREFLIGHT-PORT-TAKEN" in ids(findings)
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


def test_gpu_processes_are_matched_to_the_requested_gpus_by_uuid(ssh_env, gpu_env, tmp_path):
    """GPU 1 is busy (pid 4242) but only GPU 0 is requested: a small process on GPU 0 is reported, 4242 is not."""
    (h,) = ssh_env.add(1)
    _, findings = preflight(spec_for([h], [gpu_env], tmp_path), Pool())
    assert "PREFLIGHT-GPU-BUSY" not in ids(findings)
    (gpu_env / "bin" / "nvidia-smi").write_text(smi(apps0=f"{GPU0}, 777, 300\n"))
    facts, findings = preflight(spec_for([h], [gpu_env], tmp_path), Pool())
    assert [g["processes"] for g in facts[0].gpus] == [[{"pid": 777, "used_mib": 300.0}],
                                                       [{"pid": 4242, "used_mib": 40200.0}]]
    (busy,) = [f.message for f in findings if f.id == "PREFLIGHT-GPU-BUSY"]
    assert "GPU(s) [0]" in busy and "pid 777 (300 MiB)" in busy and "4242" not in busy


TORCH_CU128 = {  # what a CUDA 12.8 wheel of torch installs, as far as preflight reads it (no CUDA wheel here)
    "torch/__init__.py": "raise ImportError('preflight must read torch/version.py, not import torch')\n",
    "torch/version.py": "from typing import Optional\n__version__ = '2.7.0+cu128'\ncuda: Optional[str] = '12.8'\n",
    "torch-2.7.0+cu128.dist-info/METADATA": "Metadata-Version: 2.1\nName: torch\nVersion: 2.7.0+cu128\n",
}


def test_driver_cuda_older_than_torch_cuda_is_an_error(ssh_env, tmp_path):
    (h,) = ssh_env.add(1)
    env = tmp_path / "cu128-env"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env)], check=True)
    site = next(env.glob("lib/python3*/site-packages"))
    for name, text in TORCH_CU128.items():
        (site / name).parent.mkdir(parents=True, exist_ok=True)
        (site / name).write_text(text)
    for driver_cuda, expect_error in (("12.4", True), ("12.8", False), ("13.0", False)):
        (env / "bin" / "nvidia-smi").write_text(smi(cuda=driver_cuda))
        (env / "bin" / "nvidia-smi").chmod(0o755)
        facts, findings = preflight(spec_for([h], [env], tmp_path), Pool())
        assert (facts[0].driver_cuda, facts[0].torch_cuda) == (driver_cuda, "12.8")
        errors = [f.message for f in findings if f.id == "PREFLIGHT-CUDA-DRIVER"]
        assert bool(errors) == expect_error, (driver_cuda, errors)
        assert all(h.name in m and "CUDA up to 12.4" in m and "built for CUDA 12.8" in m for m in errors)


def test_server_mode_checks_http_and_group_ports_on_the_rollout_node(ssh_env, gpu_env, tmp_path):
    trainer, roll = ssh_env.add(2)
    base = spec_for([trainer, roll], [gpu_env, gpu_env], tmp_path).model_dump()
    base["cluster"]["nodes"][1]["role"] = "rollout"

    def server_spec(address):
        base["cluster"]["nodes"][1]["address"] = address
        return validate_spec({**base, "rollout": {"use_vllm": True, "vllm_mode": "server",
                                                  "vllm_server_group_port": [18124]}, "server": {"port": 18123}})

    def port_findings(spec):
        return sorted((f.id, f.severity, f.fields[0]) for f in preflight(spec, Pool())[1]
                      if f.id in ("PREFLIGHT-PORT-TAKEN", "PREFLIGHT-ROLLOUT-UNREACHABLE"))
    assert port_findings(server_spec(roll.addr)) == []
    with listening(roll.ns, "0.0.0.0", 18124):
        assert port_findings(server_spec(roll.addr)) == [
            ("PREFLIGHT-PORT-TAKEN", "error", "rollout.vllm_server_group_port")]
    # an address of the rollout node that rank 0 cannot reach: both ports are reported, as errors
    assert port_findings(server_spec(f"10.{ssh_env.subnet}.0.246")) == [
        ("PREFLIGHT-ROLLOUT-UNREACHABLE", "error", "rollout.vllm_server_group_port"),
        ("PREFLIGHT-ROLLOUT-UNREACHABLE", "error", "server.port")]
    # a server outside the cluster (vllm_server_host) that is not up: only probed, so warnings
    external = validate_spec({**base, "cluster": {**base["cluster"], "nodes": base["cluster"]["nodes"][:1]},
                              "rollout": {"use_vllm": True, "vllm_mode": "server", "vllm_server_host": [roll.addr],
                                          "vllm_server_port": [18123]}})
    assert port_findings(external) == [
        ("PREFLIGHT-ROLLOUT-UNREACHABLE", "warning", "rollout.vllm_server_group_port"),
        ("PREFLIGHT-ROLLOUT-UNREACHABLE", "warning", "rollout.vllm_server_port")]


def test_local_node_falls_back_cleanly_from_nvml_to_nvidia_smi(gpu_env, tmp_path):
    """nvidia-ml-py is installed here but there is no NVIDIA driver: NVML fails to start and the stand-in answers."""
    import pynvml
    with pytest.raises(pynvml.NVMLError):
        pynvml.nvmlInit()
    spec = validate_spec({**spec_for([], [], tmp_path).model_dump(), "cluster": {
        "run_root": str(tmp_path / "runs"), "nodes": [{"host": "localhost", "gpus": [0], "python_env": str(gpu_env)}]}})
    facts, findings = preflight(spec, Pool())
    assert facts[0].gpu_source == "nvidia-smi" and [g["gpu_uuid"] for g in facts[0].gpus] == [GPU0, GPU1]
    assert facts[0].driver_cuda == "12.4" and facts[0].torch_cuda is None  # the real CPU build of torch
    assert not [f for f in findings if f.severity == "error"], findings


# Issue 26: what would fail on the nodes after launch, checked on each node before it.

@contextlib.contextmanager
def health_server(ns: str, addr: str, port: int):
    """A process in namespace ``ns`` answering GET /health/ with 200 on ``addr:port``, as swift rollout does once its
    model is loaded."""
    code = ("import http.server as h\nclass H(h.BaseHTTPRequestHandler):\n    def do_GET(self):\n"
            "        self.send_response(200 if self.path == '/health/' else 404); self.end_headers()\n"
            "    def log_message(self, *a): pass\n"
            f"h.HTTPServer(({addr!r}, {port}), H).serve_forever()\n")
    server = subprocess.Popen(["ip", "netns", "exec", ns, sys.executable, "-c", code])
    try:
        wait_until_open(ns, addr, port)
        yield
    finally:
        server.kill()
        server.wait()


def test_a_rollout_server_started_outside_the_job_must_answer_before_launch(ssh_env, gpu_env, tmp_path):
    """ms-swift's external-mode examples: the trainer talks to a server the user starts by hand. Not up: an error
    from trainer rank 0 (node_0.sh would wait 240 s and exit 3); up: nothing to say."""
    trainer, roll = ssh_env.add(2)
    spec = validate_spec({**spec_for([trainer], [gpu_env], tmp_path, external_rollout=True).model_dump(),
                          "rollout": {"use_vllm": True, "vllm_mode": "server", "vllm_server_host": [roll.addr],
                                      "vllm_server_port": [18125]}})
    down = [f for f in preflight(spec, Pool())[1] if f.id == "PREFLIGHT-ROLLOUT-DOWN"]
    assert len(down) == 1 and down[0].severity == "error" and f"{roll.addr}:18125" in down[0].message
    assert trainer.name in down[0].message and "exit 3" in down[0].message
    with health_server(roll.ns, roll.addr, 18125):
        _, findings = preflight(spec, Pool())
    assert not {"PREFLIGHT-ROLLOUT-DOWN", "PREFLIGHT-ROLLOUT-UNREACHABLE"} & ids(findings)


def test_files_the_job_names_are_found_from_the_working_directory_on_each_node(ssh_env, gpu_env, tmp_path):
    """The plugin and the system prompt file of ms-swift's examples are relative to where the script ran."""
    (h,) = ssh_env.add(1)
    work = tmp_path / "ms-swift"
    (work / "examples/train/grpo/plugin").mkdir(parents=True)
    (work / "examples/train/grpo/plugin/plugin.py").write_text("# registers external_math_acc\n")
    spec = spec_for([h], [gpu_env], tmp_path, workdir=str(work))
    spec = validate_spec({**spec.model_dump(), "train": {
        **spec.train.model_dump(), "external_plugins": ["examples/train/grpo/plugin/plugin.py"],
        "system": "examples/train/grpo/prompt.txt", "reward_funcs": ["external_math_acc"]}})
    missing = [(f.fields, f.message) for f in preflight(spec, Pool())[1] if f.id == "PREFLIGHT-PATH-MISSING"]
    assert missing == [(("train.system",), f"{h.name}: examples/train/grpo/prompt.txt does not exist in {work} (the "
                                           "working directory).")]
    gone = validate_spec({**spec.model_dump(), "cluster": {**spec.cluster.model_dump(),
                                                           "workdir": str(tmp_path / "absent")}})
    workdir = [f for f in preflight(gone, Pool())[1] if f.id == "PREFLIGHT-WORKDIR-MISSING"]
    assert len(workdir) == 1 and "cd" in workdir[0].message and workdir[0].fields == ("cluster.workdir",)


def test_a_tracker_key_neither_declared_nor_logged_in_on_the_node_is_an_error(ssh_env, gpu_env, tmp_path):
    """report_to wandb: the node must have WANDB_API_KEY or a `wandb login` (~/.netrc), or the Launch page must ask
    for it (secret_env). The node's home is the job's HOME here, not the test machine's."""
    (h,) = ssh_env.add(1)
    home = tmp_path / "node-home"
    home.mkdir()
    spec = spec_for([h], [gpu_env], tmp_path)
    data = spec.model_dump()
    data["train"]["report_to"] = ["tensorboard", "wandb"]
    data["cluster"]["nodes"][0]["env"] = {"HOME": str(home)}
    wandb = validate_spec(data)
    (f,) = [f for f in preflight(wandb, Pool())[1] if f.id == "PREFLIGHT-CREDENTIAL-MISSING"]
    assert "WANDB_API_KEY" in f.message and h.name in f.message and f.apply == {"secret_env": ["WANDB_API_KEY"]}
    (home / ".netrc").write_text("machine api.wandb.ai\n  login user\n  password 0123456789abcdef\n")
    assert "PREFLIGHT-CREDENTIAL-MISSING" not in ids(preflight(wandb, Pool())[1])
    declared = validate_spec({**data, "secret_env": ["WANDB_API_KEY"]})
    (home / ".netrc").unlink()
    assert "PREFLIGHT-CREDENTIAL-MISSING" not in ids(preflight(declared, Pool())[1])


def test_no_gpu_is_an_error_for_a_node_that_asks_for_gpus_and_a_warning_on_a_cpu_run(ssh_env, tmp_path):
    """A host without nvidia-smi (the ms-swift venv as it is here) for a node asking for six H100s: the job would fail
    there, so preflight says so as an error naming the host and what was asked (issue 32, first-hour defect 5); the
    same host for a CPU run (ACCELERATE_USE_CPU=true, as the tiny test job runs) is only a warning."""
    (h,) = ssh_env.add(1)
    spec = spec_for([h], [SWIFT_VENV], tmp_path)
    six = validate_spec({**spec.model_dump(), "cluster": {**spec.cluster.model_dump(), "nodes": [
        {**spec.cluster.nodes[0].model_dump(), "gpus": list(range(6)), "gpu_model": "NVIDIA H100 80GB HBM3"}]}})
    _, findings = preflight(six, Pool())
    (f,) = [f for f in findings if f.id == "PREFLIGHT-NO-GPU"]
    assert f.severity == "error" and f.fields == ("cluster.nodes[0].gpus",)
    assert h.name in f.message and "6 GPU(s) (NVIDIA H100 80GB HBM3)" in f.message
    _, findings = preflight(validate_spec({**six.model_dump(), "env": {"ACCELERATE_USE_CPU": "true"}}), Pool())
    assert [f.severity for f in findings if f.id == "PREFLIGHT-NO-GPU"] == ["warning"]
