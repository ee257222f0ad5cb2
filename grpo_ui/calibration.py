"""Measured peak GPU memory (tests/data/memory_measurements.jsonl) against the estimator and two baselines.

Each row names a published measurement, the configuration it was taken with and what the figure measures. A row is
rebuilt as a JobSpec and estimated by ``grpo_ui.memory``. Workloads: ``grpo`` (the trainer GPU), ``sft`` (the same
training terms with the whole sequence as trained tokens, since SFT computes logits at every position, and no
rollout) and ``vllm`` (vLLM alone on its GPUs: the rollout GPU of server mode).
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass, replace
from pathlib import Path

from grpo_ui.memory import (
    GIB,
    Inputs,
    MemoryReport,
    deepspeed_zero2_model_states,
    deepspeed_zero3_model_states,
    estimate,
    inputs_from_spec,
    weights_only_gib,
)
from grpo_ui.spec import JobSpec, RolloutArgs, ServerArgs, TrainArgs, with_changes

REQUIRED = ("id", "kind", "workload", "source", "config", "gpu", "measured_gib", "measures", "compare", "notes",
            "held_out")
WORKLOADS = ("grpo", "sft", "vllm")
LAYOUT_KEYS = {"nodes", "gpus_per_node", "swift_version", "seq_len"}
COMPARE = ("peak", "torch")  # peak: everything on the GPU (nvidia-smi); torch: what torch's allocator reserved
NOT_TORCH = ("vLLM", "CUDA context", "NCCL")  # not torch allocations, or (vLLM) counted apart: predicted_gib


@dataclass(frozen=True)
class Result:
    row: dict
    ours: float
    weights_only: float
    deepspeed: float | None  # None for vLLM rows: DeepSpeed's estimator is for training

    def error(self, predicted: float) -> float:
        """Absolute error in % of the measurement."""
        return abs(predicted - self.row["measured_gib"]) / self.row["measured_gib"] * 100


def load(path: str | Path) -> list[dict]:
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


def problems(row: dict) -> list[str]:
    """What makes a row unusable (missing fields, config keys no JobSpec field takes); empty if well-formed."""
    out = [f"missing {k}" for k in REQUIRED if k not in row]
    cfg = row.get("config", {})
    fields = set(TrainArgs.model_fields) | set(RolloutArgs.model_fields) | set(ServerArgs.model_fields)
    unknown = set(cfg) - LAYOUT_KEYS - fields
    out += [f"config key {k} is not a JobSpec field" for k in sorted(unknown)]
    if row.get("workload") == "sft" and "seq_len" not in cfg:
        out.append("an sft row needs config.seq_len")
    if row.get("workload") not in WORKLOADS:
        out.append(f"workload must be one of {WORKLOADS}")
    if row.get("compare") not in COMPARE:
        out.append(f"compare must be one of {COMPARE}")
    if not row.get("measured_gib", 0) > 0:
        out.append("measured_gib must be positive")
    return out


def spec_of(row: dict) -> JobSpec:
    """The JobSpec a row's configuration describes (one node entry per node, all on the row's GPU). A vllm row
    becomes a server-mode job whose rollout node holds the measured GPUs; its vLLM settings are the server's."""
    cfg = row["config"]
    changes: dict = {"train.dataset": ["calibration"], "train.reward_funcs": ["accuracy"]}
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
    return with_changes(JobSpec(swift_version=cfg.get("swift_version", "4.6")), changes)


def inputs_of(row: dict) -> Inputs:
    """A row's Inputs. SFT keeps the ZeRO-3 prefetch bucket at transformers' 'auto' (0.9·h²), which ms-swift's GRPO
    config zeroes (GRPOConfig.__post_init__), and trains on the whole sequence."""
    i = inputs_from_spec(spec_of(row))
    if row["workload"] == "sft":
        i = replace(i, prompt_len=0, completion_len=row["config"]["seq_len"], ref_model=False, vllm="none",
                    zero3_prefetch=0.9 * i.arch.hidden_size ** 2)
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
    A server-mode vLLM is another process and is not in the trainer's figure."""
    role = report.roles[-1] if row["workload"] == "vllm" else report.trainer
    phases = [p for p in role.phases if not (row["workload"] == "sft" and p.name == "rollout")]
    if row["compare"] != "torch":
        return max(p.total for p in phases)
    pool = sum(t.gib for p in role.phases if p.name == "rollout" for t in p.terms if t.name.startswith("vLLM"))
    return max(sum(t.gib for t in p.terms if not t.name.startswith(NOT_TORCH)) for p in phases) + pool


def deepspeed_baseline_gib(i: Inputs) -> float:
    """DeepSpeed's model-states estimator for the row's stage (ZeRO-3's for stage 3, ZeRO-2's otherwise), on all
    parameters as ``estimate_zero*_model_states_mem_needs_all_live(model)`` counts them, without offload."""
    p, nodes = i.arch.total_params(), max(i.world // i.nproc, 1)
    if i.zero_stage == 3:
        largest = max(i.arch.vocab_size * i.arch.hidden_size, i.arch.layer_params())
        _, gpu = deepspeed_zero3_model_states(p, largest, i.nproc, nodes, cpu_offload=False,
                                              cpu_offload_params=False)
    else:
        _, gpu = deepspeed_zero2_model_states(p, i.nproc, nodes, cpu_offload=False)
    return gpu / GIB


def evaluate(row: dict) -> Result:
    i = inputs_of(row)
    if row["workload"] == "vllm":  # per GPU: the weights split over tensor parallelism
        return Result(row, predicted_gib(row, estimate(i)),
                      weights_only_gib(i.arch.total_params(), i.param_bytes) / i.server_tp, None)
    return Result(row, predicted_gib(row, estimate(i)), weights_only_gib(i.arch.total_params(), i.param_bytes),
                  deepspeed_baseline_gib(i))


def summary(errors: list[float]) -> tuple[float, float] | None:
    """(median, p90) of absolute % errors, p90 by linear interpolation between order statistics; None if empty."""
    if not errors:
        return None
    if len(errors) == 1:
        return errors[0], errors[0]
    return statistics.median(errors), statistics.quantiles(errors, n=10, method="inclusive")[8]
