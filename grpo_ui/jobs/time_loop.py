"""The step-time prediction's closed loop, as memory_loop is the memory estimate's: the prediction a job was launched
with (stored by the launch: seconds per step, total hours, … or why there is none), the pace measured while it runs
(doctor.pace over the stored metrics and the logging rank's node's log, recorded by the watcher), both side by side for
Monitor and History, and those pairs written as calibration rows in the format of tests/data/time_measurements.jsonl
(see its README) so users can contribute them."""

from __future__ import annotations

import hashlib
import statistics
import time
from dataclasses import dataclass

from grpo_ui.doctor.pace import MOSTLY_CAPPED, RECENT_CYCLES, SLEEP_MARK, Pace, pace, seconds_text
from grpo_ui.jobs.memory_loop import EXPORTED
from grpo_ui.jobs.specs import job_spec
from grpo_ui.jobs.store import JobState, Store, TimeAtLaunch, Unavailable
from grpo_ui.knowledge.engines import EngineConfigError, zero_config
from grpo_ui.launch.plan import DRIVER
from grpo_ui.spec.model import JobSpec
from grpo_ui.spec.resolve import Resolved, resolve

PACE_KEYS = ("seconds_per_step", "elapsed_time_s", "max_steps", "completions/mean_length",
             "completions/clipped_ratio", "step_time")
SLEEP_LINES = 5000  # vLLM sleep/wake lines of the logging rank's node looked at (every rank logs its own)
HELD_OUT_DIGITS = "012345"  # time_measurements.README.md: held out when sha256(source key) starts with one of these


def measure(store: Store, job_id: str, job: JobSpec | Resolved) -> Pace:
    """The job's pace (its spec or Resolved values) from its stored metrics and the vLLM sleep/wake lines of the node
    running the logging rank (swift rlhf's rank 0, megatron rlhf's last)."""
    eff = resolve(job)
    spec = eff.spec
    logger = DRIVER if eff.ray else next((n.node_index for n in store.nodes(job_id)  # Ray: what its workers print
                                          if n.role == "trainer" and n.node_rank == eff.logging_node), None)
    sleep = [] if logger is None else [t for _, t, _ in store.log_lines(job_id, logger, SLEEP_LINES, SLEEP_MARK)]
    return pace(store.metrics(job_id, PACE_KEYS), eff.rollout_steps, sleep, spec.train.max_completion_length)


def record_pace(store: Store, job_id: str, job: JobSpec | Resolved) -> dict:
    """Measure the job's pace and keep it with the job (its intervals as their count); also the start-up (the
    launch to the first logged step: loading, vLLM start, first rollout) and when the job should finish (the last
    step's arrival plus the ETA)."""
    measured = measure(store, job_id, job).to_dict()
    row, steps = store.job(job_id), store.step_times(job_id)
    measured["startup_s"] = steps[0][1] - row.started if steps and row and row.started else None
    measured["finish_at"] = steps[-1][1] + measured["eta_s"] if steps and measured["eta_s"] is not None else None
    store.set_time_measured(job_id, measured)
    return measured


def no_prediction(estimate: TimeAtLaunch | Unavailable | None) -> str | None:
    """Why the job has no prediction to compare with (None when it has one)."""
    if estimate is None:
        return "no prediction was stored with this job (it was launched before grpo-ui predicted step times)"
    if isinstance(estimate, Unavailable):
        return f"no prediction: {estimate.why}"
    return None


def no_pace(measured: dict | None) -> str | None:
    """Why there is no measured pace yet (None when there is one)."""
    if not measured or measured["first_step"] is None:
        return "no step logged yet"
    if measured["median_s"] is None:
        return ("only the first step is logged (warm-up: first rollout, compilation); the pace shows from the next "
                "logged step")
    return None


def no_rollout_share(job: JobSpec | Resolved) -> str:
    """Why the log shows no rollout share for this job's rollout setting."""
    eff = resolve(job)
    spec = eff.spec
    if eff.vllm_mode == "none":
        return "no vLLM: generation runs inside the training step (step_time)"
    if eff.server:
        return "server mode: vLLM generates on the rollout nodes, and ms-swift logs no rollout time"
    if not spec.rollout.sleep_level:
        return "colocate with sleep_level 0: vLLM logs no sleep/wake lines, so the rollout is not timed"
    node = "the last node" if eff.megatron else "rank 0's node"  # where the metrics and sleep lines are read
    return f"no whole vLLM sleep/wake cycle in the log of {node}"


