"""A job's effective values, computed once: what ms-swift, torchrun and the node scripts will really use for a
JobSpec, with ms-swift's defaults for unset fields and its version's arithmetic. Rules, the memory estimate, the
command lines, the renderer, make-it-fit and the doctor read them from a ``Resolved`` instead of re-deriving them.

Sources (ms-swift 4.6 unless said): world = NNODES × NPROC_PER_NODE (torchrun); beta None → 0.04
(rlhf_args.py _init_grpo); gradient_accumulation_steps None → 1 for GRPO (rlhf_args.py _set_default; since 3.7,
before it SFT's ceil(16 / (per_device × world)), trainers/arguments.py); steps_per_generation and
generation_batch_size from each other (args_mixin.py _init_generation_batch_params; added in 3.5); a rollout every
steps_per_generation × num_iterations micro-steps (grpo_trainer.py, TRL's generate_every); group ports 51216 + i
(vllm_client.py); output/<model name> (sft_args.py _init_output_dir).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Literal

from grpo_ui.knowledge.catalog import ModelArch, find_gpu, find_model, from_hf_config
from grpo_ui.knowledge.engines import EngineConfigError, ZeroConfig, zero_config
from grpo_ui.spec.cluster import Node
from grpo_ui.spec.fields import parse_version
from grpo_ui.spec.megatron import RAY_SLEEP_LEVEL, MegatronValues, RayPlacement, generation_batch, iters_from_epochs
from grpo_ui.spec.model import ARGS_BY_PATH, JobSpec
from grpo_ui.spec.swift_args import dialect_of

DEFAULT_BETA = 0.04
GROUP_PORT = 51216  # ms-swift's first weight-sync (NCCL group) port; server i uses GROUP_PORT + i
MASTER_PORT = 29500  # torchrun's default rendezvous port, when cluster.master_port is unset (SSH)
# On Slurm an unset cluster.master_port comes from the job id, computed in the batch script: two jobs sharing a
# node would otherwise both bind 29500 (torchrun's EADDRINUSE at rendezvous).
SLURM_MASTER_PORT = "$((20000 + SLURM_JOB_ID % 20000))"


def model_name(model: str) -> str:
    """ms-swift's name for a model id or path (its get_model_name): the HF/ModelScope cache snapshot's repo name, or
    the last path component with ModelScope's '___' read as '.'."""
    model = model.rstrip("/")
    m = re.search(r"/models(?:--|/)(?:.+?--)?(.+?)/snapshots/", model)
    return m[1] if m else model.rsplit("/", 1)[-1].replace("___", ".")


def effective_output_dir(spec: JobSpec) -> str:
    """Where ms-swift writes the run (before its vN-timestamp subdirectory): output_dir, else output/<model name>
    (swift/arguments/sft_args.py _init_output_dir, 3.x train_args.py the same) or, for megatron rlhf,
    megatron_output/<model name> (swift/megatron/arguments/sft_args.py _init_output_dir), relative to the working
    directory."""
    root = "megatron_output" if spec.engine == "megatron" else "output"
    return spec.train.output_dir or f"{root}/{model_name(spec.train.model or '')}"


def model_arch(model: str | None, supplied: dict[str, dict] | None = None) -> ModelArch | None:
    """The architecture of a hub id or local path: the catalogue (spellings and quantised variants included), else
    the config.json the user supplied for it (``supplied``: by model id), else the directory's config.json; None when
    none knows it."""
    if not model:
        return None
    arch = find_model(model)
    if arch:
        return arch
    try:
        return from_hf_config((supplied or {}).get(model) or model, name=model.rstrip("/").split("/")[-1])
    except ValueError:
        return None


def rollout_steps(steps_per_generation: int, grad_accum: int, num_iterations: int = 1) -> int:
    """Optimizer steps from one rollout to the next: ms-swift generates every steps_per_generation × num_iterations
    micro-steps, gradient_accumulation_steps of which make an optimizer step."""
    return max(1, math.ceil(steps_per_generation * num_iterations / max(grad_accum, 1)))


