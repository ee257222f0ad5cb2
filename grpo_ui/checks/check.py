"""All findings for a spec before anything runs: ms-swift's rules, field advisories, the target dialect, memory and
the backend's own."""

from __future__ import annotations

from grpo_ui.checks import rules
from grpo_ui.checks.fit import suggest
from grpo_ui.checks.slurm import slurm_findings
from grpo_ui.core.findings import Finding, finding
from grpo_ui.knowledge.catalog import UnknownGpu
from grpo_ui.knowledge.engines import EngineConfigError
from grpo_ui.memory.estimate import estimate_spec
from grpo_ui.memory.report import ESTIMATE_MARGIN, UnknownModel
from grpo_ui.spec.model import JobSpec
from grpo_ui.spec.resolve import Resolved, resolve
from grpo_ui.spec.swift_cli import rollout_command, train_command


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


def memory_findings(eff: Resolved) -> list[Finding]:
    """A predicted OOM (with the cheapest fix that fits) or a vLLM that cannot start, as errors (they block export
    and launch unless overridden); a tight fit (within the card, not with the estimate's error margin) as a warning
    with the cheapest change that leaves the margin; or why no estimate can be made."""
    if not eff.spec.train.model:
        return []
    try:
        report = estimate_spec(eff)
    except (UnknownModel, UnknownGpu, EngineConfigError) as e:
        return [estimate_error_finding(eff.spec, e)]
    role = next(r for r in report.roles if r.verdict == report.verdict)
    cannot_start = [n for r in report.roles for n in r.notes if n.startswith("vLLM cannot start")]
    found = [finding("MEMORY-VLLM-START", "error", "rollout.vllm_gpu_memory_utilization", cannot_start[0],
                     "Raise vllm_gpu_memory_utilization (or use a larger GPU, or tensor parallelism for vLLM).")
             ] if cannot_start else []
    if report.verdict not in ("oom", "tight"):
        return found
    advice = suggest(eff)
    fix = (f"Cheapest change that fits: {advice[0].why}." if advice else
           "No single or paired knob fits: use more or larger GPUs, or a smaller model.")
    fields = ("train.per_device_train_batch_size", "rollout.vllm_gpu_memory_utilization", "train.deepspeed")
    apply = advice[0].changes if advice else {}
    where = f"on the {role.role} GPU: peak {role.peak_gib:.1f} GiB in the {role.peak_phase} phase"
    card = f"{role.capacity_gib:.1f} GiB {role.gpu or 'GPU'}"
    if report.verdict == "tight":
        return found + [finding("MEMORY-TIGHT", "warning", fields,
                                f"Tight {where} of a {card}: {role.margin_peak_gib:.1f} GiB with the estimate's "
                                f"measured error margin (+{ESTIMATE_MARGIN:.0%} of what it models; 1 in 10 published "
                                "runs measured more than that).", fix, apply)]
    return found + [finding("MEMORY-OOM", "error", fields, f"Predicted out of memory {where} on a {card}.", fix,
                            apply)]


def check(job: JobSpec | Resolved, arch=None) -> list[Finding]:
    """rules.validate + what the argv rendering reports + the memory verdict + Slurm's, without duplicates, for a
    job (its spec or Resolved values; ``arch``: a config.json the user supplied)."""
    eff = resolve(job, arch)
    found = rules.validate(eff) + train_command(eff).findings
    if eff.server and eff.rollout.nodes:
        found += rollout_command(eff).findings
    found += memory_findings(eff) + slurm_findings(eff.spec)
    seen, out = set(), []
    for f in found:
        key = (f.id, f.fields)
        if key not in seen:
            seen.add(key)
            out.append(f)
    return out
