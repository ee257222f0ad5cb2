"""A job's parallel layout in words, for the pages: the training GPUs, the data-parallel size the parallel sizes
leave, and what must divide what (``parallel_layout``: Configure draws it beside the GPUs), and the layout in one
line (``layout_words``, ``engine_words``: History's summary). Everything is read from the resolved job — the sizes,
DP and the batch arithmetic are resolve's; which of these ms-swift or Megatron-Core refuse, and the fix, is said by
the rules in grpo_ui.checks.rules.megatron and .ray, beside the same fields.
"""

from __future__ import annotations

from dataclasses import dataclass

from grpo_ui.spec.fields import COMMANDS
from grpo_ui.spec.resolve import Resolved


@dataclass(frozen=True)
class Relation:
    """One divisibility the layout needs, as a sentence, and whether it holds for this job."""

    text: str
    holds: bool


@dataclass(frozen=True)
class ParallelLayout:
    """A megatron rlhf job's layout over its training GPUs."""

    gpus: str                 # "8 training GPUs (1 node × 8)"; in Ray mode each role's GPUs
    world: int                # training GPUs (ranks)
    dp: int                   # the data-parallel size they leave (0: TP·PP·CP is more than the GPUs)
    dp_text: str              # "8 ÷ (TP 4 · PP 2 · CP 1)"
    relations: list[Relation]


def _plural(n: int, word: str, many: str | None = None) -> str:
    return f"{n} {word if n == 1 else many or word + 's'}"


def parallel_layout(eff: Resolved) -> ParallelLayout | None:
    """The layout of a megatron rlhf job (None for swift rlhf)."""
    m = eff.megatron
    if m is None:
        return None
    ray = m.ray
    if ray:
        roles = (f"train and rollout share {_plural(ray.train_gpus, 'GPU')}" if ray.colocate else
                 f"train {_plural(ray.train_gpus, 'GPU')}, rollout {_plural(ray.rollout_gpus, 'GPU')} "
                 f"({_plural(ray.replicas, 'vLLM replica')})")
        gpus = f"{roles}, over {_plural(ray.nnodes, 'node')} (Ray mode)"
    else:
        gpus = f"{_plural(m.world, 'training GPU')} ({_plural(eff.trainer.nodes, 'node')} × {eff.nproc_per_node})"
    relations = []
    if m.world:
        relations.append(Relation(f"TP·PP·CP = {m.tp}·{m.pp}·{m.cp} = {m.model_parallel} divides the "
                                  f"{_plural(m.world, 'training GPU')}", m.world % m.model_parallel == 0))
        if m.ep * m.etp > 1:
            grid = m.ep * m.etp * m.pp
            relations.append(Relation(f"EP·ETP·PP = {m.ep}·{m.etp}·{m.pp} = {grid} divides the "
                                      f"{_plural(m.world, 'training GPU')}", m.world % grid == 0))
    relations += _model_relations(eff)
    if ray and ray.nnodes > 1:
        relations.append(Relation(f"nnodes {ray.nnodes} divides each role's GPUs (train {ray.train_gpus}"
                                  + ("" if ray.colocate else f", rollout {ray.rollout_gpus}") + ")",
                                  all(g % ray.nnodes == 0 for g in (ray.train_gpus, ray.rollout_gpus) if g)))
    if m.dp:
        step = m.micro_batch * m.dp
        relations.append(Relation(
            f"micro-batch × DP = {m.micro_batch} × {m.dp} divides the global batch {m.global_batch}"
            + (f": {_plural(m.num_microbatches, 'micro-batch', 'micro-batches')} a step" if m.num_microbatches else ""),
            m.global_batch % step == 0))
        relations.append(Relation(f"num_generations {m.num_generations} divides the generation batch "
                                  f"{m.generation_batch}", m.generation_batch % max(m.num_generations, 1) == 0))
        relations.append(Relation(f"DP {m.dp} divides the {_plural(m.prompts_per_rollout, 'prompt')} of a rollout "
                                  f"(generation batch {m.generation_batch} ÷ {m.num_generations} generations)",
                                  m.prompts_per_rollout % m.dp == 0 and m.prompts_per_rollout >= m.dp))
    return ParallelLayout(gpus, m.world, m.dp, f"{m.world} ÷ (TP {m.tp} · PP {m.pp} · CP {m.cp})", relations)


def _model_relations(eff: Resolved) -> list[Relation]:
    """What the model's shape must allow: TP its attention and KV heads, EP its experts, PP its layers."""
    m, arch = eff.megatron, eff.arch
    if arch is None:
        return []
    out = []
    kv = arch.num_key_value_heads or arch.num_attention_heads
    if m.tp > 1:
        out.append(Relation(f"TP {m.tp} divides the {arch.num_attention_heads} attention heads and {kv} KV heads of "
                            f"{arch.name}", arch.num_attention_heads % m.tp == 0 and kv % m.tp == 0))
    if arch.num_experts:
        out.append(Relation(f"EP {m.ep} divides its {arch.num_experts} experts", arch.num_experts % m.ep == 0))
    elif m.ep > 1:
        out.append(Relation(f"EP {m.ep} needs experts: {arch.name} is dense", False))
    if m.pp > 1:
        t = eff.spec.train
        if t.decoder_first_pipeline_num_layers is not None or t.decoder_last_pipeline_num_layers is not None:
            out.append(Relation(f"PP {m.pp} splits its {arch.num_hidden_layers} layers unevenly "
                                "(decoder_first/last_pipeline_num_layers)", True))
        else:
            out.append(Relation(f"PP {m.pp} divides its {arch.num_hidden_layers} layers",
                                arch.num_hidden_layers % m.pp == 0))
    return out


def engine_words(eff: Resolved) -> str:
    """The command the job trains with: 'swift rlhf', 'megatron rlhf', 'megatron rlhf (Ray mode)'."""
    return COMMANDS[eff.engine] + (" (Ray mode)" if eff.ray else "")


def layout_words(eff: Resolved) -> str:
    """The layout in one line: megatron rlhf's parallel sizes above 1 and DP on its GPUs ('TP 4 · PP 2 · EP 4 · DP 1
    on 8 GPUs'); swift rlhf's data-parallel ranks and its DeepSpeed or FSDP config ('DP 8 on 2 × 4 GPUs, zero3')."""
    m = eff.megatron
    if m is None:
        t = eff.spec.train
        sharding = t.deepspeed or t.fsdp
        return (f"DP {eff.world_size} on {eff.nnodes} × {_plural(eff.nproc_per_node, 'GPU')}"
                + (f", {sharding}" if sharding else ""))
    sizes = [f"{name} {size}" for name, size in (("TP", m.tp), ("PP", m.pp), ("CP", m.cp), ("EP", m.ep),
                                                 ("ETP", m.etp)) if size > 1]
    return " · ".join([*sizes, f"DP {m.dp}"]) + f" on {_plural(m.world, 'GPU')}"
