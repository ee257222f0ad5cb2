"""megatron rlhf's checks, before launch: the engine's version, the parallel sizes against the world and the model,
the batch arithmetic in completions exactly as ms-swift's code does it, and what Megatron GRPO refuses. Each rule
reads the resolved Megatron values (``eff.megatron``) and cites the ms-swift 4.6 line (or the Megatron-Core check) it
mirrors; MA is swift/megatron/arguments/megatron_args.py, RM swift/megatron/trainers/rollout_mixin.py.
"""

from __future__ import annotations

import math

from grpo_ui.checks.rules.base import _near, rule
from grpo_ui.core.findings import finding
from grpo_ui.spec.fields import MEGATRON
from grpo_ui.spec.megatron import MEGATRON_GRPO_SINCE, MEGATRON_RENDERED_SINCE


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


@rule(engines=MEGATRON)
def engine_version(spec, eff):
    """Megatron GRPO exists from 3.11 (swift/megatron/trainers/grpo_trainer.py); 3.11–3.12 name its arguments
    otherwise (--load/--save mcore checkpoints, --max_epochs, --train_type), which grpo-ui does not render."""
    if eff.version >= MEGATRON_RENDERED_SINCE:
        return
    why = ("has no Megatron GRPO (added in 3.11)" if eff.version < MEGATRON_GRPO_SINCE else
           "runs Megatron GRPO with the 3.x names (--load/--save mcore checkpoints, --max_epochs, --train_type), which "
           "grpo-ui does not render")
    yield finding("ENGINE-VERSION", "error", ("engine", "swift_version"),
                  f"ms-swift {spec.swift_version} {why}.",
                  "Target ms-swift 4.0 or later (4.x loads the HF weights through mcore-bridge), or use engine swift.",
                  {"swift_version": "4.6"})


@rule(engines=MEGATRON)
def model_parallel(spec, eff):
    """The world splits into DP replicas of TP·PP·CP GPUs: DP = world // (TP·PP·CP) (MA:945-948); Megatron-Core's
    initialize_model_parallel refuses a world that TP·PP·CP (and the expert grid EP·ETP·PP) does not divide."""
    m = eff.megatron
    if not m.world:
        return
    sizes = ("train.tensor_model_parallel_size", "train.pipeline_model_parallel_size", "train.context_parallel_size")
    if m.world % m.model_parallel:
        fits = [tp for tp in _divisors(m.world) if m.world % (tp * m.pp * m.cp) == 0]
        yield finding("MEGATRON-WORLD", "error", sizes,
                      f"TP {m.tp} × PP {m.pp} × CP {m.cp} = {m.model_parallel} does not divide the {m.world} training "
                      f"GPUs: data-parallel size = world ÷ (TP·PP·CP) must be a whole number ≥ 1.",
                      f"Use a TP that divides {m.world // (m.pp * m.cp) if m.world >= m.pp * m.cp else m.world}: "
                      f"{fits}, or change the GPU count.",
                      {"train.tensor_model_parallel_size": fits[-1]} if fits else {})
        return
    expert = m.ep * m.etp * m.pp
    if m.world % expert:
        yield finding("MEGATRON-WORLD", "error", ("train.expert_model_parallel_size",
                                                  "train.expert_tensor_parallel_size"),
                      f"EP {m.ep} × ETP {m.etp} × PP {m.pp} = {expert} does not divide the {m.world} training GPUs "
                      "(Megatron-Core builds the expert grid from the same world).",
                      f"Use an expert parallel size that divides {m.world // (m.etp * m.pp)}.")


