"""Measured peak GPU memory (tests/data/memory_measurements.jsonl) against the estimator and two baselines.

Each row names a published measurement (source and where on the page), the configuration it was taken with, the
unit the source used, what the figure measures and a note for every assumed value. A row is rebuilt as a JobSpec and
estimated by ``grpo_ui.memory.estimate``. Workloads: ``grpo`` (the trainer GPU), ``sft`` (the same training terms with the
whole sequence as scored tokens and a cross-entropy loss, no rollout) and ``vllm`` (vLLM alone on its GPUs: the
rollout GPU of server mode).

Split, decided once before any parameter was tuned on these rows: every row added with issue 3 (the estimator was
tuned on those) is a fit row; a row added later is held out when sha256("2:" + its source key) is even, the source
key being the source's address plus its section for pages with several tables (``source_key``). The salt 2 is the
smallest for which at least 30 % of all rows and of GRPO rows were held out when the split was made; it stays
fixed. No parameter of grpo_ui/memory/ may be tuned on held-out rows.
"""

from __future__ import annotations

import hashlib
import json
import re
import statistics
from dataclasses import dataclass, replace
from pathlib import Path

from grpo_ui.memory.estimate import estimate
from grpo_ui.memory.inputs import Inputs, inputs_from_spec
from grpo_ui.memory.report import GIB, MemoryReport
from grpo_ui.spec.fields import parse_version
from grpo_ui.spec.model import JobSpec
from grpo_ui.spec.paths import with_changes
from grpo_ui.spec.resolve import sft_grad_accum
from grpo_ui.spec.swift_args import FIRST_GRPO_VERSION, RolloutArgs, ServerArgs, TrainArgs

REQUIRED = ("id", "kind", "workload", "source", "config", "gpu", "measured_gib", "unit", "measures", "compare",
            "notes", "added")
WORKLOADS = ("grpo", "sft", "vllm")
UNITS = ("GiB", "GB", "G", "MiB")
# Row keys that are not JobSpec fields: the layout, the environment, and facts of the run's software
LAYOUT_KEYS = {"nodes", "gpus_per_node", "swift_version", "seq_len", "env", "framework", "trl_version",
               "transformers_version", "accelerate_version", "freeze_vit",
               "vit_gradient_checkpointing", "fixed_length"}
# peak: everything on the GPU (nvidia-smi); torch: what torch's allocator reserved (ms-swift's memory(GiB));
# allocated: what torch's tensors held at most (torch.cuda.max_memory_allocated)
COMPARE = ("peak", "torch", "allocated")
NOT_TORCH = ("vLLM", "CUDA context", "NCCL")  # not torch allocations, or (vLLM) counted apart: predicted_gib
SPLIT_SALT = 2
TRL_CURRENT = "1.9"  # what a TRL row without trl_version is taken to run
FIRST_ISSUE = "issue 3"


@dataclass(frozen=True)
class Result:
    row: dict
    ours: float
    modelled: float  # what the error margin scales (modelled_gib)
    weights_only: float
    deepspeed: float | None  # None for vLLM rows: DeepSpeed's estimator is for training

    def error(self, predicted: float) -> float:
        """Absolute error in % of the measurement."""
        return abs(predicted - self.row["measured_gib"]) / self.row["measured_gib"] * 100

    def signed(self, predicted: float) -> float:
        """Signed error in % (negative: underestimated)."""
        return (predicted - self.row["measured_gib"]) / self.row["measured_gib"] * 100

    @property
    def margin_needed(self) -> float:
        """The error margin (as memory.ESTIMATE_MARGIN) that would just cover this measurement; negative if the
        estimate is above it."""
        return (self.row["measured_gib"] - self.ours) / self.modelled


def load(path: str | Path) -> list[dict]:
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


def source_key(row: dict) -> str:
    """The source a row comes from: the address before ' — ', plus the section when the source names one."""
    key = row["source"].split(" — ")[0]
    section = re.search(r"section '([^']+)'", row["source"])
    return key + ("#" + section[1] if section else "")


def held_out(row: dict) -> bool:
    """The frozen split (module docstring)."""
    if row["added"] == FIRST_ISSUE:
        return False
    return int(hashlib.sha256(f"{SPLIT_SALT}:{source_key(row)}".encode()).hexdigest(), 16) % 2 == 0


