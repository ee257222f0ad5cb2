"""How Megatron-Core lays one model replica and its batch over a GPU: the parallel sizes, the pipeline stages' layer
counts, the micro-batches of a step, recomputation and the optimizer's sharding and offload (``Layout``), built
once from a job's resolved Megatron values (``layout_of``). The memory estimate (memory/megatron.py) and the step
time (timing/megatron.py) read the same Layout."""

from __future__ import annotations

from dataclasses import dataclass

from grpo_ui.knowledge.catalog import ModelArch
from grpo_ui.spec.megatron import MegatronValues


@dataclass(frozen=True)
class Layout:
    """Megatron-Core's layout of a job (every size ≥ 1)."""

    tp: int
    pp: int
    cp: int
    ep: int
    etp: int
    vpp: int                     # virtual stages per pipeline rank (1: no interleaving)
    sp: bool                     # sequence parallelism (effective: off when TP is 1)
    world: int                   # training GPUs
    micro_batches: int           # micro-batches per optimizer step on each data-parallel rank
    stage_layers: tuple[int, ...]  # decoder layers of each pipeline stage, first to last
    recompute: str | None        # 'selective', 'full' or None
    recompute_method: str        # with full: 'uniform' (chunks of recompute_layers) or 'block'
    recompute_layers: int
    distributed_optimizer: bool
    cpu_offload_fraction: float  # share of the optimizer states on the CPU (optimizer_cpu_offload), else 0
    precision_aware: bool        # TE's FusedAdam keeps only the 16-bit remainder of each fp32 main parameter
    offload_bridge: bool         # the weight sync's HF-format bucket on the CPU

    @property
    def dp(self) -> int:
        """Data-parallel ranks of the dense parameters: world ÷ (TP·PP·CP)."""
        return max(self.world // (self.tp * self.pp * self.cp), 1)

    @property
    def optimizer_shards(self) -> int:
        """Ranks the distributed optimizer shards a dense parameter's states over: DP × CP (Megatron-Core's data-parallel
        group with context parallelism; 1 without the distributed optimizer)."""
        return self.dp * self.cp if self.distributed_optimizer else 1

    @property
    def expert_shards(self) -> int:
        """Ranks an expert's optimizer states are sharded over: the expert data-parallel size, world ÷ (EP·ETP·PP)."""
        return max(self.world // (self.ep * self.etp * self.pp), 1) if self.distributed_optimizer else 1


def stage_layers(layers: int, pp: int, first: int | None = None, last: int | None = None) -> tuple[int, ...]:
    """Decoder layers per pipeline stage: an even split, or decoder_first/last_pipeline_num_layers on the ends with
    the rest split evenly over the middle stages (Megatron-Core's get_num_layers_to_build)."""
    if pp <= 1:
        return (layers,)
    ends = (first or 0) + (last or 0)
    middle = pp - (first is not None) - (last is not None)
    rest = layers - ends
    each = rest // middle if middle else 0
    stages = [each] * pp
    if first is not None:
        stages[0] = first
    if last is not None:
        stages[-1] = last
    if middle and rest % middle:
        stages[0 if first is None else 1] += rest % middle
    return tuple(stages)


def layout_of(mv: MegatronValues, arch: ModelArch, first: int | None = None, last: int | None = None) -> Layout:
    """The Layout of a job's resolved Megatron values; ``first``/``last``: decoder_first/last_pipeline_num_layers.
    A full recomputation without recompute_method/num_layers is taken as uniform over 1 layer (Megatron's own
    defaults are 'uniform'/1 in its transformer config)."""
    return Layout(
        tp=mv.tp, pp=mv.pp, cp=mv.cp, ep=mv.ep, etp=mv.etp, vpp=mv.vpp or 1, sp=mv.sequence_parallel,
        world=max(mv.world, 1), micro_batches=max(mv.num_microbatches, 1),
        stage_layers=stage_layers(arch.num_hidden_layers, mv.pp, first, last), recompute=mv.recompute,
        recompute_method=mv.recompute_method or "uniform", recompute_layers=mv.recompute_num_layers or 1,
        distributed_optimizer=mv.distributed_optimizer,
        cpu_offload_fraction=mv.optimizer_offload_fraction if mv.optimizer_cpu_offload else 0.0,
        precision_aware=mv.precision_aware_optimizer, offload_bridge=mv.offload_bridge)
