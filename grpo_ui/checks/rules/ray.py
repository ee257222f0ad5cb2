"""ms-swift's Ray mode (megatron rlhf --use_ray true --config job.yaml): what its driver checks before any actor
starts, and how such a job is launched. DU is swift/ray/megatron/driver_utils.py, PL swift/ray/megatron/pipeline.py,
RP swift/ray/megatron/rollout/replica.py (ms-swift 4.6)."""

from __future__ import annotations

from grpo_ui.checks.rules.base import rule
from grpo_ui.core.findings import finding
from grpo_ui.spec.fields import MEGATRON
from grpo_ui.spec.megatron import groups_text, unplaced
from grpo_ui.spec.resolve import effective_output_dir


@rule(engines=MEGATRON)
def ray_launch(spec, eff):
    """A Ray-mode job runs one driver (megatron rlhf --use_ray) on a Ray cluster, which the Ray backend starts or
    uses; the SSH and Slurm backends start a torchrun per node instead, which would start one driver per GPU
    (swift/cli/main.py runs torchrun whenever NPROC_PER_NODE or NNODES is set)."""
    if eff.ray and spec.cluster.backend in ("ssh", "slurm"):
        yield finding("RAY-BACKEND", "error", ("train.use_ray", "cluster.backend"),
                      f"Ray mode runs one driver on a Ray cluster, but the {spec.cluster.backend} backend starts "
                      "megatron rlhf with torchrun on every node.",
                      "Set cluster.backend to ray (it starts a Ray cluster on the job's nodes, or uses the one "
                      "cluster.ray_address names).", {"cluster.backend": "ray"})


@rule(engines=MEGATRON)
def ray_placement(spec, eff):
    """Each role's GPUs split evenly over nnodes (DU:77-84); each share a STRICT_PACK placement group that one node
    must hold whole (swift/ray/megatron/resource_pool.py ResourcePool.create: pg.ready() waits until Ray places it);
    rollout GPUs a whole number of vLLM replicas of TP × DP GPUs (RP:118-125)."""
    ray = eff.ray
    if not ray:
        return
    for role, gpus in (("train", ray.train_gpus), ("rollout", ray.rollout_gpus)):
        if gpus % ray.nnodes:
            yield finding("RAY-NNODES", "error", "cluster.nodes",
                          f"Ray mode splits each role's GPUs evenly over nnodes = {ray.nnodes} (the trainer nodes); "
                          f"{role} has {gpus} GPUs.", f"Give the {role} role a multiple of {ray.nnodes} GPUs.")
    left = unplaced(ray.groups, [(len(n.gpus), None) for n in spec.cluster.nodes])
    if left:
        yield finding("RAY-PLACEMENT", "error", "cluster.nodes",
                      f"ms-swift asks Ray for {groups_text(ray.groups)}, each on one node (STRICT_PACK); the job's nodes "
                      f"have {', '.join(str(len(n.gpus)) for n in spec.cluster.nodes)} GPU(s): {groups_text(left)} fit "
                      "nowhere, and ms-swift would wait for them forever.",
                      f"Use nodes of at least {max(g.gpus for g in left)} GPUs for that role, or add trainer nodes "
                      "(nnodes, their number, splits each role's GPUs into smaller groups).")
    if not ray.replicas:
        tp_field = "rollout.vllm_tensor_parallel_size" if ray.colocate else "server.vllm_tensor_parallel_size"
        yield finding("RAY-REPLICAS", "error", tp_field,
                      f"The {ray.rollout_gpus} rollout GPUs do not make whole vLLM replicas of vLLM TP × DP GPUs "
                      "(ms-swift stops: 'rollout GPUs must be divisible by tp*dp').",
                      f"Use a vLLM tensor (× data) parallel size that divides {ray.rollout_gpus}.")


@rule(engines=MEGATRON)
def ray_arguments(spec, eff):
    """In Ray mode the placement replaces vllm_mode: server makes each trainer connect to swift rollout servers
    (swift/megatron/pipelines/train/rlhf.py _prepare_vllm_client); the driver needs the run's length (it asserts
    train_iters > 0 after deriving it from num_train_epochs, PL:103-112) and has no evaluation loop
    (DU:228-238)."""
    if not eff.ray:
        return
    r, t = spec.rollout, spec.train
    if r.vllm_mode is not None:
        yield finding("RAY-VLLM-MODE", "error" if r.vllm_mode == "server" else "warning", "rollout.vllm_mode",
                      f"vllm_mode {r.vllm_mode} is set in Ray mode, where the cluster decides the placement (no "
                      "rollout nodes: colocated; rollout nodes: separate GPUs)"
                      + (": with server the trainers would look for swift rollout servers." if r.vllm_mode == "server"
                         else "; ms-swift's Ray configs leave it unset."),
                      "Clear vllm_mode.", {"rollout.vllm_mode": None})
    if spec.value_of("train.train_iters") is None and spec.value_of("train.num_train_epochs") is None:
        yield finding("RAY-TRAIN-ITERS", "error", ("train.train_iters", "train.num_train_epochs"),
                      "Neither train_iters nor num_train_epochs is set: the Ray driver cannot tell the run's length and "
                      "stops (assert train_iters > 0).", "Set train_iters, or num_train_epochs.",
                      {"train.train_iters": 100})
    if t.val_dataset or t.split_dataset_ratio:
        yield finding("RAY-NO-EVAL", "warning", ("train.val_dataset", "train.split_dataset_ratio"),
                      "Ray mode has no evaluation loop yet: ms-swift drops val_dataset and sets split_dataset_ratio "
                      "to 0.", "Clear val_dataset and split_dataset_ratio.",
                      {"train.val_dataset": [], "train.split_dataset_ratio": 0.0})


@rule(engines=MEGATRON)
def ray_workdir(spec, eff):
    """On a running cluster ms-swift's Ray workers run in the directory that cluster's Ray was started in (Ray starts
    them from its raylet; without a runtime working_dir they keep its directory), while the driver runs in the job's
    workdir: a relative output_dir puts the workers' checkpoints and logging.jsonl elsewhere than the driver's
    completions.jsonl. A cluster grpo-ui starts runs Ray in the job's workdir on every node."""
    output_dir = effective_output_dir(spec)
    if eff.ray and spec.cluster.ray_address and not output_dir.startswith(("/", "~")):
        yield finding("RAY-WORKDIR", "warning", "train.output_dir",
                      f"output_dir {output_dir} is relative: on the cluster at {spec.cluster.ray_address} ms-swift's "
                      "Ray workers resolve it in the directory that cluster's Ray runs in, not in the job's workdir "
                      "where the driver writes completions.jsonl.", "Give output_dir as an absolute path.")