def problems(row: dict) -> list[str]:
    """What makes a row unusable (missing fields, config keys no JobSpec field takes); empty if well-formed."""
    out = [f"missing {k}" for k in REQUIRED if k not in row]
    cfg = row.get("config", {})
    fields = set(TrainArgs.model_fields) | set(RolloutArgs.model_fields) | set(ServerArgs.model_fields)
    out += [f"config key {k} is not a JobSpec field" for k in sorted(set(cfg) - LAYOUT_KEYS - fields)]
    if row.get("workload") == "sft" and "seq_len" not in cfg:
        out.append("an sft row needs config.seq_len")
    for key, allowed in (("workload", WORKLOADS), ("compare", COMPARE), ("unit", UNITS)):
        if row.get(key) not in allowed:
            out.append(f"{key} must be one of {allowed}")
    if not row.get("measured_gib", 0) > 0:
        out.append("measured_gib must be positive")
    return out


def spec_of(row: dict) -> JobSpec:
    """The JobSpec a row's configuration describes (one node entry per node, all on the row's GPU). A vllm row
    becomes a server-mode job whose rollout node holds the measured GPUs; its vLLM settings are the server's."""
    cfg = row["config"]
    changes: dict = {"train.dataset": ["calibration"], "train.reward_funcs": ["accuracy"], "env": cfg.get("env", {})}
    if row["workload"] == "sft":
        changes["rollout.use_vllm"] = False
    else:  # rows name the vLLM settings they change; colocated vLLM is what they assume otherwise
        changes.update({"rollout.use_vllm": True, "rollout.vllm_mode": "colocate"})
    vllm_section = "server" if row["workload"] == "vllm" else "rollout"
    for key, value in cfg.items():
        if key in TrainArgs.model_fields:
            changes[f"train.{key}"] = value
        elif vllm_section == "server" and key in ServerArgs.model_fields:
            changes[f"server.{key}"] = value
        elif key in RolloutArgs.model_fields:
            changes[f"rollout.{key}"] = value
    gpus = list(range(cfg.get("gpus_per_node", 1)))
    nodes = [{"host": f"node{n}", "gpus": gpus, "gpu_model": row["gpu"]} for n in range(cfg.get("nodes", 1))]
    if row["workload"] == "vllm":
        changes["rollout.vllm_mode"] = "server"
        nodes = [{"host": "trainer", "gpus": [0], "gpu_model": row["gpu"]},
                 {"host": "rollout", "role": "rollout", "gpus": gpus, "gpu_model": row["gpu"]}]
    changes["cluster.nodes"] = nodes
    return with_changes(JobSpec(swift_version=spec_version(cfg.get("swift_version", "4.6"))), changes)


def spec_version(version: str) -> str:
    """A row's ms-swift version as a job spec takes it: rows measured on ms-swift 2.x and 3.0–3.1 (before GRPO, SFT
    rows) as 3.2, the oldest a GRPO job spec accepts; what the estimate reads of the version (the logits kept in
    place from 4.2, SFT's default accumulation before 3.7) is the same for all of them."""
    return version if parse_version(version) >= FIRST_GRPO_VERSION else ".".join(map(str, FIRST_GRPO_VERSION))


