"""The doctor: turns metrics, log lines, stacks, GPU samples and node states into alerts, each with a plain
explanation, the evidence (numbers, log lines) and a fix. The live watcher calls ``diagnose``; the `doctor` command
and the Diagnose page call ``report`` (the same alerts, with the run's state and its first error); the rules on log
lines live in failures.py."""

from __future__ import annotations

import itertools
import math
import re
import statistics
from dataclasses import dataclass

from grpo_ui.core.findings import SEVERITY_ORDER
from grpo_ui.doctor import curves, failures  # noqa: F401 - failures registers the rules on log lines
from grpo_ui.doctor.gpu_window import BUSY, Activity
from grpo_ui.doctor.rootcause import Failure
from grpo_ui.doctor.signatures import REPORT
from grpo_ui.doctor.snapshot import RULES, Alert, Snapshot, last, overdue, rule
from grpo_ui.doctor.stacks import disagreement


def diagnose(s: Snapshot) -> list[Alert]:
    return [a for r in RULES for a in r(s)]


@dataclass
class Report:
    """What the doctor says of a set of logs: its alerts, the run's state, the first error and the last step."""

    alerts: list[Alert]
    state: str              # running / succeeded / failed / unknown (an excerpt that cannot tell)
    first: Failure | None   # the first error across the logs
    last_step: int | None

    @property
    def ordered(self) -> list[Alert]:
        """The alerts about the first error first, then errors, warnings, notes."""
        line = self.first.event.line.text.strip() if self.first and self.first.event else None

        def about_first(a: Alert) -> bool:
            return a.id == "NODE-FAILED" or bool(line) and a.evidence.startswith(line)
        return sorted(self.alerts, key=lambda a: (not about_first(a), SEVERITY_ORDER[a.severity]))

    @property
    def headline(self) -> str | None:
        """One line naming the first error: where, what, and the line that says so."""
        f = self.first
        if f is None:
            return None
        what = f.event.sig.title if f.event and f.event.sig.role != REPORT else "the process died"
        line = f.event.line.text if f.event else f.error.strip()
        return f"first error: {f.where}: {what}{f' ({f.exit})' if f.exit else ''} — {line[:300]}"


def report(s: Snapshot) -> Report:
    steps = [step for series in s.metrics.values() for step, _ in series]
    return Report(diagnose(s), s.job_state, s.first_failure, max(steps, default=None))


WINDOW = 3  # consecutive logged steps a stuck value must persist


def window(s: Snapshot, key: str) -> list[tuple[int, float]]:
    """The (step, value) pairs a stuck value must hold over: the last WINDOW logged, or every step an excerpt shows
    when it shows fewer (what a user pastes is all there is to judge)."""
    series = s.metrics.get(key, [])
    n = min(WINDOW, len(series)) if s.excerpt else WINDOW
    return series[-n:] if n and len(series) >= n else []


def quoted(s: Snapshot, steps, summary: str, mark: re.Pattern | None = None) -> str:
    """Evidence for metric findings: the log lines the steps were read from (of a row wrapped over several lines,
    the one ``mark`` finds, else its first), then the numbers."""
    lines = []
    for step in steps:
        rows = s.metric_lines.get(step, [])
        lines += [next((line for line in rows if mark and mark.search(line)), rows[0])] if rows else []
    return "\n".join([*dict.fromkeys(line.strip()[:2000] for line in lines), summary])


def values(pairs: list[tuple[int, float]]) -> list[float]:
    return [v for _, v in pairs]


@rule
def no_learning_signal(s):
    std, frac = window(s, "reward_std"), window(s, "frac_reward_zero_std")
    flat = std if std and max(values(std)) == 0 else frac if frac and min(values(frac)) >= 0.99 else None
    if flat:
        yield Alert("NO-LEARNING-SIGNAL", "error", "No learning signal: every group has the same reward",
                    "GRPO learns from reward differences inside each group of completions. With reward_std 0 (or "
                    "frac_reward_zero_std ≈ 1) every advantage is 0, so the policy gets no gradient.",
                    quoted(s, [k for k, _ in flat], f"last {len(flat)} logged step(s): reward_std {values(std)}, "
                           f"frac_reward_zero_std {values(frac)}, reward {values(window(s, 'reward'))}"),
                    "Check the reward function on a few completions (completions.jsonl with log_completions), make "
                    "the task easier or the reward denser, raise temperature or num_generations; dynamic_sample "
                    "resamples zero-spread groups.")


