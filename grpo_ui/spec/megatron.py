"""The Megatron path's effective values (``megatron rlhf``), computed once by grpo_ui.spec.resolve: the parallel
sizes and the data-parallel size they leave, the batch arithmetic in completions, the run's length, recomputation,
offload and optimizer sharding, and — in ms-swift's Ray mode — where the trainers and the vLLM replicas run.

Sources (ms-swift 4.6, swift/megatron/arguments/megatron_args.py unless said): DP = world // (TP·PP·CP) and
num_microbatches = global_batch_size // (micro_batch_size · DP) (_init_distributed, :943-959); generation batch and
steps per generation from each other (resolve_generation_batch_size, :260-295); sequence parallelism off when TP ≤ 1
(:891); recompute 'none' means no recomputation (:798-799); train_iters from epochs (init_iters, :1051-1054; the Ray
driver the same, swift/ray/megatron/driver_utils.py compute_iter_params); Ray mode: each role's ``gpus``, the
colocate group, ``nnodes`` splitting a role's GPUs evenly over the nodes and ``sleep_level`` 1 unless given
(driver_utils.py parse_ray_yaml :87-119, RayConfig :59-84), separate placement forcing sleep_level 0
(swift/ray/megatron/pipeline.py _resolve_sleep_level :335-343), vLLM replicas = rollout GPUs // (vLLM TP·DP)
(swift/ray/megatron/rollout/replica.py :118-125).
"""

from __future__ import annotations

from dataclasses import dataclass

MEGATRON_GRPO_SINCE = (3, 11, 0)  # ms-swift's first release with swift/megatron/trainers/grpo_trainer.py
MEGATRON_RENDERED_SINCE = (4, 0, 0)  # the 4.x names (output_dir, mcore_model, tuner_type, num_train_epochs)
RAY_SINCE = (4, 3, 0)  # ms-swift's first release with swift/ray/megatron/pipeline.py
RAY_SLEEP_LEVEL = 1  # parse_ray_yaml: sleep_level defaults to 1 in a Ray config


