"""Make it faster: the changes that shorten a job's optimizer step, each with the step time it leads to and the
memory verdict after it. A change is offered only when the job still passes after it: ms-swift's rules and the
command line raise no error, the memory estimate says it fits (or is tight, with its warning) and vLLM can start.

Each candidate is a ready-to-apply {dotted spec path: value} change, like make-it-fit's (checks/fit.py); the ones that
change what is learned say so in their reason.
"""

from __future__ import annotations

from dataclasses import dataclass

from grpo_ui.checks import megatron_levers
from grpo_ui.checks.rules import validate
from grpo_ui.checks.slurm import slurm_findings
from grpo_ui.memory.estimate import estimate_spec
from grpo_ui.spec.errors import SpecError
from grpo_ui.spec.model import JobSpec
from grpo_ui.spec.paths import with_changes
from grpo_ui.spec.resolve import Resolved, resolve
from grpo_ui.spec.swift_cli import train_command
from grpo_ui.timing.predict import predict_spec
from grpo_ui.timing.report import TimeReport

MIN_SAVING = 0.03  # a change that saves less than this share of the step is not worth a card


@dataclass(frozen=True)
class Faster:
    changes: dict
    why: str
    step_s: float
    saving: float  # share of the current step it saves
    verdict: str   # the memory estimate's verdict after the change


def _rollout_candidates(eff: Resolved) -> list[tuple[dict, str]]:
    """The rollout's levers (both engines; async_generate only for swift rlhf: Megatron GRPO refuses it)."""
    r, s = eff.spec.rollout, eff.spec.server
    out: list[tuple[dict, str]] = []
    if eff.vllm_mode == "none":
        out.append(({"rollout.use_vllm": True, "rollout.vllm_mode": "colocate"},
                    "vLLM colocated instead of transformers' generate()"))
    if eff.colocate:
        tp = r.vllm_tensor_parallel_size
        if eff.nproc_per_node % (tp * 2) == 0:
            out.append(({"rollout.vllm_tensor_parallel_size": tp * 2},
                        f"vLLM tensor parallel {tp * 2}: each engine reads 1/{tp * 2} of the weights"))
        if tp > 1:
            out.append(({"rollout.vllm_tensor_parallel_size": tp // 2},
                        f"vLLM tensor parallel {tp // 2}: twice the engines, each with half the batch"))
        if r.vllm_gpu_memory_utilization < 0.8:
            util = round(r.vllm_gpu_memory_utilization + 0.1, 2)
            out.append(({"rollout.vllm_gpu_memory_utilization": util},
                        f"vLLM reserves {util:.0%}: more KV cache, fewer waves"))
        if r.sleep_level > 0:
            out.append(({"rollout.sleep_level": 0}, "vLLM stays awake: no sleep and wake-up each round"))
        if r.offload_model or r.offload_optimizer:
            out.append(({"rollout.offload_model": False, "rollout.offload_optimizer": False},
                        "no offload of the policy and its optimizer around generation"))
    if eff.server:
        if not r.async_generate and not eff.megatron:
            out.append(({"rollout.async_generate": True},
                        "async_generate: the servers generate the next batch while training (one step off-policy)"))
        if s.vllm_tensor_parallel_size > 1:
            out.append(({"server.vllm_tensor_parallel_size": s.vllm_tensor_parallel_size // 2,
                         "server.vllm_data_parallel_size": s.vllm_data_parallel_size * 2},
                        "rollout servers: half the tensor parallelism, twice the engines"))
    return out


def _candidates(eff: Resolved) -> list[tuple[dict, str]]:
    if eff.megatron:  # megatron rlhf: its own levers (checks/megatron_levers.py)
        return (_rollout_candidates(eff) + megatron_levers.faster_candidates(eff)
                + _less_work(eff, eff.megatron.full_tuning))
    t = eff.spec.train
    out = _rollout_candidates(eff)
    if t.gradient_checkpointing:
        out.append(({"train.gradient_checkpointing": False}, "no gradient checkpointing: no recomputation"))
    if (t.deepspeed or "").startswith("zero3"):
        out.append(({"train.deepspeed": "zero2"}, "DeepSpeed ZeRO-2: no weight gathers in every forward and backward"))
    if not t.padding_free and (t.attn_impl or "flash_attn") == "flash_attn" and t.per_device_train_batch_size > 1:
        out.append(({"train.padding_free": True, "train.attn_impl": "flash_attn"},
                    "padding_free: no padding to the micro-batch's longest completion"))
    return out + _less_work(eff, t.tuner_type == "full")


def _less_work(eff: Resolved, full: bool) -> list[tuple[dict, str]]:
    """Training less (both engines): LoRA instead of full tuning, a lower completion cap."""
    out: list[tuple[dict, str]] = []
    if full:
        out.append(({"train.tuner_type": "lora"}, "LoRA instead of full tuning (trains adapters only)"))
    cap = eff.spec.train.max_completion_length
    if cap >= 1024:
        out.append(({"train.max_completion_length": cap // 2},
                    f"completions capped at {cap // 2} tokens (longer ones are cut: changes what is learned)"))
    return out


def passes(eff: Resolved) -> str | None:
    """The memory verdict when the job passes (no error from the rules, the command line or the Slurm checks, no OOM,
    vLLM can start: what the assessment would block on, without its make-it-fit search); else None."""
    if any(f.severity == "error" for f in validate(eff) + train_command(eff).findings
           + slurm_findings(eff.spec)):
        return None
    try:
        report = estimate_spec(eff)
    except ValueError:
        return None
    if report.verdict == "oom" or any(n.startswith("vLLM cannot start") for r in report.roles for n in r.notes):
        return None
    return report.verdict


def faster(job: JobSpec | Resolved, base: TimeReport | None = None, limit: int = 3, arch=None) -> list[Faster]:
    """The changes that shorten the step most (at least MIN_SAVING of it) and after which the job still passes,
    fastest first; empty when no step time can be predicted. ``base``: the job's own prediction, when the caller
    has it (the assessment)."""
    eff = resolve(job, arch)
    try:
        now = (base or predict_spec(eff)).step_s
    except ValueError:  # no GPU speed facts, an unknown model
        return []
    found: list[Faster] = []
    for changes, why in _candidates(eff):
        try:
            after = resolve(with_changes(eff.spec, changes), eff.arch)
            step = predict_spec(after).step_s
        except (SpecError, ValueError):
            continue
        if step > now * (1 - MIN_SAVING):
            continue
        verdict = passes(after)
        if verdict is not None:
            found.append(Faster(changes, why, step, 1 - step / now, verdict))
    found.sort(key=lambda f: f.step_s)
    return found[:limit]