@dataclass(frozen=True)
class PaceComparison:
    """A job's step time measured next to its prediction at launch."""

    measured: dict | None             # the pace as the watcher last recorded it (record_pace)
    predicted: TimeAtLaunch | None    # None: no_prediction says why
    no_prediction: str | None
    no_pace: str | None               # why there is no measured pace yet
    ratio: float | None               # measured median s/step / predicted s/step
    measured_total_s: float | None    # training time of a finished run; while it runs, so far plus the ETA; None
                                      # for a run that ended early
    predicted_total_s: float | None


def comparison(store: Store, job_id: str) -> PaceComparison:
    """Measured (as the watcher last recorded it; measured now for a job it never saw) next to predicted."""
    job = store.job(job_id)
    measured = store.time_measured(job_id) or record_pace(store, job_id, job_spec(job))
    estimate = store.time_estimate(job_id)
    why_not = no_prediction(estimate)
    predicted = None if why_not else estimate
    pace_missing = no_pace(measured)
    step = None if pace_missing else measured["median_s"]
    total = None
    if not pace_missing and job.state.active:
        total = measured["train_s"] + (measured["eta_s"] or 0.0)
    elif not pace_missing and measured["step"] == measured["total"]:
        total = measured["train_s"]
    return PaceComparison(measured, predicted, why_not, pace_missing,
                          step / predicted.step_s if step and predicted and predicted.step_s else None, total,
                          predicted.total_h * 3600 if predicted and predicted.total_h else None)


def completions_text(measured: dict) -> str | None:
    c = measured.get("completions") if measured else None
    if not c:
        return None
    text = f"completions average {c['mean_length']:.0f}" + (f" of {c['cap']} tokens" if c["cap"] else " tokens")
    if c["clipped_ratio"] is not None:
        text += f", {c['clipped_ratio']:.0%} cut at the cap"
        if c["clipped_ratio"] >= MOSTLY_CAPPED:
            text += " — most hit it: max_completion_length sets the generation time"
    return text


def rollout_text(measured: dict, job: JobSpec | Resolved) -> str:
    r = measured.get("rollout") if measured else None
    if not r:
        return "rollout share unknown: " + no_rollout_share(job)
    return (f"rollout (vLLM awake) {r['share']:.0%} of each cycle: {seconds_text(r['awake_s'])} of "
            f"{seconds_text(r['cycle_s'])} (last {min(r['cycles'], RECENT_CYCLES)} of {r['cycles']} cycles, vLLM's sleep/wake "
            "lines)")


@dataclass(frozen=True)
class StepTimeSummary:
    """What Monitor, History and ``status`` say of a job's step time, as text ('—' where there is nothing)."""

    median: str           # measured s/step, the median (the first step apart)
    recent: str           # measured s/step, the latest cycles
    predicted: str        # s/step predicted at launch
    ratio: str            # measured / predicted
    eta: str | None       # when it should finish, while it is active
    lines: list[str]      # warm-up and start-up, the prediction or why there is none, totals, the rollout share,
                          # completions vs their cap: sentences


def summary(store: Store, job_id: str, job: JobSpec | Resolved) -> StepTimeSummary:
    """The job's step time as Monitor, History and ``status`` show it."""
    c = comparison(store, job_id)
    m, p = c.measured, c.predicted
    active = store.job(job_id).state.active
    lines = [c.no_pace] if c.no_pace else []
    if m and m["warmup_s"] is not None:
        lines.append(f"first step (warm-up: first rollout, compilation): {seconds_text(m['warmup_s'])} per step"
                     + (f"; launch to first step (loading, start-up): {seconds_text(m['startup_s'])}"
                        if m["startup_s"] is not None else "") + " — not in the median")
    if p:
        spread = f" (range {seconds_text(p.range[0])}–{seconds_text(p.range[1])})" if p.range else ""
        lines.append(f"predicted at launch: {seconds_text(p.step_s)} per step{spread}")
    else:
        lines.append(c.no_prediction)
    if c.measured_total_s is not None or c.predicted_total_s is not None:
        lines.append(f"training time: {seconds_text(c.measured_total_s)} measured"
                     + (" (so far, plus the ETA)" if active else "")
                     + (f", {seconds_text(c.predicted_total_s)} predicted" if c.predicted_total_s else ""))
    lines.append(rollout_text(m, job))
    if text := completions_text(m):
        lines.append(text)
    eta = None
    if m and m["finish_at"] is not None and active:
        left = max(m["finish_at"] - time.time(), 0.0)
        when = time.strftime("%H:%M" if left < 20 * 3600 else "%a %d %b %H:%M", time.localtime(m["finish_at"]))
        eta = f"{when} (in {seconds_text(left)})"
    return StepTimeSummary(seconds_text(m["median_s"]) if m else "—", seconds_text(m["recent_s"]) if m else "—",
                           seconds_text(p.step_s) if p else "—", f"{c.ratio:.2f}×" if c.ratio else "—", eta,
                           [line[0].upper() + line[1:] + "." for line in lines])