@rule(engines=MEGATRON)
def model_shape(spec, eff):
    """Megatron-Core's TransformerConfig: attention heads and KV heads (num_query_groups) divisible by TP, experts by
    EP, layers by PP unless decoder_first/last_pipeline_num_layers split them unevenly."""
    m, arch = eff.megatron, eff.arch
    if arch is None:
        return
    heads = math.gcd(arch.num_attention_heads, arch.num_key_value_heads or arch.num_attention_heads)
    for count, what in ((arch.num_attention_heads, "attention heads"), (arch.num_key_value_heads, "KV heads")):
        if count and count % m.tp:
            ok = [tp for tp in _divisors(heads) if not m.world or m.world % tp == 0]
            yield finding("MEGATRON-TP-HEADS", "error", "train.tensor_model_parallel_size",
                          f"{arch.name} has {count} {what}; TP {m.tp} does not divide them (Megatron-Core: "
                          f"num_{'attention_heads' if what == 'attention heads' else 'query_groups'} must be a "
                          "multiple of tensor_model_parallel_size).", f"Use a TP of {ok}.",
                          {"train.tensor_model_parallel_size": ok[-1]})
            return
    if arch.num_experts and arch.num_experts % m.ep:
        ok = _divisors(arch.num_experts)
        yield finding("MEGATRON-EP-EXPERTS", "error", "train.expert_model_parallel_size",
                      f"{arch.name} has {arch.num_experts} experts; EP {m.ep} does not divide them.",
                      f"Use an expert parallel size of {_near(ok, m.ep)}.",
                      {"train.expert_model_parallel_size": _near(ok, m.ep)[0]})
    elif m.ep > 1 and not arch.num_experts:
        yield finding("MEGATRON-EP-EXPERTS", "warning", "train.expert_model_parallel_size",
                      f"{arch.name} is dense: expert parallelism {m.ep} has no experts to split.",
                      "Set expert_model_parallel_size to 1.", {"train.expert_model_parallel_size": 1})
    t = spec.train
    uneven = t.decoder_first_pipeline_num_layers is not None or t.decoder_last_pipeline_num_layers is not None
    layers = arch.num_hidden_layers
    if m.pp > 1 and not uneven and layers % m.pp:
        yield finding("MEGATRON-PP-LAYERS", "error", ("train.pipeline_model_parallel_size",
                                                      "train.decoder_first_pipeline_num_layers"),
                      f"{arch.name} has {layers} layers; PP {m.pp} does not divide them.",
                      f"Use a PP of {_near(_divisors(layers), m.pp)}, or split unevenly with "
                      "decoder_first_pipeline_num_layers / decoder_last_pipeline_num_layers.")


@rule(engines=MEGATRON)
def pipeline_split(spec, eff):
    """Uneven pipeline layers need PP > 1 (MA:833-836)."""
    t = spec.train
    if eff.megatron.pp == 1 and (t.decoder_first_pipeline_num_layers is not None
                                 or t.decoder_last_pipeline_num_layers is not None):
        yield finding("MEGATRON-PP-LAYERS", "error", ("train.decoder_first_pipeline_num_layers",
                                                      "train.decoder_last_pipeline_num_layers"),
                      "decoder_first/last_pipeline_num_layers are set but pipeline_model_parallel_size is 1: ms-swift "
                      "stops ('pipeline_model_parallel_size must be greater than 1').",
                      "Clear them, or set pipeline_model_parallel_size > 1.")


@rule(engines=MEGATRON)
def sequence_and_context_parallel(spec, eff):
    """sequence_parallel is turned off when TP ≤ 1 (MA:891-892); context parallelism runs only in Transformer
    Engine's attention: Megatron-Core's own (attention_backend local) asserts context_parallel_size == 1
    (megatron/core/transformer/dot_product_attention.py)."""
    m = eff.megatron
    if spec.train.sequence_parallel and m.tp <= 1:
        yield finding("MEGATRON-SP-TP", "warning", ("train.sequence_parallel", "train.tensor_model_parallel_size"),
                      "sequence_parallel shards activations over the TP group, but TP is 1: ms-swift turns it off.",
                      "Clear sequence_parallel, or use tensor parallelism.", {"train.sequence_parallel": False})
    if m.cp > 1 and spec.value_of("train.attention_backend") == "local":
        yield finding("MEGATRON-CP-ATTENTION", "error", ("train.context_parallel_size", "train.attention_backend"),
                      "context parallelism needs Transformer Engine's attention; attention_backend local is "
                      "Megatron-Core's own, which refuses context_parallel_size > 1.",
                      "Use attention_backend flash (or fused), or context_parallel_size 1.",
                      {"train.attention_backend": "flash"})


@rule(engines=MEGATRON)
def recompute(spec, eff):
    """recompute_method only with full recomputation (MA:800-801)."""
    m = eff.megatron
    if m.recompute == "selective" and m.recompute_method is not None:
        yield finding("MEGATRON-RECOMPUTE", "error", ("train.recompute_method", "train.recompute_granularity"),
                      f"recompute_method {m.recompute_method} is set with selective recomputation: ms-swift stops "
                      "('recompute method is not yet supported for selective recomputing granularity').",
                      "Clear recompute_method, or use recompute_granularity full.", {"train.recompute_method": None})


