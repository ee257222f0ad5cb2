"""The step-time prediction of a job: one generation round's phases (rollout.py, training.py, transfer.py) put
together as ms-swift runs them, shared out over the optimizer steps the round feeds, and the run's length and cost.

A round: generate, score, the old policy's and the reference's log-probs, the training micro-steps with their optimizer
steps, and the weights back to vLLM; colocated vLLM also sleeps and wakes and ms-swift may offload the policy around
generation. Everything runs one after the other, except with async_generate (server mode): the servers generate the
next round while the trainers train, so a round takes the longer of the two plus the sync.
"""

from __future__ import annotations

from grpo_ui.knowledge.catalog import ModelArch
from grpo_ui.spec.model import JobSpec
from grpo_ui.spec.resolve import Resolved, resolve
from grpo_ui.timing import efficiency, megatron
from grpo_ui.timing.inputs import TimeInputs, dataset_rows, time_inputs
from grpo_ui.timing.report import TimeReport, run_steps
from grpo_ui.timing.rollout import rollout
from grpo_ui.timing.training import logprobs_s, reward_s, train_s
from grpo_ui.timing.transfer import offload_s, sleep_wake_s, sync_s


def predict(t: TimeInputs, steps: int | None = None, price: float | None = None) -> TimeReport:
    """Seconds per optimizer step by phase for ``t``; ``steps`` the run's optimizer steps (None: unknown)."""
    gen = rollout(t)
    if t.mem.megatron:  # megatron rlhf: Megatron-Core's forwards, training steps, sync and offload
        (old, ref), train, sync, offload = megatron.logprobs_s(t), megatron.train_s(t), megatron.sync_s(t), (
            megatron.offload_s(t))
    else:
        (old, ref), train, sync, offload = logprobs_s(t), train_s(t), sync_s(t), offload_s(t)
    per_round = {"rollout": gen.seconds, "reward": reward_s(t), "old_logprobs": old, "ref_logprobs": ref,
                 "train": train, "weight_sync": sync, "sleep_wake": sleep_wake_s(t), "offload": offload,
                 "overhead": efficiency.ROUND_OVERHEAD_S}
    if t.async_generate:  # generation of the next round hides behind this round's training
        trainer_side = sum(v for k, v in per_round.items() if k not in ("rollout", "weight_sync"))
        per_round["rollout"] = max(0.0, gen.seconds - trainer_side)
    round_s = sum(per_round.values())
    n = t.steps_per_round
    engine = (f"Megatron-Core at {efficiency.MEGATRON_MFU:.0%}" if t.mem.megatron
              else f"transformers at {efficiency.TRANSFORMERS_MFU:.0%}")
    assumed = [*t.assumptions,
               f"training on {engine} of the GPU's dense bf16 peak (from published training-step times), prefill at "
               f"{efficiency.INFERENCE_MFU:.0%}, decoding at {efficiency.BANDWIDTH_EFFICIENCY:.0%} of its memory "
               "bandwidth (fitted on published runs)"]
    details = {"generation_s": gen.seconds, "engines": t.replicas, "completions_per_engine": gen.per_engine,
               "concurrency": gen.concurrency, "waves": gen.waves, "decode_steps": gen.decode_steps,
               "decode_step_ms": gen.step_s * 1e3, "longest_completion": gen.longest,
               "mean_completion": t.completion_tokens, "prompt_tokens": t.prompt_tokens, "environment_s": gen.env_s}
    return TimeReport(round_s / n, {k: v / n for k, v in per_round.items()}, round_s, n, steps, t.total_gpus, price,
                      assumed, t.completion_given, details)


def predict_spec(job: JobSpec | Resolved, gpu: str | None = None, arch: ModelArch | None = None,
                 completion_tokens: int | None = None, steps: int | None = None,
                 price: float | None = None) -> TimeReport:
    """The prediction for a job (its spec or Resolved values). ``gpu``, ``completion_tokens``, ``steps`` and
    ``price`` stand for every node's gpu_model, estimate.completion_tokens, the run's steps and
    estimate.price_per_gpu_hour. Raises NoTimeEstimate or the memory estimate's EstimateError."""
    eff = resolve(job, arch)
    t = time_inputs(eff, gpu, completion_tokens=completion_tokens)
    tr, e = eff.spec.train, eff.spec.estimate
    if steps is None:  # megatron rlhf runs train_iters iterations (from num_train_epochs when that is set)
        steps = eff.megatron.train_iters if eff.megatron else run_steps(
            tr.max_steps, dataset_rows(eff.spec), t.prompts_per_round, t.steps_per_round, tr.num_train_epochs)
    report = predict(t, steps, price if price is not None else e.price_per_gpu_hour)
    if report.steps is None:
        report.assumptions.append("an unknown number of steps (set estimate.dataset_rows, or train."
                                  f"{'train_iters' if eff.megatron else 'max_steps'})")
    if report.price is None:
        report.assumptions.append("no price per GPU-hour (set estimate.price_per_gpu_hour)")
    return report