# calibration rows -----------------------------------------------------------------------------------------------

def _offload(eff: Resolved) -> str:
    r, parts = eff.spec.rollout, []
    if eff.colocate and r.offload_model:
        parts.append("offload_model")
    if eff.colocate and r.offload_optimizer:
        parts.append("offload_optimizer")
    return f"during rollout ({', '.join(parts)})" if parts else "none"


def _config(eff: Resolved, measured: dict) -> tuple[dict, list[str]]:
    """The row's config (the README's fields) and notes on what it could not say."""
    spec, notes = eff.spec, []
    t, r, s = spec.train, spec.rollout, spec.server
    try:
        zero = zero_config(t.deepspeed)
    except EngineConfigError as e:
        zero = None
        notes.append(f"zero_stage unknown ({e})")
    rollout_gpus = (sum(len(n.gpus) for n in spec.rollout_nodes()) if eff.server
                    else eff.spare_rollout_gpus * eff.nnodes or None)
    per_round = t.generation_batch_size or t.per_device_train_batch_size * eff.world_size * eff.steps_per_generation
    lengths = (measured.get("completions") or {}).get("mean_length")
    vllm = eff.vllm_mode != "none"
    mv = eff.megatron
    full = mv.full_tuning if mv else t.tuner_type == "full"
    config = {
        "model": t.model, "tuner": "full" if full else "lora",
        "lora_rank": None if full else t.lora_rank, "gpu": eff.trainer.model,
        "nodes": len(spec.cluster.nodes), "gpus_per_node": eff.trainer.per_node, "trainer_gpus": eff.world_size,
        "rollout_gpus": rollout_gpus, "vllm": vllm,
        "vllm_tp": (s.vllm_tensor_parallel_size if eff.server else r.vllm_tensor_parallel_size) if vllm else None,
        "vllm_gpu_memory_utilization": (s.vllm_gpu_memory_utilization if eff.server
                                        else r.vllm_gpu_memory_utilization) if vllm else None,
        "prompts_per_step": (mv.generation_batch if mv else per_round) // max(t.num_generations, 1),
        "num_generations": t.num_generations,
        "mean_prompt_tokens": None, "max_prompt_tokens": t.max_length, "max_completion_tokens": t.max_completion_length,
        "mean_completion_tokens": round(lengths) if lengths is not None else None,
        "optimizer_steps_per_generation": eff.rollout_steps, "num_iterations": t.num_iterations, "beta": eff.beta,
        "zero_stage": zero.stage if zero else None, "fsdp": bool(t.fsdp),
        "gradient_checkpointing": mv.recompute == "full" if mv else t.gradient_checkpointing,
        "offload": _offload(eff),
        "async_generation": bool(vllm and r.async_generate),
        "sequence_parallel": t.sequence_parallel_size if t.sequence_parallel_size > 1 else None,
        "extra": {"vllm_mode": eff.vllm_mode, "sleep_level": r.sleep_level if eff.colocate else None,
                  "per_device_train_batch_size": t.per_device_train_batch_size,
                  "gradient_accumulation_steps": eff.grad_accum, "steps_per_generation": eff.steps_per_generation,
                  "torch_dtype": t.torch_dtype, "deepspeed": t.deepspeed, "logging_steps": t.logging_steps},
    }
    if mv:  # what bench/megatron_calibration.time_row_layout reads back: the row is predicted as a Megatron job
        config["extra"].update({
            "training_backend": "megatron", "tp": mv.tp, "pp": mv.pp, "cp": mv.cp, "ep": mv.ep,
            "megatron_sequence_parallel": mv.sequence_parallel, "micro_batch_size": mv.micro_batch,
            "global_batch_size": mv.global_batch, "deepspeed": None, "per_device_train_batch_size": None})
    return config, notes