@dataclass(frozen=True)
class RoleGpus:
    """The GPUs of one role (trainer or rollout nodes): how many nodes, GPUs per node (the first node's), the model
    (the catalogue's name when it knows it, else as given) and memory per GPU (the node's gpu_memory_gib, else the
    catalogue's; None when unknown)."""

    nodes: int
    per_node: int
    model: str | None
    gib: float | None

    @classmethod
    def of(cls, nodes: list[Node]) -> RoleGpus:
        if not nodes:
            return cls(0, 0, None, None)
        first = nodes[0]
        known = find_gpu(first.gpu_model)
        return cls(len(nodes), len(first.gpus), known.name if known else first.gpu_model,
                   first.gpu_memory_gib or (known.memory_gib if known else None))


@dataclass(frozen=True)
class Resolved:
    """The job's effective values; build it with ``resolve(spec)``."""

    spec: JobSpec
    version: tuple[int, int, int]
    beta: float
    grad_accum: int               # micro-steps per optimizer step
    steps_per_generation: int     # micro-steps one rollout feeds (3.2–3.4: gradient_accumulation_steps)
    generation_batch: int         # the batch ms-swift checks against num_generations (see _generation_batch)
    rollout_steps: int            # optimizer steps from one rollout to the next
    vllm_mode: Literal["none", "colocate", "server", "separate"]  # separate: Ray mode's vLLM replicas on own GPUs
    spare_rollout_gpus: int       # 3.2–3.4: GPUs per trainer node vLLM has alone (num_infer_workers < GPUs)
    nproc_per_node: int           # training processes per trainer node (NPROC_PER_NODE)
    trainer: RoleGpus
    rollout: RoleGpus
    master_addr: str
    master_port: int
    server_endpoints: tuple[tuple[str, int], ...]  # (host, HTTP port) of each rollout server the trainer uses
    group_ports: tuple[int, ...]  # each server's weight-sync (NCCL group) port
    output_dir: str
    logging_steps: int
    arch: ModelArch | None        # the policy model's architecture, when the catalogue or a config.json knows it
    megatron: MegatronValues | None = None  # the Megatron path's values (engine megatron), else None

    @property
    def engine(self) -> str:
        """The training engine: swift (swift rlhf) or megatron (megatron rlhf)."""
        return self.spec.engine

    @property
    def ray(self) -> RayPlacement | None:
        """ms-swift's Ray mode placement (megatron rlhf --use_ray), else None."""
        return self.megatron.ray if self.megatron else None

    @property
    def nnodes(self) -> int:
        return self.trainer.nodes

    @property
    def world_size(self) -> int:
        return self.megatron.world if self.megatron else self.nnodes * self.nproc_per_node

    @property
    def logging_rank(self) -> int:
        """The global rank that prints the metrics and writes logging.jsonl and completions.jsonl: rank 0 for swift
        rlhf; the last for megatron rlhf (swift/utils/env.py is_last_rank, used by swift/megatron/callbacks/print.py
        and the completions writer: in a pipeline only the last stage has the loss)."""
        return self.world_size - 1 if self.megatron else 0

    @property
    def node_order(self) -> list[int]:
        """The trainer nodes' NODE_RANKs in the order their GPUs take the global ranks: as listed (torchrun); in Ray
        mode by address as a string, ms-swift's order of the train placement groups, one per trainer node
        (swift/ray/megatron/resource_pool.py sort_pgs_by_node_ip, then worker_group.py from_pool)."""
        trainers = self.spec.trainer_nodes()
        listed = list(range(len(trainers)))
        return sorted(listed, key=lambda rank: trainers[rank].routable) if self.ray else listed

    @property
    def logging_node(self) -> int:
        """The node rank of the trainer node running logging_rank (megatron rlhf: the last node, ms-swift's Megatron
        quick start: 'logs are printed on the last rank'; in Ray mode the last of node_order)."""
        if self.ray:
            return self.node_order[-1] if self.node_order else 0
        return self.logging_rank // max(self.nproc_per_node, 1) if self.nproc_per_node else 0

    @property
    def dialect(self) -> str:
        return dialect_of(self.spec.swift_version)

    @property
    def use_hf(self) -> bool:
        """The model comes from the Hugging Face Hub (use_hf, or USE_HF in the job's or node 0's environment, as
        ms-swift's use_hf_hub reads it); else from ModelScope."""
        nodes = self.spec.trainer_nodes()
        return self.spec.train.use_hf or _env_flag(self.spec, nodes[0] if nodes else None, "USE_HF")

    def on_cpu(self, node: Node) -> bool:
        """The node runs the job on its CPUs: ACCELERATE_USE_CPU true in the job's or the node's environment, as
        accelerate reads it (its use_cpu; ms-swift trains through accelerate's Trainer)."""
        return _env_flag(self.spec, node, "ACCELERATE_USE_CPU")

    @property
    def colocate(self) -> bool:
        """vLLM in the trainer processes (in 3.2–3.4 also on GPUs of its own: see spare_rollout_gpus)."""
        return self.vllm_mode == "colocate"

    @property
    def server(self) -> bool:
        """vLLM in swift rollout servers."""
        return self.vllm_mode == "server"

    @property
    def reference_model(self) -> str | None:
        """The frozen reference model ms-swift loads beside the policy on every trainer GPU (rlhf_args.py
        __post_init__): none when beta is 0; with full tuning ref_model, else a copy of the policy; with LoRA none
        (the base model with the adapter off is the reference), unless ref_model is set, which ms-swift refuses (rule
        REF-MODEL-LORA) and which is counted while it is there."""
        t = self.spec.train
        if self.beta == 0:
            return None
        return (t.ref_model or t.model) if t.tuner_type == "full" else t.ref_model

    @cached_property
    def zero(self) -> ZeroConfig | None:
        """DeepSpeed's ZeRO stage and offload as train.deepspeed sets them: a preset, inline JSON or a JSON file, read
        by knowledge.engines; None without DeepSpeed, or when the config cannot be read here (the memory estimate
        says why: MEMORY-ENGINE-CONFIG)."""
        try:
            return zero_config(self.spec.train.deepspeed)
        except EngineConfigError:
            return None

    @property
    def zero_offload(self) -> bool:
        """ZeRO offloads optimizer states or parameters to host RAM (zero2_offload, zero3_offload, or a JSON's
        offload_optimizer / offload_param device)."""
        return bool(self.zero and (self.zero.offload_optimizer or self.zero.offload_param))

    @property
    def rollout_servers(self) -> RoleGpus:
        """The GPUs that generate in server mode: the rollout nodes'; for servers started outside the job (server mode
        without rollout nodes) one server per vllm_server_host, each on server.vllm_data_parallel_size ×
        vllm_tensor_parallel_size GPUs of the trainers' model, as swift rollout takes them."""
        if self.rollout.nodes or not self.server:
            return self.rollout
        s = self.spec.server
        return RoleGpus(max(len(self.server_endpoints), 1), s.vllm_data_parallel_size * s.vllm_tensor_parallel_size,
                        self.trainer.model, self.trainer.gib)

    def rollout_port(self, index: int) -> int:
        """The HTTP port rollout node ``index`` serves: its entry in vllm_server_port when the trainer lists the
        servers itself, else server.port."""
        r = self.spec.rollout
        return r.vllm_server_port[index] if r.vllm_server_host and index < len(r.vllm_server_port) \
            else self.spec.server.port

    def launch_env(self, rank: int, node: Node) -> dict[str, str]:
        """The launch variables trainer node ``rank`` runs with (torchrun's and CUDA's)."""
        return {"NNODES": str(self.nnodes), "NODE_RANK": str(rank), "MASTER_ADDR": self.master_addr,
                "MASTER_PORT": str(self.master_port), "NPROC_PER_NODE": str(self.nproc_per_node),
                "CUDA_VISIBLE_DEVICES": ",".join(map(str, node.gpus))}


