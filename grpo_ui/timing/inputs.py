"""What the step-time model takes (``TimeInputs``) and the one adapter from a resolved job (``time_inputs``): the
memory estimate's inputs (the model, tuner, engine, batch, vLLM settings; grpo_ui.memory.inputs.inputs_from_spec),
the GPUs' speed facts, the batch of one generation round, the lengths the user expects (or what is assumed, said in
words with the field that changes it), the network, and which forwards ms-swift runs."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace

from grpo_ui.knowledge.catalog import Gpu, ModelArch, find_gpu
from grpo_ui.memory.inputs import Inputs, inputs_from_spec, resolve_arch
from grpo_ui.spec.estimate import DEFAULT_INTERNODE_GBS, DEFAULT_PROMPT_TOKENS
from grpo_ui.spec.model import JobSpec
from grpo_ui.spec.resolve import Resolved, resolve
from grpo_ui.timing import lengths


class NoTimeEstimate(ValueError):
    """No step time can be predicted (no GPU model, a GPU without speed facts, an unknown model); the message says
    why and what to set."""


@dataclass(frozen=True)
class TimeInputs:
    """Everything the step-time model needs, as plain values (built from a job by ``time_inputs``)."""

    mem: Inputs                  # the memory estimate's inputs: arch, tuner, engine, world, micro-batch, vLLM …
    gpu: Gpu                     # a trainer GPU, with its speed facts
    rollout_gpu: Gpu             # a rollout-server GPU (the trainer GPU when vLLM is colocated or off)
    nodes: int                   # trainer nodes
    rollout_nodes: int
    rollout_gpus: int            # GPUs that generate (server mode: the rollout nodes'; else the trainer GPUs)
    replicas: int                # vLLM engines generating at once (colocate: world ÷ TP; server: nodes × DP)
    rollout_tp: int              # tensor parallel size of one engine
    max_num_seqs: int            # vLLM's concurrent sequences per engine
    generation_batch: int        # completions in one generation round, every GPU together
    num_generations: int         # completions per prompt
    steps_per_generation: int    # micro-batches per rank in one round (ms-swift's steps_per_generation)
    iterations: int              # passes over the round's completions (num_iterations)
    steps_per_round: float       # optimizer steps one round feeds (steps × iterations ÷ accumulation; < 1 when a step
                                 # spans several rounds)
    prompt_tokens: float
    completion_tokens: float     # the mean completion
    completion_given: bool       # the user gave the mean (else timing.lengths assumed it)
    max_completion: int          # max_completion_length
    old_logprobs: bool           # the old policy's log-probs are computed (a forward per micro-batch)
    ref: str                     # "" (beta 0), "model" (a reference model) or "adapter" (LoRA with the adapter off)
    ref_arch: ModelArch | None
    reward_models: tuple[ModelArch, ...]
    reward_latency_s: float
    turns: int                   # environment turns a round waits for (multi-turn: max_turns; else 0)
    env_s_per_turn: float        # the environment's seconds per turn (estimate.env_seconds_per_turn)
    async_generate: bool
    server_local: bool           # every rollout server runs on the trainer's node (weights cross NVLink/PCIe)
    adapter_sync: bool           # LoRA with vllm_enable_lora: only the adapters go to vLLM
    prefix_caching: bool
    eager: bool                  # vllm_enforce_eager: no CUDA graphs
    padding_free: bool
    internode_gbs: float
    assumptions: tuple[str, ...]

    @property
    def world(self) -> int:
        return self.mem.world

    @property
    def gpus_per_node(self) -> int:
        return self.mem.nproc

    @property
    def total_gpus(self) -> int:
        """Every GPU the job holds: trainers, and rollout servers in server mode."""
        return self.world + (self.rollout_gpus if self.mem.vllm == "server" else 0)

    @property
    def prompts_per_round(self) -> float:
        return self.generation_batch / self.num_generations


def _speed_gpu(name: str | None, role: str, field: str) -> Gpu:
    """The catalogue GPU with speed facts, or NoTimeEstimate naming the field to set."""
    if not name:
        raise NoTimeEstimate(f"no step time: the {role} nodes' GPU model is not set; choose it ({field}) from the "
                             "catalogue")
    gpu = find_gpu(name)
    if gpu is None:
        raise NoTimeEstimate(f"no step time: {name!r} ({field}) is not a catalogue GPU, so its peak TFLOPS and "
                             "memory bandwidth are unknown; choose the catalogue GPU nearest to it")
    if not gpu.has_speed:
        raise NoTimeEstimate(f"no step time: the catalogue has no speed facts (dense bf16 TFLOPS, memory and link "
                             f"bandwidth) for {gpu.name} ({field}) yet")
    return gpu


def dataset_rows(spec: JobSpec) -> int | None:
    """Rows the run trains on: estimate.dataset_rows, else the sum of every dataset's ``#N`` sample count when each
    gives one (ms-swift's dataset syntax), less split_dataset_ratio's share; None when unknown."""
    t = spec.train
    rows = spec.estimate.dataset_rows
    if rows is None:
        counts = [re.search(r"#(\d+)$", d) for d in t.dataset]
        if not counts or not all(counts):
            return None
        rows = sum(int(m[1]) for m in counts)
    return max(1, int(rows * (1 - t.split_dataset_ratio)))


def _old_logprobs(eff: Resolved) -> bool:
    """ms-swift 4.x computes the old policy's log-probs for every micro-batch (rlhf_trainers/grpo_trainer.py,
    ``grpo_batch.old_per_token_logps = …`` under torch.no_grad); 3.x only off-policy: num_iterations > 1 or
    gradient_accumulation_steps not a multiple of steps_per_generation (grpo_trainer.py old_policy())."""
    if eff.version >= (4, 0, 0):
        return True
    return eff.spec.train.num_iterations > 1 or eff.grad_accum % eff.steps_per_generation != 0


def _servers_on_trainer_node(eff: Resolved) -> bool:
    """Server mode with one trainer node and every rollout server on it (its host, its address, or localhost): the
    weights go to vLLM inside the node. ms-swift 3.2–3.4's vLLM on the node's own last GPUs is the same."""
    if eff.spare_rollout_gpus:
        return eff.trainer.nodes == 1
    trainers = eff.spec.trainer_nodes()
    if len(trainers) != 1:
        return False
    here = {trainers[0].host, trainers[0].routable, "localhost", "127.0.0.1", "::1"}
    return bool(eff.server_endpoints) and all(host in here for host, _ in eff.server_endpoints)


def time_inputs(job: JobSpec | Resolved, gpu: str | None = None, arch: ModelArch | None = None,
                completion_tokens: int | None = None) -> TimeInputs:
    """The step-time model's inputs for a job (its spec or Resolved values). ``gpu`` stands for every node's
    gpu_model; ``completion_tokens`` for estimate.completion_tokens. Raises NoTimeEstimate, or the memory
    estimate's EstimateError (an unknown model, an unreadable DeepSpeed config)."""
    eff = resolve(job, arch)
    spec = eff.spec
    t, r, s, e = spec.train, spec.rollout, spec.server, spec.estimate
    if eff.steps_per_generation < 1:
        raise NoTimeEstimate(f"no step time: train.steps_per_generation is {eff.steps_per_generation}; ms-swift "
                             "needs at least 1 (GRPO-STEPS-PER-GEN)")
    trainer_gpu = _speed_gpu(gpu or eff.trainer.model, "trainer", "cluster.nodes[0].gpu_model")
    mem = inputs_from_spec(eff, trainer_gpu.name, gpu_gib=None if gpu else eff.trainer.gib)
    assumed: list[str] = []
    server = mem.vllm == "server"
    if server and eff.spare_rollout_gpus:  # ms-swift 3.2–3.4: vLLM alone on each trainer node's last GPUs
        rollout_gpu, rollout_nodes, per_node, dp, tp = trainer_gpu, eff.trainer.nodes, eff.spare_rollout_gpus, (
            eff.spare_rollout_gpus), 1
    elif server:
        servers = eff.rollout_servers
        rollout_gpu = _speed_gpu(gpu or servers.model or eff.trainer.model, "rollout", "the rollout nodes' gpu_model")
        rollout_nodes, per_node = servers.nodes, max(servers.per_node, 1)
        dp, tp = s.vllm_data_parallel_size, s.vllm_tensor_parallel_size
    else:
        rollout_gpu, rollout_nodes, per_node = trainer_gpu, 0, 0
    if server:
        replicas, rollout_gpus, max_seqs = rollout_nodes * dp, rollout_nodes * per_node, 256  # swift rollout's default
    elif mem.vllm == "colocate":
        tp = mem.vllm_tp
        replicas, rollout_gpus, max_seqs = max(mem.world // tp, 1), mem.world, mem.vllm_max_num_seqs
    else:
        tp, replicas, rollout_gpus, max_seqs = 1, mem.world, mem.world, mem.generation_batch
    prompt = e.prompt_tokens
    if prompt is None:
        prompt = min(DEFAULT_PROMPT_TOKENS, t.max_length or DEFAULT_PROMPT_TOKENS)
        assumed.append(f"prompts of {prompt} tokens (set estimate.prompt_tokens)")
    completion = completion_tokens or e.completion_tokens
    given = completion is not None
    if not given:
        completion = lengths.assumed_mean(t.max_completion_length)
        assumed.append(lengths.assumption(completion, t.max_completion_length))
    completion = min(completion, t.max_completion_length)
    if e.reward_latency_s is None and t.external_plugins:
        assumed.append("external reward functions answer at once (set estimate.reward_latency_s)")
    multi_turn = bool(t.multi_turn_scheduler)
    turns = (t.max_turns or 1) if multi_turn else 0
    if multi_turn and e.env_seconds_per_turn is None:
        assumed.append("the multi-turn environment answers at once; its seconds are left out (set "
                       "estimate.env_seconds_per_turn)")
    local = server and _servers_on_trainer_node(eff)
    multi = eff.trainer.nodes > 1 or (server and not local)
    if multi and spec.cluster.internode_gbs is None:
        assumed.append(f"{DEFAULT_INTERNODE_GBS:g} GB/s between nodes (set cluster.internode_gbs)")
    ref = "" if eff.beta == 0 else "model" if (t.tuner_type == "full" or t.ref_model) else "adapter"
    t = TimeInputs(
        mem=mem, gpu=trainer_gpu, rollout_gpu=rollout_gpu, nodes=eff.trainer.nodes, rollout_nodes=rollout_nodes,
        rollout_gpus=rollout_gpus, replicas=max(replicas, 1), rollout_tp=max(tp, 1), max_num_seqs=max(max_seqs, 1),
        generation_batch=t.per_device_train_batch_size * mem.world * eff.steps_per_generation,
        num_generations=t.num_generations, steps_per_generation=eff.steps_per_generation,
        iterations=t.num_iterations,
        steps_per_round=eff.steps_per_generation * t.num_iterations / eff.grad_accum, prompt_tokens=float(prompt),
        completion_tokens=float(completion),
        completion_given=given,
        max_completion=t.max_completion_length, old_logprobs=_old_logprobs(eff), ref=ref,
        ref_arch=resolve_arch(t.ref_model, "train.ref_model") if t.ref_model else mem.arch,
        reward_models=tuple(m.arch for m in mem.extra_models if m.role == "reward"),
        reward_latency_s=e.reward_latency_s or 0.0, turns=turns, env_s_per_turn=e.env_seconds_per_turn or 0.0,
        async_generate=r.async_generate and server, server_local=local,
        adapter_sync=not mem.full and r.vllm_enable_lora and mem.vllm != "none", prefix_caching=(
            r.vllm_enable_prefix_caching), eager=r.vllm_enforce_eager, padding_free=t.padding_free,
        internode_gbs=spec.cluster.internode_gbs or DEFAULT_INTERNODE_GBS, assumptions=tuple(assumed))
    return _megatron_round(eff, t) if eff.megatron else t


def _megatron_round(eff: Resolved, t: TimeInputs) -> TimeInputs:
    """A megatron rlhf job's round: generation_batch completions per rollout, each data-parallel rank training
    generation_batch ÷ (micro × DP) micro-batches of them over steps_per_generation optimizer steps; the old
    policy's log-probs always, the reference's when beta ≠ 0 (a model of its own with full tuning, the adapter off
    with LoRA); no async_generate (Megatron GRPO refuses it)."""
    mv = eff.megatron
    micro_batches = mv.generation_batch // max(mv.micro_batch * mv.dp, 1)
    ref = "" if eff.beta == 0 else "model" if mv.full_tuning else "adapter"
    return replace(t, generation_batch=mv.generation_batch, num_generations=mv.num_generations,
                   steps_per_generation=max(micro_batches, 1), iterations=1,
                   steps_per_round=max(mv.steps_per_generation, 1), old_logprobs=True, ref=ref,
                   async_generate=False, padding_free=mv.padding_free)


def longest_of(n: float, mean: float, cap: float) -> float:
    """The expected longest of ``n`` completions of mean length ``mean``, at most ``cap``: the mean times the n-th
    harmonic number, the expected maximum of n exponentially distributed lengths (a long right tail, as GRPO's
    completion lengths have), ≈ mean · (ln n + 0.577)."""
    if n <= 1 or mean >= cap:
        return min(mean, cap)
    harmonic = math.log(n) + 0.5772 + 1 / (2 * n)
    return min(cap, mean * harmonic)