def split_of(source: str) -> str:
    """The README's frozen rule on the source key (the text before ' — '; an export's source is no URL)."""
    key = source.split(" — ")[0]
    return "held_out" if hashlib.sha256(key.encode("utf-8")).hexdigest()[0] in HELD_OUT_DIGITS else "fit"


def time_row(store: Store, job_id: str) -> tuple[dict | None, str | None]:
    """(a calibration row of the job's measured step time, None) or (None, why it has none)."""
    job = store.job(job_id)
    if not job:
        return None, "no such job"
    eff = job_spec(job)
    spec = eff.spec
    measured = record_pace(store, job_id, eff)
    if why := no_pace(measured):
        return None, why
    if not eff.trainer.model:
        return None, "no GPU model in its cluster settings (a step time says little without the GPU)"
    config, notes = _config(eff, measured)
    hosts = ", ".join(n.host for n in spec.cluster.nodes)
    launched = time.strftime("%Y-%m-%d", time.localtime(job.started or job.created))
    source = f"grpo-ui job {job_id} on {hosts}, launched {launched} — exported from its store"
    done = job.state == JobState.SUCCEEDED and measured["step"] == measured["total"]
    train_h = measured["train_s"] / 3600
    gpus = eff.world_size + (config["rollout_gpus"] or 0)
    estimate = store.time_estimate(job_id)
    predicted = no_prediction(estimate) or (f"prediction at launch: {estimate.step_s:.4g} s/step"
                                             + (f" (range {estimate.range[0]:.4g}–{estimate.range[1]:.4g})"
                                                if estimate.range else ""))
    phases = {}
    if measured["rollout"]:
        phases["vllm_awake"] = round(measured["rollout"]["awake_s"] / eff.rollout_steps, 3)
    step_time = store.metrics(job_id, ("step_time",)).get("step_time", [])
    if len(step_time) > 1:  # TRL's timer around the training step (rollout, reward, forward/backward), warm-up left out
        phases["step_time"] = round(statistics.median(v for _, v in step_time[1:]), 3)
    row = {
        "id": f"grpoui-{job_id}-time", "source": source,
        "quote": (f"'{'iteration' if eff.megatron else 'global_step/max_steps'}': '{measured['step']}/"
                  f"{measured['total']}', 'train_speed(s/it)': "
                  f"{measured['train_s'] / (measured['step'] - measured['start_step']):.6g} (the logging rank's last logged "
                  f"step; {measured['logged_intervals']} logged intervals after the first)"),
        "framework": "ms-swift", "framework_version": spec.swift_version, "algorithm": "grpo", "config": config,
        "measured": {"step_s": round(measured["median_s"], 4), "per": "optimizer_step", "phases_s": phases,
                     "total_h": round(train_h, 4) if done else None,
                     "total_steps": measured["step"] - measured["start_step"] if done else None,
                     "gpu_hours": round(train_h * gpus, 4) if done else None},
        "measures": (f"median wall seconds per optimizer step over the rollout rounds after the first logged step "
                     f"(ms-swift's clock: train_speed(s/it) × steps, per logged interval of {spec.train.logging_steps} "
                     f"step(s)); the first step (warm-up) left out: {seconds_text(measured['warmup_s'])}"
                     + ("; total_h: ms-swift's clock at the last step (training only, no model loading)" if done
                        else f"; the job was {job.state} at step {measured['step']} of {measured['total']}, "
                        "so no run totals")),
        "notes": "; ".join([predicted, *notes, "GPU model as the job's cluster settings name it"]) + ".",
        "added": EXPORTED, "split": split_of(source)}
    return row, None


def export_rows(store: Store, job_ids: list[str]) -> tuple[list[dict], dict[str, str]]:
    """Time calibration rows of the jobs, and job id → why a job gave none."""
    rows, skipped = [], {}
    for job_id in job_ids:
        row, why = time_row(store, job_id)
        if row:
            rows.append(row)
        else:
            skipped[job_id] = why
    return rows, skipped