def _env_flag(spec: JobSpec, node: Node | None, name: str) -> bool:
    """An on/off environment variable as ms-swift and accelerate read it (1, true, yes, on, y, t), the node's value
    over the job's."""
    env = {**spec.env, **(node.env if node else {})}
    return env.get(name, "0").strip().lower() in ("1", "true", "yes", "on", "y", "t")


def resolve(job: JobSpec | Resolved, arch: ModelArch | None = None) -> Resolved:
    """The job's effective values (a Resolved is returned as it is). ``arch``: the policy model's architecture when
    the caller knows it better (a config.json the user supplied)."""
    if isinstance(job, Resolved):
        return job if arch is None or arch is job.arch else replace(job, arch=arch)
    spec = job
    if spec.engine == "megatron":
        return _resolve_megatron(spec, arch)
    t, r = spec.train, spec.rollout
    version = parse_version(spec.swift_version)
    trainers, rollouts = spec.trainer_nodes(), spec.rollout_nodes()
    trainer = RoleGpus.of(trainers)
    mode = "none" if not r.use_vllm else "server" if r.vllm_mode == "server" else "colocate"
    spare = _spare_rollout_gpus(spec, version, trainer.per_node, mode)
    nproc = trainer.per_node - spare
    world = trainer.nodes * nproc
    accum = _grad_accum(spec, version, world)
    steps = _steps_per_generation(spec, world, accum)
    endpoints = _server_endpoints(spec, rollouts)
    return Resolved(
        spec=spec, version=version, beta=DEFAULT_BETA if t.beta is None else t.beta, grad_accum=accum,
        steps_per_generation=steps, generation_batch=_generation_batch(spec, version, world, steps),
        rollout_steps=rollout_steps(steps, accum, t.num_iterations), vllm_mode=mode, spare_rollout_gpus=spare,
        nproc_per_node=nproc, trainer=trainer, rollout=RoleGpus.of(rollouts),
        master_addr=spec.cluster.master_addr or (trainers[0].routable if trainers else "127.0.0.1"),
        master_port=spec.cluster.master_port or MASTER_PORT, server_endpoints=endpoints,
        group_ports=_group_ports(r.vllm_server_group_port, len(endpoints)), output_dir=effective_output_dir(spec),
        logging_steps=t.logging_steps, arch=arch or model_arch(t.model, spec.hf_configs))