@rule
def kl_stuck_at_zero(s):
    kl = window(s, "kl")  # never one step alone: the first step's KL is 0 by construction (the policy is the
    if s.beta > 0 and len(kl) > 1 and max(abs(v) for v in values(kl)) == 0:  # reference until its first update)
        yield Alert("KL-STUCK-ZERO", "warning", "KL stays exactly 0: the policy is not moving",
                    f"With beta {s.beta} the KL to the reference grows as soon as parameters change. Exactly 0 over "
                    "several steps means they are not being updated (field report 001: ZeRO-3 with batch 1 and "
                    "gradient accumulation), or there is no learning signal.",
                    quoted(s, [k for k, _ in kl], f"kl over the last {len(kl)} step(s): {values(kl)}; grad_norm "
                           f"{values(window(s, 'grad_norm'))}"),
                    "If reward_std is also 0 fix the reward first; otherwise try ZeRO-2, or a larger per-device "
                    "batch with less accumulation, and check the learning rate.")


@rule
def grad_norm_zero(s):
    g = window(s, "grad_norm")
    if g and max(values(g)) == 0:
        yield Alert("GRAD-NORM-ZERO", "warning", "Gradient norm is 0",
                    "No parameter received a gradient in the last steps.",
                    quoted(s, [k for k, _ in g], f"grad_norm {values(g)}"),
                    "Usually zero advantages (see reward_std) or frozen parameters: check tuner_type / "
                    "target_modules and the reward.")


@rule
def completions_clipped(s):
    c = window(s, "completions/clipped_ratio")
    if c and min(values(c)) >= 0.95:
        reward = values(window(s, "reward"))
        zero = bool(reward) and max(abs(v) for v in reward) == 0
        yield Alert("COMPLETIONS-CLIPPED", "warning" if not zero else "error",
                    "Completions hit max_completion_length" + (", and every reward is 0" if zero else ""),
                    "Nearly every completion is cut off, so answers are incomplete and length rewards mislead."
                    + (" A cut-off answer earns no reward, so every advantage is 0 and nothing is learned." if zero
                       else ""),
                    quoted(s, [k for k, _ in c], f"completions/clipped_ratio {values(c)}, mean length "
                           f"{values(window(s, 'completions/mean_length'))}, reward {reward}"),
                    "Raise max_completion_length, add a length penalty (soft_overlong) or overlong_filter, or "
                    "prompt for shorter answers.")


@rule
def kl_blowup(s):
    kl = [v for _, v in s.metrics.get("kl", [])]
    if len(kl) >= 4:
        base = statistics.median(kl[:-1]) or 1e-9
        if kl[-1] > 1.0 and kl[-1] > 10 * base:
            yield Alert("KL-BLOWUP", "error", "KL is exploding",
                        "The policy is moving away from the reference much faster than before; training is "
                        "likely diverging.", f"kl now {kl[-1]:.4g}, median before {base:.4g}",
                        "Lower the learning rate, raise beta, check for reward hacking in completions.jsonl.")


# metrics that are garbage once NaN/inf (of every trainer's naming: loss, actor/grad_norm, critic/vf_loss, kl,
# reward, rewards/<name>/mean, logps/chosen, …); others (a mean length over no terminated completions) may be NaN
NAN_WATCHED = re.compile(r"(?:^|/)(?:\w*loss|grad_norm|kl(?:_loss)?|rewards?|reward_std|score|logps|entropy)(?:/|$)|"
                         r"^rewards/")
NAN_TEXT = re.compile(r"\b(?:nan|NaN|inf|Infinity)\b")
# metrics that are a term of the loss (GRPO's loss adds beta × KL in TRL, ms-swift and verl's kl_loss): NaN in one
# at a step whose loss is finite cannot have entered the loss. At every step shown (more than one: a single NaN may
# be that step's own) it says the trainer does not compute it under the run's settings (TRL and ms-swift log kl only
# when beta ≠ 0 — TRL's default beta is 0 since 0.19 — and a notebook's table shows the missing value as nan)
LOSS_TERMS = ("kl",)


