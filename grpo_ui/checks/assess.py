"""The one assessment of a job: everything grpo-ui says about it before anything runs, computed once per spec.

``assess(spec)`` resolves the job's effective values, builds its swift command lines, runs ms-swift's rules and the
field advisories, estimates per-GPU memory and — only for a job that is out of memory or tight — searches the
make-it-fit changes, predicts the time per step and — only for a job without errors — searches the changes that make
it faster, once each. Configure, the launch plan and the CLI's validate/estimate/render read the same ``Assessment``;
none of them validates or estimates again.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from grpo_ui.checks import rules
from grpo_ui.checks.faster import MIN_SAVING, Faster, faster
from grpo_ui.checks.fit import Suggestion, suggest
from grpo_ui.checks.rules.seeds import reference_model, vllm_share
from grpo_ui.checks.slurm import slurm_findings
from grpo_ui.core.findings import Finding, finding, has_errors, unique
from grpo_ui.knowledge.catalog import ModelArch, UnknownGpu
from grpo_ui.knowledge.engines import EngineConfigError
from grpo_ui.memory.estimate import estimate_spec
from grpo_ui.memory.report import ESTIMATE_MARGIN, MemoryReport, UnknownModel
from grpo_ui.spec.model import JobSpec
from grpo_ui.spec.resolve import Resolved, resolve
from grpo_ui.spec.swift_cli import Command, rollout_command, train_command
from grpo_ui.timing.predict import predict_spec
from grpo_ui.timing.report import TimeReport


@dataclass(frozen=True)
class Assessment:
    """A job's effective values, command lines, findings, memory report, make-it-fit suggestions, its time per step