def _spare_rollout_gpus(spec: JobSpec, version: tuple, gpus: int, mode: str) -> int:
    """GPUs per trainer node that ms-swift 3.2–3.4 gives to vLLM alone (num_infer_workers below the GPU count: vLLM
    on the last ones, v3.2.1 grpo_trainer.py; docs: 'nproc_per_node is one less than the number of GPUs, with vLLM by
    default deployed on the last card'); 0 when vLLM shares the training GPUs."""
    workers = spec.rollout.num_infer_workers
    if mode != "colocate" or not workers or version >= (3, 5, 0):
        return 0
    return workers if workers < gpus else 0


def sft_grad_accum(per_device: int, world: int) -> int:
    """ms-swift's default gradient_accumulation_steps outside GRPO: ceil(16 / (per_device × world)) (its
    TrainingArguments; a global batch of at least 16)."""
    return max(1, math.ceil(16 / (per_device * max(world, 1))))


def _grad_accum(spec: JobSpec, version: tuple, world: int) -> int:
    """GRPO's default is 1 since 3.7; earlier versions used SFT's."""
    t = spec.train
    if t.gradient_accumulation_steps:
        return t.gradient_accumulation_steps
    return 1 if version >= (3, 7, 0) else sft_grad_accum(t.per_device_train_batch_size, world)