def inputs_of(row: dict) -> Inputs:
    """A row's Inputs, with the facts of its software that a JobSpec does not carry:

    - SFT scores the whole sequence with a cross-entropy loss, loads no other model, keeps the ZeRO-3 prefetch
      bucket at transformers' 'auto' (0.9·h²), which ms-swift's GRPO config zeroes (GRPOConfig.__post_init__), and
      accumulates ceil(16 / (micro-batch × world)) micro-steps unless told (ms-swift's TrainingArguments default;
      GRPO's is 1);
    - TRL (``framework: trl``; ``trl_version`` when the source names it, else a current 1.x): before 0.25 it prepared
      a quantised model with PEFT's prepare_model_for_kbit_training, which upcasts the unquantised weights to fp32;
      from 0.26 it casts QLoRA adapters to bf16 (grpo_trainer.py), from 1.0 it divides the logits by the temperature
      in place;
    - accelerate_version: before 1.13 accelerate's FSDP2 upcasts frozen parameters to fp32 as well (fsdp_upcasts);
    - fixed_length: every step has the same shapes (packing, padding to the maximum length);
    - freeze_vit / vit_gradient_checkpointing (ms-swift flags the JobSpec does not declare)."""
    cfg = row["config"]
    i = inputs_from_spec(spec_of(row))
    if cfg.get("framework") == "trl":
        trl = parse_version(str(cfg.get("trl_version", TRL_CURRENT)))
        i = replace(i, kbit_fp32=bool(i.quant) and trl < (0, 25, 0), lora_bf16=bool(i.quant) and trl >= (0, 26, 0),
                    logits_inplace=trl >= (1, 0, 0))
    if "accelerate_version" in cfg:
        i = replace(i, fsdp_fp32_frozen=parse_version(str(cfg["accelerate_version"])) < (1, 13, 0))
    i = replace(i, fixed_shapes=bool(cfg.get("fixed_length")), vit_trainable=cfg.get("freeze_vit") is False,
                vit_ckpt=cfg.get("vit_gradient_checkpointing", i.grad_ckpt))
    if row["workload"] == "sft":
        accumulation = cfg.get("gradient_accumulation_steps") or sft_grad_accum(i.micro_batch, i.world)
        i = replace(i, loss="ce", prompt_len=0, completion_len=cfg["seq_len"], extra_models=(), vllm="none",
                    generation_batch=0, zero3_prefetch=0.9 * i.arch.hidden_size ** 2, grad_accum=accumulation)
    return i


def predicted_gib(row: dict, report: MemoryReport) -> float:
    """The estimate of what the row measured: the trainer GPU's peak phase (SFT: no rollout phase; vLLM rows: the
    rollout GPU's).

    ``torch`` (ms-swift's memory(GiB) = torch.cuda.max_memory_reserved of the process) leaves out the CUDA context and
    NCCL's buffers, which torch's caching allocator does not hold, but counts a vLLM engine living in the same process
    at its whole reservation in every phase, whatever the sleep level: without sleep mode vLLM's weights and KV cache
    are ordinary torch tensors; with it they come from a torch MemPool over vLLM's pluggable cuMem allocator
    (vllm/device_allocator/cumem.py use_memory_pool_with_allocator), whose blocks torch keeps counting as allocated
    and reserved after sleep() has unmapped them (vllm-project/vllm#17117: memory_allocated/memory_reserved unchanged
    across sleep and wake_up; #33625: memory_reserved and max_memory_reserved above the card's size after sleeping).
    A server-mode vLLM is another process and is not in the trainer's figure. ``allocated`` also leaves out the
    allocator's reserve."""
    role = report.roles[-1] if row["workload"] == "vllm" else report.trainer
    phases = [p for p in role.phases if not (row["workload"] == "sft" and p.name == "rollout")]
    if row["compare"] == "peak":
        return max(p.total for p in phases)
    pool = sum(t.gib for p in role.phases if p.name == "rollout" for t in p.terms if t.name.startswith("vLLM"))
    keep = (lambda t: not t.reclaimable) if row["compare"] == "allocated" else (lambda t: True)
    return max(sum(t.gib for t in p.terms if keep(t) and not t.name.startswith(NOT_TORCH)) for p in phases) + pool