def _not_computed(s: Snapshot, key: str) -> bool:
    """Whether a metric is one the trainer does not compute under the run's settings: a loss term the settings
    switch off (beta 0), or one that is NaN/inf beside a finite loss at every step shown (two or more)."""
    if key not in LOSS_TERMS:
        return False
    if s.beta == 0:
        return True
    loss, series = dict(s.metrics.get("loss", [])), s.metrics.get(key, [])
    return len(series) > 1 and all(not math.isfinite(v) and math.isfinite(loss.get(step, math.nan))
                                   for step, v in series)


def _not_finite_since(series: list[tuple[int, float]]) -> list[tuple[int, float]]:
    """Of a series non-finite in its last WINDOW steps: the step where that began (the onset, which tells which
    checkpoint is still finite) and the non-finite ones of the last WINDOW; [] when those are all finite."""
    bad = [k for k in range(max(0, len(series) - WINDOW), len(series)) if not math.isfinite(series[k][1])]
    if not bad:
        return []
    onset = bad[0]
    while onset and not math.isfinite(series[onset - 1][1]):
        onset -= 1
    return [series[k] for k in dict.fromkeys([onset, *bad])]


def _nan_lines(s: Snapshot) -> list:
    """The lines that tell of NaN/inf in some process (a crash on NaN probabilities, autograd's anomaly report),
    first first: by the time they carry, else in log order."""
    order = {node: k for k, node in enumerate(s.events)}
    found = [e for events in s.events.values() for e in events if e.sig.id == "NAN-METRICS"]
    return sorted(found, key=lambda e: (e.line.stamp is None, e.line.stamp or (), order[e.log], e.index))


def _first_seen(found: list) -> str:
    """Where NaN/inf showed first, and where after it."""
    places = list(dict.fromkeys(e.where for e in found))
    if not places:
        return ""
    return f" First seen on {places[0]}" + (f"; then on {', '.join(places[1:6])}." if places[1:] else ".")


@rule
def nan_metrics(s):
    """NaN or inf in a training metric, or a crash on non-finite model outputs (sampling from NaN probabilities);
    the evidence starts where the values stopped being finite, and the process (rank) that showed it first is
    named. A metric the run's settings do not compute is not a failure (_not_computed)."""
    bad = sorted(((k, step, v) for k, series in s.metrics.items() if NAN_WATCHED.search(k)
                  if not _not_computed(s, k) for step, v in _not_finite_since(series)),
                 key=lambda b: b[1])
    found = _nan_lines(s)
    if not bad and not found:
        return
    first = found[0] if found else None
    numbers = ", ".join(f"{k} {v} at step {step}" for k, step, v in bad[:8])
    evidence = (quoted(s, sorted({step for _, step, _ in bad}), numbers, NAN_TEXT) if bad else first.evidence())
    if bad and first:
        evidence += "\n… the first process to show it:\n" + first.line.text.strip()
    yield Alert("NAN-METRICS", "error", "NaN/inf in training" + (f", first on {first.where}" if first else ""),
                "Loss, gradients or rewards are no longer finite numbers: once they are, every later update is "
                f"garbage (and sampling from the model fails).{_first_seen(found)}",
                evidence, "Resume from the last finite checkpoint with a lower learning_rate (warmup_ratio helps), "
                "keep max_grad_norm on, use bf16 rather than fp16, and check that reward functions never return NaN "
                "or inf.", first.where if first else "")


def _falling(values: list[float], ratio: float) -> bool:
    """After one warm-up point: the last three points all below ``ratio`` × the best earlier one."""
    body = values[1:]
    return len(body) >= 5 and max(body[-3:]) < ratio * max(body[:-3])


@rule
def throughput_falling(s):
    tps = curves.rollout_throughput(s.metrics)
    lengths = [v for _, v in s.metrics.get("completions/mean_length", [])]
    if not _falling([v for _, v in tps], 0.5) or statistics.median(lengths[-3:]) < 0.7 * statistics.median(lengths):
        return  # (much shorter completions lower tokens per second by themselves: fixed costs per step weigh more)
    step_time = last(s, "step_time", 4)
    reward = sum(st.phase == "reward" for st in s.stacks)
    yield Alert("THROUGHPUT-FALLING", "warning", "Rollout throughput is falling",
                f"Completion tokens per second of step time fell from {max(v for _, v in tps[1:-3]):.3g} to "
                f"{tps[-1][1]:.3g} (per completion; completion lengths lately {lengths[-4:]}): each step takes longer for "
                f"the same work (step_time {step_time} s)."
                + (f" {reward} of {len(s.stacks)} stack samples were in the reward function." if reward else ""),
                "\n".join(f"step {k}: {v:.3g} tokens/s" for k, v in tps[-6:]),
                "Find what grows: a reward service slowing down (time its calls), a growing KV cache or prefix "
                "cache (vLLM), memory pressure forcing offload; compare with the GPU utilisation chart.")