@rule(engines=MEGATRON)
def global_batch(spec, eff):
    """global_batch_size divisible by micro_batch_size × DP, at least one micro-batch (MA:950-959)."""
    m = eff.megatron
    if not m.dp:
        return
    step = m.micro_batch * m.dp
    if m.global_batch % step:
        near = _near([k * step for k in range(1, m.global_batch // step + 3)], m.global_batch)
        yield finding("MEGATRON-GLOBAL-BATCH", "error", ("train.global_batch_size", "train.micro_batch_size"),
                      f"global_batch_size ({m.global_batch}) is not divisible by micro_batch_size ({m.micro_batch}) × "
                      f"data-parallel size ({m.dp}) = {step} (ms-swift counts completions).",
                      f"Use a multiple of {step}: {near}.", {"train.global_batch_size": near[0]})


@rule(engines=MEGATRON)
def generation_batch(spec, eff):
    """resolve_generation_batch_size (MA:271-293) then validate_batch_dp_alignment (MA:310-329), the order ms-swift
    runs them; the first failure stops it, so only the first is reported."""
    t, m = spec.train, eff.megatron
    gbs, gen, spg, g = m.global_batch, m.generation_batch, m.steps_per_generation, m.num_generations
    fields = ("train.generation_batch_size", "train.steps_per_generation")
    if t.generation_batch_size is not None and t.steps_per_generation is not None and gen != gbs * spg:
        yield finding("MEGATRON-GEN-BATCH", "error", fields,
                      f"generation_batch_size ({gen}) must equal global_batch_size ({gbs}) × steps_per_generation "
                      f"({spg}) = {gbs * spg}.", "Set only one of them.", {"train.generation_batch_size": gbs * spg})
        return
    if t.generation_batch_size is not None and t.steps_per_generation is None and gen % gbs:
        near = _near([k * gbs for k in range(1, gen // gbs + 3)], gen)
        yield finding("MEGATRON-GEN-BATCH", "error", fields,
                      f"generation_batch_size ({gen}) must be divisible by global_batch_size ({gbs}).",
                      f"Use a multiple of {gbs}: {near}.", {"train.generation_batch_size": near[0]})
        return
    if spg <= 0:
        yield finding("MEGATRON-GEN-BATCH", "error", fields, f"steps_per_generation must be > 0, got {spg}.",
                      "Set it to 1 or more.", {"train.steps_per_generation": 1})
        return
    if g > 1 and gen % g:
        yield finding("MEGATRON-GEN-BATCH", "error", ("train.num_generations", "train.global_batch_size"),
                      f"generation_batch_size ({gen} = global_batch_size × steps_per_generation) must be divisible by "
                      f"num_generations ({g}).",
                      f"Use num_generations from {[d for d in _divisors(gen) if d > 1][:6]}, or a global batch that "
                      f"is a multiple of {g}.")
        return
    yield from _dp_alignment(eff)


def _dp_alignment(eff):
    """Prompts per rollout divisible by DP, at least one per rank, divisible by micro_batch_size; at least one
    completion per rank (MA:310-329)."""
    m = eff.megatron
    if not m.dp:
        return
    prompts, g = m.prompts_per_rollout, m.num_generations
    fields = ("train.global_batch_size", "train.num_generations", "train.micro_batch_size")
    unit = g * m.dp * m.micro_batch  # a global batch of a multiple of it passes for any steps_per_generation
    near = _near([k * unit for k in range(1, m.global_batch // unit + 3)], m.global_batch)
    fix = (f"Use a global_batch_size that is a multiple of num_generations × DP × micro_batch_size = {g} × {m.dp} × "
           f"{m.micro_batch} = {unit}: {near}.")
    if prompts % m.dp:
        yield finding("MEGATRON-DP-ALIGN", "error", fields,
                      f"Prompts per rollout = generation batch {m.generation_batch} // num_generations {g} = {prompts} "
                      f"must be divisible by the data-parallel size ({m.dp}).", fix, {"train.global_batch_size": near[0]})
        return
    per_rank = prompts // m.dp
    if per_rank < 1:
        yield finding("MEGATRON-DP-ALIGN", "error", fields,
                      f"Each data-parallel rank would get {per_rank} prompts per rollout ({prompts} prompts over DP "
                      f"{m.dp}).", fix, {"train.global_batch_size": near[0]})
    elif per_rank % m.micro_batch:
        yield finding("MEGATRON-DP-ALIGN", "error", fields,
                      f"Prompts per rank per rollout = ({m.generation_batch} // {g}) // {m.dp} = {per_rank} must be "
                      f"divisible by micro_batch_size ({m.micro_batch}).", fix, {"train.global_batch_size": near[0]})
    elif m.generation_batch // m.world < 1:
        yield finding("MEGATRON-DP-ALIGN", "error", fields,
                      f"generation batch {m.generation_batch} is smaller than the {m.world} training ranks.",
                      "Raise global_batch_size or steps_per_generation.")


@rule(engines=MEGATRON)
def unsupported(spec, eff):
    """What Megatron GRPO refuses at argument parsing: async_generate, sync_ref_model, num_iterations > 1
    (MA:395-401), REAL loss with micro_batch_size not a multiple of num_generations (MA:403-406); virtual pipeline
    stages with a reference model (beta ≠ 0: swift/megatron/trainers/grpo_trainer.py:644)."""
    r, t, m = spec.rollout, spec.train, eff.megatron
    if r.async_generate:
        yield finding("MEGATRON-UNSUPPORTED", "error", "rollout.async_generate",
                      "async_generate is not supported for Megatron GRPO (ms-swift stops at argument parsing).",
                      "Turn it off; to roll out on GPUs of their own while training, use Ray mode (use_ray) with "
                      "rollout nodes (separate placement).", {"rollout.async_generate": False})
    if t.sync_ref_model:
        yield finding("MEGATRON-UNSUPPORTED", "error", "train.sync_ref_model",
                      "sync_ref_model is not supported for Megatron GRPO.",
                      "Turn it off (beta 0 trains without a reference model).", {"train.sync_ref_model": False})
    if t.num_iterations > 1:
        yield finding("MEGATRON-UNSUPPORTED", "error", "train.num_iterations",
                      f"num_iterations {t.num_iterations} is not supported for Megatron GRPO (one update per rollout "
                      "batch).", "Set num_iterations to 1; steps_per_generation gives several optimizer steps per "
                      "rollout.", {"train.num_iterations": 1})
    if t.loss_type == "real" and m.micro_batch % m.num_generations:
        yield finding("MEGATRON-UNSUPPORTED", "error", ("train.loss_type", "train.micro_batch_size"),
                      f"REAL loss needs micro_batch_size ({m.micro_batch}) to be a multiple of num_generations "
                      f"({m.num_generations}).", f"Set micro_batch_size to {m.num_generations}.",
                      {"train.micro_batch_size": m.num_generations})
    if m.vpp and eff.beta != 0:
        yield finding("MEGATRON-UNSUPPORTED", "error", ("train.virtual_pipeline_model_parallel_size", "train.beta"),
                      "Virtual pipeline stages with a reference model (beta ≠ 0): 'GRPO currently does not support "
                      "VPP'.", "Clear virtual_pipeline_model_parallel_size, or set beta 0.",
                      {"train.virtual_pipeline_model_parallel_size": None})
    if t.save_strategy == "no":
        yield finding("MEGATRON-UNSUPPORTED", "error", "train.save_strategy",
                      "megatron rlhf's save_strategy is steps or epoch (its parser refuses no).",
                      "Use steps with a large save_steps.", {"train.save_strategy": "steps"})
    if t.save_total_limit is not None and t.save_total_limit < 2:
        yield finding("MEGATRON-UNSUPPORTED", "error", "train.save_total_limit",
                      "megatron rlhf needs save_total_limit ≥ 2 (MA:861-862).", "Set it to 2 or clear it.",
                      {"train.save_total_limit": 2})


@rule(engines=MEGATRON)
def vllm(spec, eff):
    """Without Ray, use_vllm must be true (MA:439-440) and vllm_mode given: it has no default and the trainer stops
    with 'Invalid vllm_mode: None' (RM:419)."""
    if eff.ray:
        return
    if not spec.value_of("rollout.use_vllm"):
        yield finding("MEGATRON-USE-VLLM", "error", "rollout.use_vllm",
                      "Megatron GRPO generates with vLLM only: use_vllm must be true.", "Turn use_vllm on.",
                      {"rollout.use_vllm": True})
    elif spec.rollout.vllm_mode is None:
        yield finding("MEGATRON-VLLM-MODE", "error", "rollout.vllm_mode",
                      "vllm_mode is not set: megatron rlhf has no default and stops at start-up ('Invalid vllm_mode: "
                      "None').", "Choose colocate (vLLM on the training GPUs) or server (swift rollout nodes).",
                      {"rollout.vllm_mode": "server" if spec.rollout_nodes() else "colocate"})
