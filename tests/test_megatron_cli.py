"""The command line on Megatron jobs (issue 29): import, validate, args, render and estimate, each as a user runs it
(`python -m grpo_ui …` in a subprocess): the right exit code, the output a user reads, never a traceback. estimate
gives a Megatron job, Ray mode's too, its memory and step time."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from grpo_ui.spec.yaml_io import spec_from_yaml

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data" / "megatron"


def cli(home: Path, *args):
    """``python -m grpo_ui ARGS`` from the repository root, with ``home`` as HOME (grpo-ui's data directory)."""
    return subprocess.run([sys.executable, "-m", "grpo_ui", *map(str, args)], capture_output=True, text=True, cwd=ROOT,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "HOME": str(home)}, timeout=120)


def imported(tmp_path, *scripts) -> Path:
    out = cli(tmp_path, "import", *scripts)
    assert out.returncode == 0 and "Traceback" not in out.stderr, out.stderr
    path = tmp_path / "job.yaml"
    path.write_text(out.stdout)
    return path


def test_import_validate_args_render_of_a_moe_job(tmp_path):
    job = imported(tmp_path, DATA / "moe_full.sh")
    spec = spec_from_yaml(job.read_text())
    assert spec.engine == "megatron" and spec.train.expert_model_parallel_size == 4
    validated = cli(tmp_path, "validate", job)
    assert validated.returncode == 0 and "0 error(s)" in validated.stdout
    args = cli(tmp_path, "args", job)
    assert args.returncode == 0 and "megatron rlhf --rlhf_type grpo" in args.stdout
    assert "--expert_model_parallel_size 4" in args.stdout
    rendered = cli(tmp_path, "render", job, "--out", tmp_path / "out", "--job-id", "moe")
    assert rendered.returncode == 0 and (tmp_path / "out" / "node_0.sh").exists()
    assert "megatron rlhf" in (tmp_path / "out" / "node_0.sh").read_text()


def test_validate_names_a_megatron_rule_and_exits_1(tmp_path):
    job = imported(tmp_path, DATA / "dense_colocate.sh")
    job.write_text(job.read_text().replace("global_batch_size: 64", "global_batch_size: 60"))
    out = cli(tmp_path, "validate", job, "--json")
    assert out.returncode == 1
    assert "MEGATRON-GLOBAL-BATCH" in {f["id"] for f in json.loads(out.stdout)}


@pytest.mark.parametrize("script", ["moe_lora.sh", "ray_separate/run_separate.sh"])
def test_estimate_gives_a_megatron_job_memory_and_time(tmp_path, script):
    job = imported(tmp_path, DATA / script)
    out = cli(tmp_path, "estimate", job, "--gpu", "H100 80GB", "--json")
    assert out.returncode == 0 and "Traceback" not in out.stderr
    report = json.loads(out.stdout)
    assert "Megatron-Core" in " ".join(report["assumptions"]) and report["time"]["step_s"] > 0
    roles = [r["role"] for r in report["roles"]]
    assert roles == (["trainer", "rollout"] if "separate" in script else ["trainer"])


def test_a_ray_job_on_the_command_line(tmp_path):
    job = imported(tmp_path, DATA / "ray_separate" / "run_separate.sh")  # the config beside it is read
    spec = spec_from_yaml(job.read_text())
    assert spec.train.use_ray and [n.role for n in spec.cluster.nodes] == ["trainer", "rollout"]
    args = cli(tmp_path, "args", job)
    assert args.stdout.rstrip().endswith("megatron rlhf --use_ray true --config ray_config.yaml")
    assert yaml.safe_load(args.stdout.split("\nmegatron rlhf")[0])["rollout"]["gpus"] == 4
    rendered = cli(tmp_path, "render", job, "--out", tmp_path / "out", "--job-id", "ray")
    assert rendered.returncode == 1 and "RAY-BACKEND" in rendered.stdout  # written all the same, to read
    assert (tmp_path / "out" / "ray_config.yaml").exists() and (tmp_path / "out" / "ray_job.sh").exists()
    alone = imported(tmp_path, DATA / "ray_colocate" / "grpo_colocate.yaml")
    assert spec_from_yaml(alone.read_text()).train.use_ray


def test_flags_lists_the_engines(tmp_path):
    out = cli(tmp_path, "flags")
    assert out.returncode == 0 and "| `train.micro_batch_size` | megatron |" in out.stdout
    assert "| `train.per_device_train_batch_size` | swift |" in out.stdout
