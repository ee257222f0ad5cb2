"""Rendering a Megatron job (issue 29, item 7): one script per trainer node that runs megatron rlhf with the torchrun
variables of ms-swift's multi-node example (NPROC_PER_NODE, NNODES, NODE_RANK, MASTER_ADDR, MASTER_PORT) — what bash
really runs is read with a recording `megatron` on PATH —, the same through Slurm's batch script, and a Ray-mode job
as ms-swift's Ray config plus the driver's script, the bundle's RayJob being the Ray backend's whole input.
"""

import json
import subprocess

import yaml

from grpo_ui.launch.plan import make_plan
from grpo_ui.launch.render import RAY_CONFIG, RAY_SCRIPT, render, write_bundle
from grpo_ui.spec.model import JobSpec
from grpo_ui.spec.paths import with_changes
from grpo_ui.spec.swift_cli import train_command

RECORDER = """#!/bin/bash
printf '%s\\0' "$0" "$@" > "$REC_DIR/argv.$NODE_RANK_OR"
env -0 > "$REC_DIR/env.$NODE_RANK_OR"
"""


def megatron(**changes) -> JobSpec:
    return with_changes(JobSpec(engine="megatron"), {
        "train.model": "Qwen/Qwen3-30B-A3B-Instruct-2507", "train.dataset": ["d.jsonl"],
        "train.reward_funcs": ["accuracy"], "rollout.vllm_mode": "colocate", "train.tensor_model_parallel_size": 4,
        "train.expert_model_parallel_size": 4, "train.global_batch_size": 16, "train.finetune": True,
        "train.no_save_optim": True, "cluster.master_addr": "10.0.0.1", "cluster.master_port": 29600,
        "cluster.nodes": [{"host": "10.0.0.1", "gpus": [0, 1, 2, 3]}, {"host": "10.0.0.2", "gpus": [0, 1, 2, 3]}],
        **changes})