def _climbing(values: list[float]) -> bool:
    """Rising over most of the last six points by more than 5 % in total: a leak rather than warm-up."""
    tail = values[-6:]
    if len(tail) < 6 or tail[0] <= 0:
        return False
    rises = sum(b > a for a, b in itertools.pairwise(tail))
    return rises >= 4 and tail[-1] > 1.05 * tail[0]


@rule
def memory_climbing(s):
    """GPU memory that keeps rising step after step: ms-swift's memory(GiB) (the peak reserved so far on rank 0)
    past the first steps, or the per-step peak of any GPU from its samples."""
    series = {"memory(GiB) (rank 0, peak reserved)": [v for _, v in s.metrics.get("memory(GiB)", [])][2:]}
    series.update({f"{k} (MiB, peak per step)": [v for _, v in v_] for k, v_ in s.gpu_by_step.items()})
    found = {k: v for k, v in series.items() if _climbing(v)}
    if not found:
        return
    lengths = last(s, "completions/max_length", 6)
    yield Alert("MEMORY-CLIMBING", "warning", "GPU memory keeps climbing", "Memory rises step after step instead "
                "of levelling off after the first steps: a leak (tensors kept across steps, a growing cache) that "
                "ends in an out-of-memory error, unless completions are getting longer (max length now "
                f"{lengths}).", "\n".join(f"{k}: {[round(v, 2) for v in vals[-6:]]}" for k, vals in found.items()),
                "Check what is kept between steps (log_completions buffers, reward caches, vLLM prefix cache with "
                "sleep_level 0); PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True reduces fragmentation; "
                "gc_collect_after_offload frees memory between the phases.")


@rule
def reward_latency(s):
    """Stack samples of the ranks mostly inside the reward functions: reward scoring dominates the step."""
    if len(s.stacks) < 2:
        return
    inside = [st for st in s.stacks if st.phase == "reward"]
    if len(inside) * 2 <= len(s.stacks):
        return
    frames = {fn for st in inside for fn, path in st.frames[:1]}
    yield Alert("REWARD-LATENCY", "warning", "Reward scoring dominates the step time",
                f"{len(inside)} of {len(s.stacks)} stack samples of the ranks were inside the reward functions "
                f"(innermost: {', '.join(sorted(frames))}): the GPUs wait while rewards are computed (step_time "
                f"{last(s, 'step_time', 3)} s).", "\n".join(f"{st.label}: {st.summary}" for st in s.stacks[:8]),
                "Make the reward cheaper or asynchronous: batch the calls to a reward service, use an AsyncORM "
                "reward (ms-swift runs async rewards concurrently), cache repeated verifications, or move a reward "
                "model to its own GPU.")


def _gpu_signature(s: Snapshot) -> str:
    recent = s.gpus.recent(s.now, 120)
    if not recent:
        return ""
    util = statistics.mean(g["util"] for g in recent)
    power = statistics.mean(g["power"] / g["power_limit"] for g in recent if g.get("power_limit"))
    if util < 5:
        return f" GPUs near 0% utilisation (mean {util:.0f}%) while holding memory."
    if util > 90 and power < 0.35:
        return (f" GPUs at {util:.0f}% utilisation but {power:.0%} of their power limit: the NCCL spin of ranks "
                "waiting in a collective.")
    return ""


