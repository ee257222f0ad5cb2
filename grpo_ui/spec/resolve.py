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
from typing import Literal

from grpo_ui.knowledge.catalog import ModelArch, find_gpu, find_model, from_hf_config
from grpo_ui.spec.cluster import Node
from grpo_ui.spec.fields import parse_version
from grpo_ui.spec.model import JobSpec
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
    (swift/arguments/sft_args.py _init_output_dir, 3.x train_args.py the same), relative to the working directory."""
    return spec.train.output_dir or f"output/{model_name(spec.train.model or '')}"


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
    vllm_mode: Literal["none", "colocate", "server"]
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

    @property
    def nnodes(self) -> int:
        return self.trainer.nodes

    @property
    def world_size(self) -> int:
        return self.nnodes * self.nproc_per_node

    @property
    def dialect(self) -> str:
        return dialect_of(self.spec.swift_version)

    @property
    def colocate(self) -> bool:
        """vLLM in the trainer processes (in 3.2–3.4 also on GPUs of its own: see spare_rollout_gpus)."""
        return self.vllm_mode == "colocate"

    @property
    def server(self) -> bool:
        """vLLM in swift rollout servers."""
        return self.vllm_mode == "server"

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


def resolve(job: JobSpec | Resolved, arch: ModelArch | None = None) -> Resolved:
    """The job's effective values (a Resolved is returned as it is). ``arch``: the policy model's architecture when
    the caller knows it better (a config.json the user supplied)."""
    if isinstance(job, Resolved):
        return job if arch is None or arch is job.arch else replace(job, arch=arch)
    spec = job
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