def _steps_per_generation(spec: JobSpec, world: int, accum: int) -> int:
    t = spec.train
    if t.steps_per_generation is not None:
        return t.steps_per_generation
    if t.generation_batch_size is not None:
        return max(1, t.generation_batch_size // max(t.per_device_train_batch_size * world, 1))
    return accum


def _generation_batch(spec: JobSpec, version: tuple, world: int, steps: int) -> int:
    """The batch ms-swift checks against num_generations: before 3.4 the global train batch, in 3.4.x that times
    gradient_accumulation_steps (grpo_trainer.py there), from 3.5 the generation batch."""
    t = spec.train
    if version < (3, 4, 0):
        return t.per_device_train_batch_size * world
    if version < (3, 5, 0):
        return t.per_device_train_batch_size * world * (t.gradient_accumulation_steps or 1)
    if t.generation_batch_size is not None:
        return t.generation_batch_size
    return t.per_device_train_batch_size * world * steps


def _server_endpoints(spec: JobSpec, rollouts: list[Node]) -> tuple[tuple[str, int], ...]:
    """(host, port) of every rollout server the trainer talks to in server mode: vllm_server_host with its ports
    (one port for all when the counts differ), else the cluster's rollout nodes on server.port."""
    r = spec.rollout
    if r.vllm_server_host:
        hosts, ports = r.vllm_server_host, r.vllm_server_port
        return tuple(zip(hosts, ports, strict=True)) if len(ports) == len(hosts) else tuple(
            (h, ports[0]) for h in hosts)
    return tuple((n.routable, spec.server.port) for n in rollouts)


def _group_ports(given: list[int] | None, servers: int) -> tuple[int, ...]:
    """Each server's weight-sync port: vllm_server_group_port when it lists one per server (ms-swift's VLLMClient
    refuses any other length: rule VLLM-SERVER-PORTS), else GROUP_PORT + the server's index."""
    return tuple(given) if given and len(given) == servers else tuple(GROUP_PORT + k for k in range(servers))


def _resolve_megatron(spec: JobSpec, arch: ModelArch | None) -> Resolved:
    """megatron rlhf's effective values (grpo_ui.spec.megatron): NPROC_PER_NODE is every GPU of a trainer node (no
    single-process fallback, no spare vLLM GPUs); one optimizer step is num_microbatches micro-steps; a rollout feeds
    steps_per_generation optimizer steps (num_iterations > 1 is refused: rule MEGATRON-UNSUPPORTED)."""
    trainers, rollouts = spec.trainer_nodes(), spec.rollout_nodes()
    trainer = RoleGpus.of(trainers)
    mv = megatron_values(spec, trainer, RoleGpus.of(rollouts))
    if mv.ray:
        mode = "colocate" if mv.ray.colocate else "separate"
    else:
        mode = ("none" if not spec.value_of("rollout.use_vllm") else
                "server" if spec.rollout.vllm_mode == "server" else "colocate")
    endpoints = _server_endpoints(spec, rollouts) if mode == "server" else ()
    beta = spec.train.beta
    return Resolved(
        spec=spec, version=parse_version(spec.swift_version), beta=DEFAULT_BETA if beta is None else beta,
        grad_accum=max(mv.num_microbatches, 1), steps_per_generation=mv.steps_per_generation,
        generation_batch=mv.generation_batch, rollout_steps=max(mv.steps_per_generation, 1), vllm_mode=mode,
        spare_rollout_gpus=0, nproc_per_node=trainer.per_node, trainer=trainer, rollout=RoleGpus.of(rollouts),
        master_addr=spec.cluster.master_addr or (trainers[0].routable if trainers else "127.0.0.1"),
        master_port=spec.cluster.master_port or MASTER_PORT, server_endpoints=endpoints,
        group_ports=_group_ports(spec.rollout.vllm_server_group_port, len(endpoints)),
        output_dir=effective_output_dir(spec), logging_steps=spec.train.logging_steps,
        arch=arch or model_arch(spec.train.model, spec.hf_configs), megatron=mv)


def megatron_values(spec: JobSpec, trainer: RoleGpus, rollout: RoleGpus) -> MegatronValues:
    """The Megatron path's effective values for the cluster's trainer (and, in Ray mode, rollout) GPUs."""
    v = {d.name: spec.value(d) for d in ARGS_BY_PATH.values() if d.section in ("train", "rollout")
         and "megatron" in d.engines}
    ray = _ray_placement(spec, v, trainer, rollout) if v["use_ray"] else None
    world = ray.train_gpus if ray else trainer.nodes * trainer.per_node
    tp, pp, cp = v["tensor_model_parallel_size"], v["pipeline_model_parallel_size"], v["context_parallel_size"]
    dp = world // (tp * pp * cp)
    micro, gbs = v["micro_batch_size"], v["global_batch_size"]
    gen, steps = generation_batch(v["generation_batch_size"], v["steps_per_generation"], gbs)
    step = micro * dp
    rows = spec.estimate.dataset_rows
    recompute = v["recompute_granularity"]
    return MegatronValues(
        tp=tp, pp=pp, cp=cp, ep=v["expert_model_parallel_size"], etp=v["expert_tensor_parallel_size"],
        vpp=v["virtual_pipeline_model_parallel_size"] if v["virtual_pipeline_model_parallel_size"] != 1 else None,
        sequence_parallel=v["sequence_parallel"] and tp > 1, world=world, dp=dp, micro_batch=micro, global_batch=gbs,
        num_microbatches=gbs // step if step and gbs % step == 0 else 0, generation_batch=gen,
        steps_per_generation=steps, num_generations=v["num_generations"],
        train_iters=v["train_iters"] if v["num_train_epochs"] is None else (
            iters_from_epochs(rows, v["num_train_epochs"], micro, dp, v["num_generations"], gbs) or v["train_iters"]),
        recompute=None if recompute == "none" else recompute, recompute_method=v["recompute_method"],
        recompute_num_layers=v["recompute_num_layers"], distributed_optimizer=v["use_distributed_optimizer"],
        optimizer_cpu_offload=v["optimizer_cpu_offload"], optimizer_offload_fraction=v["optimizer_offload_fraction"],
        precision_aware_optimizer=v["use_precision_aware_optimizer"], offload_model=v["offload_model"],
        offload_optimizer=v["offload_optimizer"], offload_bridge=v["offload_bridge"], padding_free=v["padding_free"],
        full_tuning=v["tuner_type"] == "full", ray=ray)


def _ray_placement(spec: JobSpec, v: dict, trainer: RoleGpus, rollout: RoleGpus) -> RayPlacement:
    """Ray mode's roles from the cluster: without rollout nodes vLLM shares the trainer GPUs (colocate_groups
    [[train, rollout]], both roles' gpus the trainer GPUs); with rollout nodes it has their GPUs (separate). nnodes:
    the trainer nodes, over which ms-swift splits each role's GPUs evenly. sleep_level: as set, else 1 (a Ray
    config's default); separate placement runs at 0."""
    colocate = not rollout.nodes
    train_gpus = trainer.nodes * trainer.per_node
    rollout_gpus = train_gpus if colocate else rollout.nodes * rollout.per_node
    sleep = v["sleep_level"] if "sleep_level" in spec.rollout.model_fields_set else RAY_SLEEP_LEVEL
    per_replica = (spec.rollout.vllm_tensor_parallel_size if colocate else
                   spec.server.vllm_tensor_parallel_size * spec.server.vllm_data_parallel_size)
    return RayPlacement(colocate=colocate, train_gpus=train_gpus, rollout_gpus=rollout_gpus,
                        nnodes=max(trainer.nodes, 1), sleep_level=sleep if colocate else 0,
                        replicas=rollout_gpus // per_replica if rollout_gpus % per_replica == 0 else 0)