@dataclass(frozen=True)
class RayPlacement:
    """Where ms-swift's Ray mode runs each role: the GPUs of ``train`` and ``rollout``, whether they share them
    (``colocate_groups: [[train, rollout]]``), over how many nodes each role's GPUs are split (``nnodes``), the
    effective sleep level and the number of vLLM replicas (0 when the GPUs do not divide)."""

    colocate: bool
    train_gpus: int
    rollout_gpus: int
    nnodes: int
    sleep_level: int
    replicas: int

    @property
    def total_gpus(self) -> int:
        """GPUs the job needs: the shared set when colocated, both roles' otherwise."""
        return self.train_gpus if self.colocate else self.train_gpus + self.rollout_gpus

    @property
    def groups(self) -> list[PlacementGroup]:
        """The placement groups ms-swift asks Ray for (pipeline.py _create_pools, resource_pool.py
        ResourcePool.create): per role pool — one shared by both roles when colocated — one group per node of
        gpus ÷ nnodes GPUs (RayConfig.gpus_as_process_on_nodes), each bundle {GPU: 1, CPU: the roles sharing it}; a
        role whose GPUs do not divide by nnodes has none (ms-swift stops first: rule RAY-NNODES)."""
        pools = [("train+rollout", self.train_gpus, 2)] if self.colocate else [
            ("train", self.train_gpus, 1), ("rollout", self.rollout_gpus, 1)]
        return [PlacementGroup(role, gpus // self.nnodes, cpus) for role, gpus, cpus in pools
                if gpus and gpus % self.nnodes == 0 for _ in range(self.nnodes)]


@dataclass(frozen=True)
class PlacementGroup:
    """One STRICT_PACK placement group of ms-swift's Ray mode: ``gpus`` bundles of {GPU: 1, CPU: cpus_per_gpu},
    all on one node; its role pool's share of one node."""

    role: str            # train, rollout, or train+rollout (the colocated pool)
    gpus: int
    cpus_per_gpu: int

    @property
    def cpus(self) -> int:
        return self.gpus * self.cpus_per_gpu


def groups_text(groups: list[PlacementGroup]) -> str:
    """'2 × train (4 GPUs), 1 × rollout (8 GPUs)'"""
    counts: dict[tuple[str, int], int] = {}
    for g in groups:
        counts[g.role, g.gpus] = counts.get((g.role, g.gpus), 0) + 1
    return ", ".join(f"{k} × {role} ({gpus} GPU{'s' if gpus > 1 else ''})" for (role, gpus), k in counts.items())


def unplaced(groups: list[PlacementGroup], nodes: list[tuple[float, float | None]]) -> list[PlacementGroup]:
    """The groups that find no node once the others are placed: each needs one node with its GPUs (and CPUs, where
    a node's are counted: None leaves them out) still free. Largest first, each on the node it leaves the fewest GPUs
    on (best fit) — whether Ray can place them at all, not the order Ray's scheduler will pick."""
    free = [[gpus, cpus] for gpus, cpus in nodes]
    left = []
    for group in sorted(groups, key=lambda g: (g.gpus, g.cpus), reverse=True):
        fits = [f for f in free if f[0] >= group.gpus and (f[1] is None or f[1] >= group.cpus)]
        if not fits:
            left.append(group)
            continue
        best = min(fits, key=lambda f: f[0] - group.gpus)
        best[0] -= group.gpus
        if best[1] is not None:
            best[1] -= group.cpus
    return left


@dataclass(frozen=True)
class MegatronValues:
    """The Megatron path's effective values (every size ≥ 1; dp 0 when the world is smaller than TP·PP·CP)."""

    tp: int
    pp: int
    cp: int
    ep: int
    etp: int
    vpp: int | None
    sequence_parallel: bool       # effective: ms-swift turns it off when TP ≤ 1
    world: int                    # training ranks (NNODES × NPROC_PER_NODE; in Ray mode train.gpus)
    dp: int                       # world // (TP·PP·CP)
    micro_batch: int              # completions per DP rank per micro-step
    global_batch: int             # completions per optimizer step
    num_microbatches: int         # global // (micro · DP), 0 when it does not divide or DP is 0
    generation_batch: int         # completions per rollout
    steps_per_generation: int     # optimizer steps per rollout (0 or less: ms-swift refuses it)
    num_generations: int
    train_iters: int | None       # given, else from num_train_epochs and the dataset's rows when known
    recompute: str | None         # 'selective', 'full' or None
    recompute_method: str | None
    recompute_num_layers: int | None
    distributed_optimizer: bool
    optimizer_cpu_offload: bool
    optimizer_offload_fraction: float
    precision_aware_optimizer: bool
    offload_model: bool           # the policy to CPU while vLLM generates (colocated)
    offload_optimizer: bool       # the optimizer states to CPU while vLLM generates (colocated)
    offload_bridge: bool
    padding_free: bool
    full_tuning: bool             # tuner_type full (else LoRA)
    ray: RayPlacement | None      # ms-swift's Ray mode, else None

    @property
    def model_parallel(self) -> int:
        """GPUs one model replica spans for its dense part: TP·PP·CP."""
        return self.tp * self.pp * self.cp

    @property
    def prompts_per_rollout(self) -> int:
        """Prompts sampled per rollout: generation batch // num_generations."""
        return self.generation_batch // max(self.num_generations, 1)


def generation_batch(given: int | None, steps: int | None, global_batch: int) -> tuple[int, int]:
    """(generation_batch_size, steps_per_generation) as resolve_generation_batch_size derives them (its checks are
    rules: MEGATRON-GEN-BATCH)."""
    if given is None and steps is None:
        return global_batch, 1
    if given is None:
        return global_batch * steps, steps
    if steps is None:
        return given, given // global_batch
    return given, steps


def iters_from_epochs(rows: int | None, epochs: float | None, micro: int, dp: int, gens: int,
                      global_batch: int) -> int | None:
    """train_iters ms-swift computes from num_train_epochs: rows rounded down to whole micro-batches over DP, times
    num_generations and the epochs, over the global batch (init_iters); None without the rows or the epochs."""
    if not rows or epochs is None or dp < 1:
        return None
    step = micro * dp
    return int(rows // step * step * gens * epochs // global_batch)