def run(tmp_path, name: str, text: str) -> tuple[list[str], dict[str, str]]:
    """What bash runs: the recording `megatron` stub's argv and environment."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "megatron").write_text(RECORDER.replace("$NODE_RANK_OR", "${NODE_RANK:-driver}"))
    (bin_dir / "megatron").chmod(0o755)
    script = tmp_path / name
    script.write_text(text)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": str(tmp_path), "REC_DIR": str(tmp_path)}
    proc = subprocess.run(["bash", str(script)], capture_output=True, env=env, timeout=30, text=True)
    assert proc.returncode == 0, proc.stderr
    rank = text.split("export NODE_RANK=")[1].split("\n")[0] if "export NODE_RANK=" in text else "driver"
    argv = (tmp_path / f"argv.{rank}").read_text().split("\0")[:-1]
    env_out = dict(e.split("=", 1) for e in (tmp_path / f"env.{rank}").read_text().split("\0")[:-1])
    return argv, env_out


def test_each_node_script_runs_megatron_rlhf_with_the_torchrun_variables(tmp_path):
    spec = megatron(**{"cluster.run_root": str(tmp_path / "runs")})
    bundle = render(spec, "job-1")
    cmd = train_command(spec)
    for rank in (0, 1):
        argv, env = run(tmp_path, f"node_{rank}.sh", bundle.files[f"node_{rank}.sh"])
        assert argv[0].endswith("/megatron") and argv[1:] == cmd.argv
        assert {k: env[k] for k in ("NPROC_PER_NODE", "NNODES", "NODE_RANK", "MASTER_ADDR", "MASTER_PORT",
                                    "CUDA_VISIBLE_DEVICES")} == {
            "NPROC_PER_NODE": "4", "NNODES": "2", "NODE_RANK": str(rank), "MASTER_ADDR": "10.0.0.1",
            "MASTER_PORT": "29600", "CUDA_VISIBLE_DEVICES": "0,1,2,3"}
    assert argv[1:5] == ["rlhf", "--rlhf_type", "grpo", "--model"]
    assert "--tensor_model_parallel_size" in argv and "--finetune" in argv
    a, b = bundle.files["node_0.sh"], bundle.files["node_1.sh"]
    assert [x for x, y in zip(a.splitlines(), b.splitlines(), strict=True) if x != y] == ["export NODE_RANK=0"]


def test_the_slurm_batch_script_and_the_yaml_configs_run_megatron_too():
    bundle = render(megatron(**{"cluster.backend": "slurm"}), "job-1")
    assert "\n  setsid megatron rlhf \\\n" in bundle.files["job.sbatch"]
    assert "export NPROC_PER_NODE=4" in bundle.files["job.sbatch"]
    config = yaml.safe_load(bundle.files["swift_1.yaml"])
    assert config["ENV"]["NODE_RANK"] == "1" and config["tensor_model_parallel_size"] == 4
    assert config["rlhf_type"] == "grpo" and config["finetune"] is True
    assert "megatron rlhf swift_<rank>.yaml" in bundle.files["README.txt"]


def test_shellcheck_passes_on_megatron_and_ray_scripts(tmp_path):
    paths = write_bundle(render(megatron(), "job-1"), tmp_path / "torchrun")
    paths += write_bundle(render(megatron(**{"train.use_ray": True, "rollout.vllm_mode": None,
                                             "train.train_iters": 10}), "job-1"), tmp_path / "ray")
    scripts = [str(p) for p in paths if p.name.endswith((".sh", ".sbatch"))]
    assert any(s.endswith(RAY_SCRIPT) for s in scripts)
    proc = subprocess.run(["shellcheck", "--shell=bash", *scripts], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout


def test_a_ray_job_is_its_config_and_the_driver_that_reads_it(tmp_path):
    """Colocated: no rollout nodes, so train and rollout share the 8 GPUs (colocate_groups [[train, rollout]]),
    split over the two nodes (nnodes 2), sleep_level 1 by default; the driver runs without torchrun variables."""
    spec = megatron(**{"train.use_ray": True, "rollout.vllm_mode": None, "train.train_iters": 10,
                       "train.tuner_type": "lora", "rollout.offload_model": True, "env": {"MAX_PIXELS": "602112"},
                       "cluster.run_root": str(tmp_path / "runs")})
    bundle = render(spec, "job-1")
    assert sorted(bundle.files) == ["README.txt", RAY_CONFIG, RAY_SCRIPT, "secrets.env.example"]
    assert not bundle.node_files and not bundle.rollout_files  # nothing for the SSH or Slurm node scripts
    config = yaml.safe_load(bundle.files[RAY_CONFIG])
    assert config["colocate_groups"] == [["train", "rollout"]] and config["nnodes"] == 2
    assert config["sleep_level"] == 1 and config["offload_model"] is True and config["model"] == spec.train.model
    assert config["train"]["gpus"] == 8 == config["rollout"]["gpus"]
    assert config["train"]["tensor_model_parallel_size"] == 4 and config["train"]["tuner_type"] == "lora"
    assert "vllm_mode" not in json.dumps(config) and "use_ray" not in config
    ray = bundle.ray
    assert (ray.script, ray.config) == (RAY_SCRIPT, RAY_CONFIG)  # what the Ray backend submits
    assert ray.entrypoint(str(tmp_path / "runs" / "job-1")) == f"cd {tmp_path}/runs/job-1 && bash --norc {RAY_SCRIPT}"
    argv, env = run(tmp_path, RAY_SCRIPT, bundle.files[RAY_SCRIPT])
    assert argv[1:] == ["rlhf", "--use_ray", "true", "--config", str(tmp_path / "runs" / "job-1" / RAY_CONFIG)]
    assert not {"NPROC_PER_NODE", "NNODES", "NODE_RANK"} & set(env) and env["MAX_PIXELS"] == "602112"


def test_a_separate_ray_job_gives_rollout_its_own_gpus_and_server_arguments():
    spec = megatron(**{"train.use_ray": True, "rollout.vllm_mode": None, "train.num_train_epochs": 1,
                       "server.vllm_tensor_parallel_size": 2, "server.vllm_gpu_memory_utilization": 0.8,
                       "cluster.nodes": [{"host": "10.0.0.1", "gpus": [0, 1, 2, 3]},
                                         {"host": "10.0.0.2", "gpus": [0, 1, 2, 3], "role": "rollout"}]})
    config = yaml.safe_load(render(spec, "job-1").files[RAY_CONFIG])
    assert "colocate_groups" not in config and "nnodes" not in config and config["sleep_level"] == 0
    assert config["train"]["gpus"] == 4 and config["train"]["global_batch_size"] == 16  # the driver needs it
    assert config["rollout"] == {"gpus": 4, "vllm_tensor_parallel_size": 2, "vllm_gpu_memory_utilization": 0.8}


def test_a_ray_plan_has_every_node_ray_places_its_roles_on_and_no_script_for_them():
    """The plan of a Ray-mode job keeps the cluster's nodes (Ray places the roles there: the backend sends them the
    config and secrets file, the watcher and telemetry follow them) with their numbers, but no node script: the
    bundle's RayJob is what runs. On the SSH backend it is refused with the Ray backend as the fix."""
    ray_mode = {"train.use_ray": True, "rollout.vllm_mode": None, "train.train_iters": 10}
    plan = make_plan(megatron(**ray_mode), "j")
    assert plan.bundle.ray is not None and not {n.script for n in plan.nodes} & set(plan.bundle.files)
    assert [(n.index, n.role, n.rank) for n in plan.nodes] == [(0, "trainer", 0), (1, "trainer", 1)]
    refused = next(f for f in plan.errors if f.id == "RAY-BACKEND")
    assert refused.apply == {"cluster.backend": "ray"} and "cluster.backend to ray" in refused.fix
    assert "RAY-BACKEND" not in {f.id for f in make_plan(megatron(**ray_mode, **{"cluster.backend": "ray"}), "j").errors}
