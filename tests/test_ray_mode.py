"""ms-swift's Ray mode in the library, without a cluster (the real cluster's tests are in test_ray.py): the placement
groups grpo-ui checks before submission are the ones ms-swift's own driver builds from the rendered config, whether
nodes can hold them, and what the CLI says a Ray-mode job runs on and submits."""

from __future__ import annotations

import json
import subprocess

import pytest
import yaml

from grpo_ui.backends.ray import secrets_package
from grpo_ui.launch.render import RAY_CONFIG, render
from grpo_ui.spec.megatron import PlacementGroup, unplaced
from grpo_ui.spec.model import JobSpec
from grpo_ui.spec.paths import with_changes
from grpo_ui.spec.resolve import resolve
from tests.test_megatron_cli import cli
from tests.tiny_job import swift_python

# ms-swift's own MegatronRayPipeline reads the config and builds its resource pools (pipeline.py _create_pools); only
# ResourcePoolManager.create_all, which would ask a running Ray cluster for the placement groups, is left out.
POOLS = r"""
import json, sys
from swift.ray.megatron import resource_pool
from swift.ray.megatron.pipeline import MegatronRayPipeline
resource_pool.ResourcePoolManager.create_all = lambda self: None
pipeline = MegatronRayPipeline(sys.argv[1])
pipeline._create_pools()
pools = {id(p): p for p in pipeline.resource_pool_manager._pools.values()}
print(json.dumps(sorted([p.process_on_nodes, p.max_colocate_count] for p in pools.values())))
"""


def ray_job(nodes: list[dict], **changes) -> JobSpec:
    return with_changes(JobSpec(engine="megatron"), {
        "train.model": "Qwen/Qwen3-8B", "train.dataset": ["d.jsonl"], "train.reward_funcs": ["accuracy"],
        "train.use_ray": True, "train.train_iters": 10, "train.global_batch_size": 64, "cluster.backend": "ray",
        "cluster.nodes": nodes, **changes})


def gpus(k: int) -> list[int]:
    return list(range(k))


@pytest.mark.parametrize("nodes", [
    [{"host": "10.0.0.1", "gpus": gpus(8)}],
    [{"host": "10.0.0.1", "gpus": gpus(4)}, {"host": "10.0.0.2", "gpus": gpus(4)}],
    [{"host": "10.0.0.1", "gpus": gpus(4)}, {"host": "10.0.0.2", "gpus": gpus(4), "role": "rollout"}],
    [{"host": "10.0.0.1", "gpus": gpus(8)}, {"host": "10.0.0.2", "gpus": gpus(8)},
     {"host": "10.0.0.3", "gpus": gpus(4), "role": "rollout"}],
], ids=["colocated-1", "colocated-2", "separate-1", "separate-2"])
def test_the_placement_groups_are_the_ones_ms_swift_builds_from_the_rendered_config(nodes, tmp_path):
    spec = ray_job(nodes)
    config = tmp_path / RAY_CONFIG
    config.write_text(render(spec, "job").files[RAY_CONFIG])
    out = subprocess.run([str(swift_python()), "-c", POOLS, str(config)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    theirs = json.loads(out.stdout.strip().splitlines()[-1])  # [[GPUs per node of a pool], roles sharing it]
    ours = resolve(spec).ray.groups
    by_pool: dict[str, list[int]] = {}
    for g in ours:
        by_pool.setdefault(g.role, []).append(g.gpus)
    assert sorted([shares, 2 if role == "train+rollout" else 1] for role, shares in by_pool.items()) == theirs
    assert all(g.cpus_per_gpu == (2 if g.role == "train+rollout" else 1) for g in ours)  # bundle {GPU: 1, CPU: n}


def test_a_group_needs_one_node_with_all_its_gpus_and_cpus_free():
    train, rollout = PlacementGroup("train", 4, 1), PlacementGroup("rollout", 8, 1)
    assert unplaced([train, rollout], [(4, None), (4, None), (4, None)]) == [rollout]  # 12 GPUs, no node of 8
    assert unplaced([train, rollout], [(4, None), (8, None)]) == []
    assert unplaced([train, train], [(8, None)]) == []  # two groups may share a node
    colocated = PlacementGroup("train+rollout", 2, 2)
    assert unplaced([colocated], [(2, 3)]) == [colocated]  # 2 GPUs but 4 CPUs wanted: Ray counts both
    assert unplaced([colocated], [(2, 4)]) == []
    # best fit: the 4-GPU group takes the 4-GPU node, leaving the 8-GPU node for the 8-GPU group
    assert unplaced([train, rollout], [(8, None), (4, None)]) == []


def test_the_workers_secrets_hook_ships_as_a_ray_package_of_one_module():
    name, data = secrets_package()
    assert name.startswith("_ray_pkg_") and name.endswith(".zip") and secrets_package() == (name, data)
    import io
    import zipfile
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        assert z.namelist() == ["grpo_ui_ray_secrets.py"] and "def load()" in z.read("grpo_ui_ray_secrets.py").decode()


def test_the_cli_says_where_a_ray_mode_job_runs_and_what_is_submitted(tmp_path):
    nodes = [{"host": "gpu-a", "address": "10.0.0.1", "gpus": gpus(4)},
             {"host": "gpu-b", "address": "10.0.0.2", "gpus": gpus(4)}]
    started = ray_job(nodes, **{"secret_env": ["HF_TOKEN"], "env": {"MAX_PIXELS": "602112"},
                                "cluster.run_root": "/runs", "cluster.workdir": "/work"})
    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump(json.loads(started.model_dump_json(exclude_defaults=True))))
    rendered = cli(tmp_path, "render", job, "--out", tmp_path / "out", "--job-id", "ray-1")
    assert rendered.returncode == 0 and "Traceback" not in rendered.stderr, rendered.stdout + rendered.stderr
    said = rendered.stdout
    assert "Ray job on a Ray cluster grpo-ui starts on gpu-a, gpu-b (head gpu-a; ended when the job ends)" in said
    assert "entrypoint: cd /runs/ray-1 && bash --norc ray_job.sh" in said
    assert "(runs megatron rlhf --use_ray true --config ray_config.yaml)" in said
    assert "train and rollout share 8 GPU(s), over 2 node(s): 2 × train+rollout (4 GPUs), each on one node" in said
    assert "the job's env (MAX_PIXELS) and its marker; HF_TOKEN from a 0600 file on each node" in said
    args = cli(tmp_path, "args", job)
    assert args.returncode == 0 and "# Ray job on a Ray cluster grpo-ui starts on gpu-a, gpu-b" in args.stdout
    assert args.stdout.rstrip().endswith("megatron rlhf --use_ray true --config ray_config.yaml")

    existing = job.read_text().replace("backend: ray", "backend: ray\n  ray_address: http://127.0.0.1:9")
    job.write_text(existing)
    launched = cli(tmp_path, "launch", job, "--job-id", "ray-2")  # HF_TOKEN is not in its environment: nothing starts
    assert launched.returncode == 1 and "Traceback" not in launched.stderr, launched.stderr
    assert "plan ray-2: ms-swift's Ray mode" in launched.stdout
    assert "Ray job on the Ray cluster at http://127.0.0.1:9, its driver on gpu-a" in launched.stdout
    assert "secret value(s) missing for HF_TOKEN" in launched.stdout and "RAY-WORKDIR" in launched.stdout
