"""Node scripts from one rendering: identical but for NODE_RANK, shell-clean, exports that real ms-swift reads."""

import difflib
import http.server
import json
import os
import subprocess
import threading
import zipfile
from io import BytesIO

import pytest
import yaml

from grpo_ui.checks.assess import assess
from grpo_ui.launch.render import render, write_bundle
from grpo_ui.spec.model import JobSpec
from grpo_ui.spec.paths import with_changes
from grpo_ui.spec.swift_cli import train_command

BASE = {"train.model": "Qwen/Qwen2.5-7B-Instruct", "train.dataset": ["AI-MO/NuminaMath-TIR#1000"],
        "train.reward_funcs": ["accuracy", "format"], "train.system": "You're a 'tutor': $HOME `id`",
        "env": {"NCCL_DEBUG": "INFO"}, "secret_env": ["WANDB_API_KEY"], "rollout.use_vllm": True,
        "rollout.vllm_mode": "colocate"}


def cluster(n, **node):
    return {"cluster.nodes": [{"host": f"10.9.0.{k + 1}", "gpus": [0, 1, 2, 3], **node} for k in range(n)]}


def spec(**changes):
    return with_changes(JobSpec(), {**BASE, **changes})


def changed_lines(a: str, b: str) -> list[str]:
    return [d for d in difflib.unified_diff(a.splitlines(), b.splitlines(), lineterm="", n=0)
            if d[:1] in "+-" and not d.startswith(("+++", "---"))]


@pytest.mark.parametrize("n", [2, 4, 16])
def test_node_scripts_differ_only_in_node_rank(n):
    bundle = render(spec(**cluster(n)), "job-1")
    scripts = [bundle.files[f"node_{r}.sh"] for r in range(n)]
    for r in range(1, n):
        assert changed_lines(scripts[0], scripts[r]) == ["-export NODE_RANK=0", f"+export NODE_RANK={r}"]
    assert all(f"export NNODES={n}" in s and "export MASTER_ADDR=10.9.0.1" in s for s in scripts)
    assert not [f for f in bundle.findings if f.severity == "error"]
    assert not [f for f in assess(spec(**cluster(n))).findings if f.severity == "error"]


def test_per_node_settings_show_in_the_diff_and_as_findings():
    nodes = cluster(3)["cluster.nodes"]
    nodes[2] = {**nodes[2], "python_env": "/opt/other-env", "env": {"NCCL_IB_DISABLE": "1"}}
    a = assess(spec(**{"cluster.nodes": nodes}))
    bundle = render(a, "job-1")
    diff = changed_lines(bundle.files["node_0.sh"], bundle.files["node_2.sh"])
    assert "+export NCCL_IB_DISABLE=1" in diff and any("/opt/other-env" in d for d in diff)
    fields = {f for x in a.findings if x.id == "SEED-NODE-DIFFER" for f in x.fields}
    assert fields == {"cluster.nodes[2].env", "cluster.nodes[2].python_env"}


def test_loopback_master_with_several_nodes_is_an_error():
    a = assess(spec(**cluster(2), **{"cluster.master_addr": "127.0.0.1"}))
    assert "MASTER-LOOPBACK" in {f.id for f in a.findings if f.severity == "error"}


def test_secrets_never_in_script_text_and_zip_has_everything(tmp_path):
    s = spec(**cluster(2))
    bundle = render(s, "job-1")
    z = zipfile.ZipFile(BytesIO(bundle.zip_bytes()))
    names = set(z.namelist())
    assert {"job-1/node_0.sh", "job-1/node_1.sh", "job-1/swift_0.yaml", "job-1/job.sbatch", "job-1/README.txt",
            "job-1/secrets.env.example"} <= names
    assert z.getinfo("job-1/node_0.sh").external_attr >> 16 == 0o755
    assert z.read("job-1/secrets.env.example").decode() == "WANDB_API_KEY=\n"
    assert "node_1.sh" in z.read("job-1/README.txt").decode()
    paths = write_bundle(bundle, tmp_path)
    assert all(os.access(p, os.X_OK) == p.name.endswith((".sh", ".sbatch")) for p in paths)


