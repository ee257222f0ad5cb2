"""The doctor: turns metrics, log lines, GPU samples and node states into alerts, each with a plain explanation,
the evidence (numbers, log lines) and a fix."""

from __future__ import annotations

import itertools
import re
import statistics
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Alert:
    id: str
    severity: str  # error / warning / info
    title: str
    explanation: str
    evidence: str
    fix: str


@dataclass
class Snapshot:
    """What the doctor looks at for one job."""

    metrics: dict[str, list[tuple[int, float]]] = field(default_factory=dict)  # key → [(step, value)]
    logs: dict[str, list[str]] = field(default_factory=dict)                   # node label → recent lines
    beta: float = 0.04
    now: float = 0.0
    last_step_at: float | None = None       # when the latest step was logged
    first_step_at: float | None = None      # when the first step was logged
    last_output_at: dict[str, float] = field(default_factory=dict)  # node label → last new log line
    started_at: float | None = None
    gpu: list[dict] = field(default_factory=list)  # samples: host, gpu_index, ts, util, mem_used, power, power_limit
    job_state: str = "running"
    job_error: str | None = None
    server_mode: bool = False
    settings: dict = field(default_factory=dict)  # the job's rollout/offload/data settings, for the fixes


RULES = []


def rule(fn):
    RULES.append(fn)
    return fn


def diagnose(s: Snapshot) -> list[Alert]:
    return [a for r in RULES for a in r(s)]


def _last(s: Snapshot, key: str, n: int) -> list[float]:
    return [v for _, v in s.metrics.get(key, [])[-n:]]


WINDOW = 3  # consecutive logged steps a stuck value must persist


@rule
def no_learning_signal(s):
    std, frac = _last(s, "reward_std", WINDOW), _last(s, "frac_reward_zero_std", WINDOW)
    if (len(std) == WINDOW and max(std) == 0) or (len(frac) == WINDOW and min(frac) >= 0.99):
        yield Alert("NO-LEARNING-SIGNAL", "error", "No learning signal: every group has the same reward",
                    "GRPO learns from reward differences inside each group of completions. With reward_std 0 (or "
                    "frac_reward_zero_std ≈ 1) every advantage is 0, so the policy gets no gradient.",
                    f"last {WINDOW} logged steps: reward_std {std}, frac_reward_zero_std {frac}, reward "
                    f"{_last(s, 'reward', WINDOW)}",
                    "Check the reward function on a few completions (completions.jsonl with log_completions), make "
                    "the task easier or the reward denser, raise temperature or num_generations; dynamic_sample "
                    "resamples zero-spread groups.")


@rule
def kl_stuck_at_zero(s):
    kl = _last(s, "kl", WINDOW)
    if s.beta > 0 and len(kl) == WINDOW and max(abs(v) for v in kl) == 0:
        yield Alert("KL-STUCK-ZERO", "warning", "KL stays exactly 0: the policy is not moving",
                    f"With beta {s.beta} the KL to the reference grows as soon as parameters change. Exactly 0 over "
                    "several steps means they are not being updated (field report 001: ZeRO-3 with batch 1 and "
                    "gradient accumulation), or there is no learning signal.",
                    f"kl over the last {WINDOW} steps: {kl}; grad_norm {_last(s, 'grad_norm', WINDOW)}",
                    "If reward_std is also 0 fix the reward first; otherwise try ZeRO-2, or a larger per-device "
                    "batch with less accumulation, and check the learning rate.")


@rule
def grad_norm_zero(s):
    g = _last(s, "grad_norm", WINDOW)
    if len(g) == WINDOW and max(g) == 0:
        yield Alert("GRAD-NORM-ZERO", "warning", "Gradient norm is 0",
                    "No parameter received a gradient in the last steps.", f"grad_norm {g}",
                    "Usually zero advantages (see reward_std) or frozen parameters: check tuner_type / "
                    "target_modules and the reward.")