def deepspeed_baseline_gib(i: Inputs) -> float:
    """DeepSpeed's model-states estimator for the row's stage (ZeRO-3's for stage 3, ZeRO-2's otherwise), on all
    parameters as ``estimate_zero*_model_states_mem_needs_all_live(model)`` counts them, without offload."""
    p, nodes = i.arch.total_params(), max(i.world // i.nproc, 1)
    if i.stage == 3:
        largest = max(i.arch.vocab_size * i.arch.hidden_size, i.arch.layer_params())
        _, gpu = deepspeed_zero3_model_states(p, largest, i.nproc, nodes, cpu_offload=False,
                                              cpu_offload_params=False)
    else:
        _, gpu = deepspeed_zero2_model_states(p, i.nproc, nodes, cpu_offload=False)
    return gpu / GIB


def modelled_gib(row: dict, report: MemoryReport) -> float:
    """What the estimate models (memory.Phase.modelled), the most over the phases the row's figure can come from."""
    role = report.roles[-1] if row["workload"] == "vllm" else report.trainer
    return max(p.modelled for p in role.phases if not (row["workload"] == "sft" and p.name == "rollout"))


def evaluate(row: dict) -> Result:
    i = inputs_of(row)
    report = estimate(i)
    ours, modelled = predicted_gib(row, report), modelled_gib(row, report)
    if row["workload"] == "vllm":  # per GPU: the weights split over tensor parallelism
        return Result(row, ours, modelled, weights_only_gib(i.arch.total_params(), i.param_bytes) / i.server_tp, None)
    return Result(row, ours, modelled, weights_only_gib(i.arch.total_params(), i.param_bytes),
                  deepspeed_baseline_gib(i))


MARGIN_COVERAGE = 0.9  # the share of fit rows memory.ESTIMATE_MARGIN covers


def margin(results: list[Result], coverage: float = MARGIN_COVERAGE) -> float:
    """The error margin that covers ``coverage`` of the results (linear interpolation between order statistics)."""
    return statistics.quantiles([r.margin_needed for r in results], n=100, method="inclusive")[round(coverage * 100) - 1]


def covered(results: list[Result], m: float) -> float:
    """The share of results whose measurement is at most the estimate with margin ``m``."""
    return sum(r.margin_needed <= m for r in results) / len(results)


@dataclass(frozen=True)
class Summary:
    n: int
    median: float          # absolute % error
    p90: float
    under_10: float        # share of rows underestimated by more than 10 %
    median_signed: float   # direction: negative = the estimate runs low


def summary(results: list[Result], pick=lambda r: r.ours) -> Summary | None:
    """Error statistics of ``pick`` (our estimate by default) over the results where it exists; p90 by linear
    interpolation between order statistics; None if none."""
    pairs = [(r.error(pick(r)), r.signed(pick(r))) for r in results if pick(r) is not None]
    if not pairs:
        return None
    errors, signed = [e for e, _ in pairs], [s for _, s in pairs]
    p90 = errors[0] if len(errors) == 1 else statistics.quantiles(errors, n=10, method="inclusive")[8]
    return Summary(len(pairs), statistics.median(errors), p90, sum(s < -10 for s in signed) / len(signed),
                   statistics.median(signed))


# Baselines users have today (for the accuracy benchmark): weights only, and DeepSpeed's model-states estimators.

def weights_only_gib(params: float, bytes_per_param: float = 2.0) -> float:
    """What `accelerate estimate-memory`-style tools report for inference: parameters × bytes."""
    return params * bytes_per_param / GIB


def deepspeed_zero2_model_states(total_params: int, gpus_per_node: int = 1, nodes: int = 1, cpu_offload: bool = True,
                                 buffer_factor: float = 1.5) -> tuple[int, int]:
    """(cpu bytes, gpu bytes) per DeepSpeed's ZeRO-2 estimator: 4 B/param + 16 B/param ÷ GPUs on the GPU without
    offload (2 B/param with); host: max(4 × GPUs, 16) B/param × 1.5 with offload, else 4 B × GPUs per node × 1.5."""
    gpus = nodes * gpus_per_node
    if cpu_offload:
        return int(total_params * max(4 * gpus, 16) * buffer_factor), int(2 * total_params)
    return int(total_params * 4 * gpus_per_node * buffer_factor), int(4 * total_params + int(16 * total_params / gpus))


def deepspeed_zero3_model_states(total_params: int, largest_layer_params: int, gpus_per_node: int = 1, nodes: int = 1,
                                 cpu_offload: bool = True, cpu_offload_params: bool = True, zero_init: bool = True,
                                 buffer_factor: float = 1.5) -> tuple[int, int]:
    """(cpu bytes, gpu bytes) per DeepSpeed's ZeRO-3 estimator: the largest layer in fp32 (4 B/param) is live on
    the GPU, plus 18 B/param ÷ GPUs without offload (2 B/param ÷ GPUs when only the optimizer is offloaded)."""
    gpus, per_node = nodes * gpus_per_node, 1 / nodes
    largest = 4 * largest_layer_params
    if cpu_offload and cpu_offload_params:
        factor = 18 * per_node if zero_init else max(4 * gpus_per_node, 18 * per_node)
        return int(total_params * factor * buffer_factor), int(largest)
    if cpu_offload:
        factor = 16 * per_node if zero_init else max(4 * gpus_per_node, 16 * per_node)
        return int(total_params * factor * buffer_factor), int(largest + int(2 * total_params / gpus))
    cpu = largest_layer_params * 4 * gpus_per_node if zero_init else total_params * 4 * gpus_per_node
    return int(cpu * buffer_factor), int(largest + int(18 * total_params / gpus))