and the changes that make it faster."""

    resolved: Resolved
    train: Command                   # swift rlhf for the target version (its own findings included below)
    rollout: Command | None          # swift rollout, in server mode with rollout nodes in the cluster
    findings: list[Finding]          # rules, command lines, memory and Slurm, one per (id, fields), in rule order
    memory: MemoryReport | None      # None when no estimate can be made (memory_error says why)
    memory_error: str | None = None
    suggestions: list[Suggestion] = field(default_factory=list)  # make-it-fit: only for an OOM or tight job
    time: TimeReport | None = None   # None when no step time can be predicted (time_error says why)
    time_error: str | None = None
    faster: list[Faster] = field(default_factory=list)  # make-it-faster: changes that still pass, fastest first
    faster_none: str | None = None   # why there are no make-it-faster changes (None: there are, or no step time)

    @property
    def spec(self) -> JobSpec:
        return self.resolved.spec

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == "error"]

    @property
    def blocked(self) -> bool:
        """Errors hold the downloads and the launch (unless overridden with a reason)."""
        return has_errors(self.findings)

    def held(self, override: str | None) -> bool:
        """Whether the downloads and the launch are held: errors hold them unless an override gives a reason."""
        return self.blocked and not (override or "").strip()

    @property
    def verdict(self) -> str | None:
        """The memory verdict (fits, tight, oom, unknown), or None without an estimate."""
        return self.memory.verdict if self.memory else None


def assess(job: JobSpec | Resolved, arch: ModelArch | None = None) -> Assessment:
    """The job's assessment (its spec or Resolved values; ``arch``: the policy's architecture from a config.json the
    user or a node supplied)."""
    eff = resolve(job, arch)
    train = train_command(eff)
    rollout = rollout_command(eff) if eff.server and eff.rollout.nodes else None
    checked = rules.validate(eff) + train.findings + (rollout.findings if rollout else [])
    memory, memory_error, memory_found = _memory(eff)
    suggestions = suggest(eff, base=memory, errors=[f for f in checked if f.severity == "error"]) \
        if memory and memory.verdict in ("oom", "tight") else []
    found = (checked + vllm_share(eff, memory) + reference_model(eff, memory) + memory_found
             + _verdict_findings(memory, suggestions, eff) + slurm_findings(eff.spec))
    time, time_error = _time(eff)
    quicker, none = _faster(eff, time, found)
    return Assessment(eff, train, rollout, unique(found), memory, memory_error, suggestions, time, time_error,
                      quicker, none)


def _faster(eff: Resolved, time: TimeReport | None, found: list[Finding]) -> tuple[list[Faster], str | None]:
    """The make-it-faster changes, or why there are none. A job with an error is not searched: each change must
    leave a job that passes, and this one does not yet."""
    if time is None:
        return [], None  # the time panel says why there is no step time
    errors = sorted({f.id for f in found if f.severity == "error"})
    if errors:
        return [], (f"Make it faster is searched once the job passes: each change it offers must leave a job that "
                    f"passes ms-swift's rules and fits, and {', '.join(errors)} {'is' if len(errors) == 1 else 'are'} "
                    "open.")
    quicker = faster(eff, time)
    return quicker, None if quicker else (f"Make it faster: no single change shortens the step by "
                                          f"{MIN_SAVING:.0%} or more and still passes ms-swift's rules and fits.")


def _time(eff: Resolved) -> tuple[TimeReport | None, str | None]:
    """The step-time prediction, or why there is none (no GPU speed facts, an unknown model or GPU)."""
    try:
        return predict_spec(eff), None
    except ValueError as e:
        return None, str(e)


def _memory(eff: Resolved) -> tuple[MemoryReport | None, str | None, list[Finding]]:
    """The memory report, or why there is none (as a finding on the field to fix); a vLLM that cannot start is an
    error."""
    if not eff.spec.train.model:
        return None, "no model chosen", []
    try:
        report = estimate_spec(eff)
    except (UnknownModel, UnknownGpu, EngineConfigError) as e:
        return None, str(e), [estimate_error_finding(eff.spec, e)]
    share = report.trainer.vllm  # a colocated vLLM
    why = share.cannot_start() if share else None
    return report, None, [finding("MEMORY-VLLM-START", "error", "rollout.vllm_gpu_memory_utilization", why,
                                  "Raise vllm_gpu_memory_utilization (or use a larger GPU, or tensor parallelism for "
                                  "vLLM).")] if why else []


def estimate_error_finding(spec: JobSpec, e: ValueError) -> Finding:
    """Why the estimate cannot be made, as a finding on the field to fix (the message starts with its path)."""
    if isinstance(e, UnknownGpu):
        k = next((n for n, node in enumerate(spec.cluster.nodes) if node.gpu_model == e.name), 0)
        path = f"cluster.nodes[{k}].gpu_model"
        return finding("MEMORY-UNKNOWN-GPU", "error", path, str(e),
                       f"Pick the name nvidia-smi prints{f' (closest: {e.closest[0]})' if e.closest else ''}, or set "
                       f"cluster.nodes[{k}].gpu_memory_gib.", {path: e.closest[0]} if e.closest else {})
    path = str(e).split(":", 1)[0]
    if isinstance(e, EngineConfigError):
        return finding("MEMORY-ENGINE-CONFIG", "warning", path, str(e),
                       "Use a preset (zero0…zero3_offload, fsdp2), inline JSON, or a readable JSON file.")
    return finding("MEMORY-UNKNOWN-MODEL", "info", path, str(e),
                   "Choose a catalogue model name or import the model's config.json on the Configure page.")


# The fields a memory verdict sits beside: the engine's batch and sharding levers and vLLM's share
MEMORY_FIELDS = ("train.per_device_train_batch_size", "rollout.vllm_gpu_memory_utilization", "train.deepspeed")
MEGATRON_MEMORY_FIELDS = ("train.micro_batch_size", "rollout.vllm_gpu_memory_utilization",
                          "train.tensor_model_parallel_size", "train.recompute_granularity")


def _verdict_findings(report: MemoryReport | None, advice: list[Suggestion], eff: Resolved) -> list[Finding]:
    """A predicted OOM (with the cheapest fix that fits) as an error (it blocks export and launch unless
    overridden); a tight fit (within the card, not with the estimate's error margin) as a warning with the cheapest
    change that leaves the margin."""
    if report is None or report.verdict not in ("oom", "tight"):
        return []
    role = next(r for r in report.roles if r.verdict == report.verdict)
    fits = next((s for s in advice if s.verdict == "fits"), None)
    if advice and advice[0].verdict == "tight":  # out of OOM, not yet with the margin: said as what it leads to
        fix = (f"Cheapest change out of OOM: {advice[0].why} (it leads to TIGHT: within the card, not with the "
               "estimate's error margin)" + (f"; the cheapest that fits: {fits.why}." if fits else "."))
    else:
        fix = (f"Cheapest change that fits: {advice[0].why}." if advice else
               "No single or paired knob fits: use more or larger GPUs, or a smaller model.")
    fields = MEGATRON_MEMORY_FIELDS if eff.megatron else MEMORY_FIELDS
    apply = advice[0].changes if advice else {}
    where = f"on the {role.role} GPU: peak {role.peak_gib:.1f} GiB in the {role.peak_phase} phase"
    card = f"{role.capacity_gib:.1f} GiB {role.gpu or 'GPU'}"
    if report.verdict == "tight":
        return [finding("MEMORY-TIGHT", "warning", fields,
                        f"Tight {where} of a {card}: {role.margin_peak_gib:.1f} GiB with the estimate's measured error "
                        f"margin (+{ESTIMATE_MARGIN:.0%} of what it models: 9 in 10 of the published runs it was set "
                        "on measured within it, fewer of those collected since).", fix, apply)]
    return [finding("MEMORY-OOM", "error", fields, f"Predicted out of memory {where} on a {card}.", fix, apply)]