@rule
def completions_clipped(s):
    c = _last(s, "completions/clipped_ratio", WINDOW)
    if len(c) == WINDOW and min(c) >= 0.95:
        yield Alert("COMPLETIONS-CLIPPED", "warning", "Completions hit max_completion_length",
                    "Nearly every completion is cut off, so answers are incomplete and length rewards mislead.",
                    f"completions/clipped_ratio {c}, mean length {_last(s, 'completions/mean_length', WINDOW)}",
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


LOG_SIGNS = [
    ("OOM", "error", re.compile(r"CUDA out of memory|OutOfMemoryError|No available memory for the cache blocks"),
     "Out of GPU memory", "A rank ran out of GPU memory.",
     "Open the memory estimate on the Configure page and apply one of its make-it-fit changes (lower "
     "vllm_gpu_memory_utilization, sleep_level 1, ZeRO-3, smaller micro-batch)."),
    ("NCCL-TIMEOUT", "error", re.compile(r"Watchdog caught collective operation timeout|NCCL.*[Tt]imeout|"
                                         r"socket has timed out|ProcessGroupNCCL.*timed out"),
     "NCCL collective timed out", "A collective operation waited longer than its timeout: some rank stopped "
     "participating (hang, crash, or network).",
     "Find the node that went quiet first; check that every node runs identical arguments, ports are open between "
     "nodes (and to rollout servers on 51216+i), and raise ddp_timeout for long rollouts."),
    ("ROLLOUT-UNREACHABLE", "error", re.compile(r"Servers not reachable|did not answer /health/|"
                                                r"Failed to connect to vLLM server"),
     "Rollout server unreachable", "The trainer cannot reach a swift rollout server.",
     "Check the rollout node's log and that its HTTP port and group port (51216+i) are reachable from trainer "
     "rank 0; unset http_proxy/https_proxy."),
    ("TRACEBACK", "error", re.compile(r"Traceback \(most recent call last\)"), "A rank crashed with a traceback",
     "A Python exception ended a process.", "Read the traceback below; the first node that printed one is named."),
]


TB_START = "Traceback (most recent call last):"
TB_CHAIN = ("During handling of the above exception", "The above exception was the direct cause")
RANK_PREFIX = re.compile(r"^\[(?:rank|default)(\d+)\]:\s?")  # torchrun's per-rank line prefix
ROOT_CAUSE_RANK = re.compile(r"^\s*rank\s*:\s*(\d+)\s*\(local_rank")  # torchrun's failure summary
MAX_TB_LINES = 60


def traceback_at(lines: list[str], i: int) -> tuple[list[str], str | None]:
    """The traceback that starts at ``lines[i]``, through its exception line (chained exceptions followed), and
    the rank that printed it when torchrun prefixed its lines; other ranks' interleaved lines are left out."""
    m = RANK_PREFIX.match(lines[i])
    prefix, rank = (m[0], m[1]) if m else ("", None)
    out = [prefix + lines[i][lines[i].index(TB_START):]]  # without a tqdm bar glued in front
    own = [line[len(prefix):] for line in lines[i + 1:] if line.startswith(prefix)]
    for k, body in enumerate(own):
        out.append(prefix + body)
        if not body.strip() or body[0] in " \t" or body.startswith((TB_START, *TB_CHAIN)):
            continue  # a frame, its code and carets, or the hand-over to a chained exception
        after = next((b for b in own[k + 1:] if b.strip()), "")
        if not after.startswith(TB_CHAIN):
            break  # the exception line
    return _bounded(out), rank


def _bounded(lines: list[str]) -> list[str]:
    """At most MAX_TB_LINES: the head (where it started) and the tail (the exception)."""
    if len(lines) <= MAX_TB_LINES:
        return lines
    head, tail = MAX_TB_LINES // 3, MAX_TB_LINES - MAX_TB_LINES // 3 - 1
    return lines[:head] + [f"… {len(lines) - head - tail} lines left out …"] + lines[-tail:]


def _failed_rank(lines: list[str]) -> str | None:
    return next((m[1] for line in lines if (m := ROOT_CAUSE_RANK.match(line))), None)


@rule
def log_signatures(s):
    for aid, sev, rx, title, expl, fix in LOG_SIGNS:
        hits = [(node, i, line) for node, lines in s.logs.items() for i, line in enumerate(lines) if rx.search(line)]
        if hits:
            node, i, line = hits[0]
            where = node
            context = [line]
            if aid == "TRACEBACK":
                context, rank = traceback_at(s.logs[node], i)
                rank = rank or _failed_rank(s.logs[node])
                where += f", rank {rank}" if rank else ""
            nodes = sorted({h[0] for h in hits})
            yield Alert(aid, sev, title, expl + f" Seen on {', '.join(nodes)}; first on {where}.",
                        "\n".join(context), fix)


@rule
def node_failed(s):
    if s.job_state == "failed" and s.job_error:
        yield Alert("NODE-FAILED", "error", "A node exited with an error", "The job failed; the node that failed "
                    "first is named, with the end of its log, and the other nodes were stopped.",
                    s.job_error, "Fix the cause shown in its log, then relaunch from History.")


@rule
def hang(s):
    sps = _last(s, "seconds_per_step", 1)
    since = s.last_step_at or s.started_at
    if s.job_state != "running" or not since or not s.now:
        return
    limit = max(5 * (sps[0] if sps else 60.0), 600.0 if not sps else 120.0)
    quiet = s.now - since
    last_out = max(s.last_output_at.values()) if s.last_output_at else since
    if quiet > limit and s.now - last_out > limit:
        first_quiet = min(s.last_output_at, key=s.last_output_at.get) if s.last_output_at else "?"
        recent = [g for g in s.gpu if g["ts"] >= s.now - 120]
        sig = ""
        if recent:
            util = statistics.mean(g["util"] for g in recent)
            power = statistics.mean(g["power"] / g["power_limit"] for g in recent if g.get("power_limit"))
            if util < 5:
                sig = f" GPUs near 0% utilisation (mean {util:.0f}%) while holding memory."
            elif util > 90 and power < 0.35:
                sig = (f" GPUs at {util:.0f}% utilisation but {power:.0%} of their power limit: the NCCL spin of "
                       "ranks waiting in a collective.")
        yield Alert("HANG", "error", "The job looks hung",
                    f"No new step for {quiet / 60:.0f} min (≈{quiet / max(sps[0] if sps else 60, 1):.0f} × the "
                    f"recent time per step) and no log output.{sig} The node that went quiet first: {first_quiet}.",
                    f"seconds per step {sps}, last output per node: "
                    + ", ".join(f"{n}: {(s.now - t) / 60:.0f} min ago" for n, t in s.last_output_at.items()),
                    "Look at that node's last lines; common causes are a rank that crashed silently, a vLLM sleep/"
                    "wake that never returned, or mismatched node settings. Stop the job to free the GPUs.")


BUSY, IDLE = 40.0, 10.0   # utilisation %: a GPU turns busy at ≥ BUSY and idle below IDLE (hysteresis between)
DUTY_WINDOW_S = 300.0
MIN_SPAN_S = 120.0        # less evidence than this after start-up says nothing
MAX_GAP_S = 10.0          # a longer gap between samples (channel reconnecting) counts as this long


@dataclass
class Activity:
    """One GPU over the window: the share of time busy, how often it switched busy ↔ idle, its stretch lengths."""

    host: str
    gpu: int
    span: float
    duty: float
    switches: int
    busy_s: list[float]
    idle_s: list[float]


def activity(rows: list[dict], first_step_at: float | None, now: float) -> Activity | None:
    """Duty cycle of one GPU's samples (sorted by time) over the last DUTY_WINDOW_S. An idle stretch that opens the
    window and ends before any step was logged is start-up (loading the model) and left out. None when there is
    too little left to judge."""
    rows = [r for r in rows if r["ts"] >= now - DUTY_WINDOW_S and r.get("util") is not None]
    first_busy = next((k for k, r in enumerate(rows) if r["util"] >= BUSY), len(rows))
    started = first_step_at is not None and (first_busy == len(rows) or first_step_at < rows[first_busy]["ts"])
    if first_busy and not started:
        rows = rows[first_busy:]
    if len(rows) < 2 or rows[-1]["ts"] - rows[0]["ts"] < MIN_SPAN_S:
        return None
    stretches: list[list] = []  # [busy?, seconds]
    busy = rows[0]["util"] >= BUSY
    for a, b in itertools.pairwise(rows):
        busy = a["util"] >= BUSY or (busy and a["util"] >= IDLE)
        dt = min(b["ts"] - a["ts"], MAX_GAP_S)
        if stretches and stretches[-1][0] == busy:
            stretches[-1][1] += dt
        else:
            stretches.append([busy, dt])
    span = sum(t for _, t in stretches)
    return Activity(rows[0]["host"], rows[0]["gpu_index"], span, sum(t for b, t in stretches if b) / span,
                    len(stretches) - 1, [t for b, t in stretches if b], [t for b, t in stretches if not b])


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
    per_gpu: dict[tuple, list[dict]] = {}
    for g in sorted(s.gpu, key=lambda g: g["ts"]):
        per_gpu.setdefault((g["host"], g["gpu_index"]), []).append(g)
    found = [a for rows in per_gpu.values() if (a := activity(rows, s.first_step_at, s.now)) and _underused(a)]
    if not found:
        return
    found.sort(key=lambda a: a.duty)
    idle = [t for a in found for t in a.idle_s]
    lines = [f"{a.host} GPU {a.gpu}: busy {a.duty:.0%} of the last {a.span / 60:.0f} min, {a.switches} busy↔idle "
             f"switches; median busy stretch {_median(a.busy_s)}, idle stretch {_median(a.idle_s)}" for a in found[:8]]
    if len(found) > 8:
        lines.append(f"… and {len(found) - 8} more GPUs alike")
    oscillating = sum(a.switches >= 4 for a in found)
    yield Alert("GPU-UNDERUSED", "warning", "GPUs are idle much of the time"
                + (", alternating busy and idle" if oscillating else ""),
                f"{len(found)} of {len(per_gpu)} GPUs were busy (utilisation ≥ {BUSY:.0f} %) less than they could "
                "be: they wait on something else (rollout ↔ training hand-over, weight sync, host offload, data "
                "loading) for a large share of the last minutes (field report 002).",
                "\n".join(lines), _levers(s, idle))