@rule
def hang(s):
    late = overdue(s)
    if not late:
        return
    quiet, allowed = late
    pace = f"{step[0]:.3g} s" if (step := last(s, "seconds_per_step", 1)) else "not logged yet"
    first_quiet = min(s.last_output_at, key=s.last_output_at.get) if s.last_output_at else "?"
    phases = "\n".join(f"{st.label}: {st.summary}" for st in s.stacks)
    split = disagreement(s.stacks)
    where = (f" Stacks: {split}." if split else f" Every rank is in {s.stacks[0].summary}." if s.stacks else
             " Stacks of every rank are collected on the Monitor page (py-spy) when the job runs under grpo-ui.")
    yield Alert("HANG", "error", "The job looks hung",
                f"No sign of progress (no output, no tqdm update, no step) for {quiet / 60:.0f} min; a healthy run "
                f"of this pace stays silent at most {allowed / 60:.0f} min (time per step {pace}, logging_steps "
                f"{s.logging_steps}).{_gpu_signature(s)} "
                f"The node that went quiet first: {first_quiet}.{where}",
                (phases + "\n" if phases else "") + "last output per node: "
                + ", ".join(f"{n}: {(s.now - t) / 60:.0f} min ago" for n, t in s.last_output_at.items()),
                "Look at the ranks that disagree (or that node's last lines); common causes are a rank that crashed "
                "silently, a weight sync or vLLM sleep/wake that never returned, or mismatched node settings. Stop "
                "the job to free the GPUs.", first_quiet if first_quiet != "?" else "")


def _underused(a: Activity) -> bool:
    return a.duty < 0.6 or (a.switches >= 4 and a.duty < 0.85)


def _median(values: list[float]) -> str:
    return f"{statistics.median(values):.0f} s" if values else "—"


def _levers(s: Snapshot, idle: list[float]) -> str:
    """The settings that trade GPU time for memory or overlap, with the job's current values."""
    cfg = s.settings
    out = []
    if idle and statistics.median(idle) < 10:
        out.append(f"Short, frequent gaps point at input: raise dataloader_num_workers (now "
                   f"{cfg.get('dataloader_num_workers')}).")
    if s.server_mode:
        out.append(f"Server mode: async_generate true (now {cfg.get('async_generate')}) trains on one batch while "
                   "the rollout servers generate the next; if the trainers wait on generation, add rollout GPUs or "
                   "vllm_data_parallel_size.")
    else:
        out.append(f"Colocate mode: the same GPUs generate, then train. sleep_level {cfg.get('sleep_level')}, "
                   f"offload_model {cfg.get('offload_model')} and offload_optimizer {cfg.get('offload_optimizer')} "
                   "free memory between the phases at the price of a wake-up and host↔GPU copies on every step: "
                   "turn them off where the memory estimate allows. A higher vllm_gpu_memory_utilization (now "
                   f"{cfg.get('vllm_gpu_memory_utilization')}) gives larger, faster generation batches; "
                   f"steps_per_generation > 1 (now {cfg.get('steps_per_generation')}) reuses one rollout for several "
                   "optimiser steps; server mode with async_generate overlaps generation and training on separate "
                   "GPUs.")
    if cfg.get("deepspeed") and "offload" in str(cfg["deepspeed"]):
        out.append(f"deepspeed {cfg['deepspeed']} streams weights or optimizer states over PCIe: plain zero3 if it "
                   "fits.")
    return " ".join(out)


@rule
def gpu_duty_cycle(s):
    if s.job_state != "running" or not s.now:
        return
    judged, sampled = s.gpus.activities(s.first_step_at, s.now)
    found = [a for a in judged if _underused(a)]
    if not found:
        return
    found.sort(key=lambda a: (a.duty, a.host, a.gpu))
    idle = [t for a in found for t in a.idle_s]
    lines = [f"{a.host} GPU {a.gpu}: busy {a.duty:.0%} of the last {a.span / 60:.0f} min, {a.switches} busy↔idle "
             f"switches; median busy stretch {_median(a.busy_s)}, idle stretch {_median(a.idle_s)}" for a in found[:8]]
    if len(found) > 8:
        lines.append(f"… and {len(found) - 8} more GPUs alike")
    oscillating = sum(a.switches >= 4 for a in found)
    yield Alert("GPU-UNDERUSED", "warning", "GPUs are idle much of the time"
                + (", alternating busy and idle" if oscillating else ""),
                f"{len(found)} of {sampled} GPUs were busy (utilisation ≥ {BUSY:.0f} %) less than they could "
                "be: they wait on something else (rollout ↔ training hand-over, weight sync, host offload, data "
                "loading) for a large share of the last minutes (field report 002).",
                "\n".join(lines), _levers(s, idle))