def test_rendered_scripts_pass_shellcheck(tmp_path):
    s = spec(**{"rollout.vllm_mode": "server", "cluster.nodes": [
        {"host": "t0", "gpus": [0, 1], "python_env": "~/envs/swift"}, {"host": "t1", "gpus": [0, 1]},
        {"host": "r0", "role": "rollout", "gpus": [0, 1]}], "server.vllm_data_parallel_size": 2})
    paths = [p for p in write_bundle(render(s, "job-1"), tmp_path) if p.name.endswith((".sh", ".sbatch"))]
    assert {p.name for p in paths} == {"node_0.sh", "node_1.sh", "rollout_0.sh", "job.sbatch"}
    proc = subprocess.run(["shellcheck", "--shell=bash", *map(str, paths)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout
    sbatch = (tmp_path / "job.sbatch").read_text()
    assert sbatch.index("RUN_DIR=") < sbatch.index('cd "$RUN_DIR"')  # set -u: RUN_DIR must exist before use


def test_yaml_export_is_read_by_ms_swift_into_the_same_command(tmp_path, swift_python):
    s = spec(**cluster(2), **{"train.num_generations": 4, "rollout.sleep_level": 1, "train.system": "true",
                              "train.dataset": ["007", "1e5"]})
    bundle = render(s, "job-1")
    (tmp_path / "swift_1.yaml").write_text(bundle.files["swift_1.yaml"])
    probe = ("import json, os, sys; from swift.cli.main import parse_yaml_args; argv = [sys.argv[1]]; "
             "parse_yaml_args(argv); print(json.dumps({'argv': argv, 'rank': os.environ['NODE_RANK'], "
             "'nnodes': os.environ['NNODES'], 'master': os.environ['MASTER_ADDR']}))")
    env = {k: v for k, v in os.environ.items() if k not in ("NODE_RANK", "NNODES", "MASTER_ADDR")}
    out = subprocess.run([str(swift_python), "-c", probe, str(tmp_path / "swift_1.yaml")], capture_output=True,
                         text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    normal = [a.lower() if a in ("True", "False") else a for a in got["argv"]]
    assert normal == train_command(s).argv[1:]
    assert (got["rank"], got["nnodes"], got["master"]) == ("1", "2", "10.9.0.1")


def test_yaml_values_take_their_declared_type():
    s = spec(**cluster(2), **{"train.system": "true", "train.dataset": ["007"], "train.learning_rate": 2e-6,
                              "train.gradient_checkpointing": False, "train.num_generations": 8,
                              "extra_args": ["--my_flag", "1"]})
    data = yaml.safe_load(render(s, "job-1").files["swift_0.yaml"])
    assert data["system"] == "true" and data["dataset"] == ["007"]  # strings stay strings
    assert data["learning_rate"] == 2e-6 and data["gradient_checkpointing"] is False
    assert data["num_generations"] == 8 and data["my_flag"] == "1"  # undeclared: kept as typed


def test_relative_and_dash_paths_start_at_home_whatever_the_cwd(tmp_path):
    """run_root, workdir and python_env given relative (one starting with '-') mean the same place on every node."""
    home = tmp_path / "home"
    (home / "-env/bin").mkdir(parents=True)
    (home / "-env/bin/activate").write_text("export ACTIVATED=yes\n")
    (home / "my work").mkdir()
    (home / "bin").mkdir()
    (home / "bin/swift").write_text('#!/bin/sh\npwd > "$HOME/cwd"; echo "$ACTIVATED" > "$HOME/activated"\n')
    (home / "bin/swift").chmod(0o755)
    s = spec(**{"cluster.run_root": "-runs", "cluster.workdir": "my work",
                "cluster.nodes": [{"host": "localhost", "gpus": [0], "python_env": "-env"}]})
    (tmp_path / "elsewhere").mkdir()
    script = tmp_path / "node_0.sh"
    script.write_text(render(s, "job-1").files["node_0.sh"])
    env = {"PATH": f"{home / 'bin'}:/usr/bin:/bin", "HOME": str(home)}
    proc = subprocess.run(["bash", str(script)], capture_output=True, text=True, env=env, timeout=60,
                          cwd=tmp_path / "elsewhere")
    assert proc.returncode == 0, proc.stderr
    assert (home / "cwd").read_text().strip() == str(home / "my work")
    assert (home / "activated").read_text().strip() == "yes"
    assert (home / "-runs/job-1/exit_code.0").read_text().strip() == "0"


class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == "/health/" else 404)
        self.end_headers()
        self.wfile.write(b'{"status": "ok"}')

    def log_message(self, *args):
        pass


def run_node_script(tmp_path, s):
    (tmp_path / "bin").mkdir()
    rec = tmp_path / "bin" / "swift"
    rec.write_text('#!/bin/sh\necho started > "$RUN_DIR_REC/started"\n')
    rec.chmod(0o755)
    s = with_changes(s, {"cluster.run_root": str(tmp_path / "runs")})
    script = tmp_path / "node_0.sh"
    script.write_text(render(s, "job-1").files["node_0.sh"])
    env = {"PATH": f"{tmp_path / 'bin'}:/usr/bin:/bin", "HOME": str(tmp_path), "RUN_DIR_REC": str(tmp_path)}
    return subprocess.run(["bash", str(script)], capture_output=True, text=True, env=env, timeout=60)


def server_spec(port, timeout=4):
    return spec(**{"rollout.vllm_mode": "server", "rollout.vllm_server_host": ["127.0.0.1"],
                   "rollout.vllm_server_port": [port], "rollout.vllm_server_timeout": timeout})


def test_trainer_waits_for_rollout_health_then_starts(tmp_path):
    httpd = http.server.HTTPServer(("127.0.0.1", 0), Health)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        proc = run_node_script(tmp_path, server_spec(httpd.server_address[1]))
    finally:
        httpd.shutdown()
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "started").exists()
    assert (tmp_path / "runs/job-1/exit_code.0").read_text().strip() == "0"


def test_trainer_gives_up_on_a_dead_rollout_server_with_a_clear_message(tmp_path):
    import socket
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()  # nothing listens there now
    proc = run_node_script(tmp_path, server_spec(port, timeout=3))
    assert proc.returncode == 3 and f"127.0.0.1:{port} did not answer /health/ within 3 s" in proc.stderr
    assert not (tmp_path / "started").exists()
    assert (tmp_path / "runs/job-1/exit_code.0").read_text().strip() == "3"
