"""The job spec side of the door: a spec read, changed, written and imported; its form (generated from the field
declarations); its one assessment (findings, memory, step time, make-it-fit and make-it-faster) and where the form
shows each finding; the scripts rendered from it; the catalogue of models and GPUs, and the hub for the rest."""

from __future__ import annotations

from dataclasses import dataclass, field

from grpo_ui.backends.ray import scripts_text, submission_text
from grpo_ui.checks.assess import Assessment, assess
from grpo_ui.checks.rules import validate
from grpo_ui.checks.rules.credentials import credentials_needed, undeclared
from grpo_ui.checks.steps import Step, job_steps
from grpo_ui.core.findings import Finding, by_id, sort_findings
from grpo_ui.importer import PASTED, ImportRefused, import_scripts, import_uploads
from grpo_ui.importer.build import CONFIG_SUFFIXES
from grpo_ui.knowledge import catalog, hub
from grpo_ui.knowledge.catalog import ModelArch, from_hf_config, parse_hf_config
from grpo_ui.launch.plan import LaunchPlan, default_job_id
from grpo_ui.launch.render import RAY_CONFIG, RAY_JOB, Bundle, render, run_dir, write_bundle
from grpo_ui.memory.report import ESTIMATE_MARGIN, MemoryReport, format_report
from grpo_ui.spec import form
from grpo_ui.spec.cluster import Node
from grpo_ui.spec.errors import SpecError
from grpo_ui.spec.fields import COMMANDS, GROUPS, ArgDecl, Decl, parse_version
from grpo_ui.spec.layout import ParallelLayout, Relation, parallel_layout
from grpo_ui.spec.megatron import MEGATRON_RENDERED_SINCE
from grpo_ui.spec.model import ARGS, SETTINGS, JobSpec
from grpo_ui.spec.names import check_name, is_loopback
from grpo_ui.spec.paths import with_changes
from grpo_ui.spec.presets import presets
from grpo_ui.spec.resolve import resolve
from grpo_ui.spec.swift_cli import RAY_ENTRYPOINT, ray_config, rollout_command, train_command
from grpo_ui.spec.yaml_io import load_spec, spec_from_yaml, spec_to_yaml
from grpo_ui.timing.report import PHASES, TimeReport, duration, format_time

__all__ = [
    "ARGS", "COMMANDS", "CONFIG_SUFFIXES", "ESTIMATE_MARGIN", "GROUPS", "LAYOUT", "MEGATRON_RENDERED_SINCE", "PASTED",
    "PHASES", "RAY_CONFIG", "RAY_ENTRYPOINT", "RAY_JOB", "SETTINGS", "ArgDecl", "Assessment", "Beside", "Bundle",
    "Decl", "ImportOutcome", "ImportRefused", "JobSpec", "LaunchPlan", "MemoryReport", "ModelArch", "Node",
    "ParallelLayout", "Relation", "SpecError", "Step", "TimeReport", "assess", "beside_fields", "catalog",
    "check_name", "credentials_needed", "default_job_id", "duration", "form", "format_report", "format_time",
    "from_hf_config", "hub", "hub_arch", "import_files", "import_scripts", "import_uploads", "is_loopback",
    "job_steps", "load_spec", "parallel_layout", "parse_hf_config", "parse_version", "presets", "ray_config",
    "render", "resolve", "rollout_command", "run_dir", "scripts_text", "secrets_moved", "spec_from_yaml",
    "spec_to_yaml", "submission_text", "train_command", "undeclared", "with_changes", "write_bundle",
]

CLUSTER_WIDE = ("cluster", "slurm", "spec")  # findings on these go beside the cluster part of the form
LAYOUT = "layout"  # the place of the Megatron layout's sizes (form.LAYOUT_FIELDS), drawn together beside the GPUs


@dataclass(frozen=True)
class Beside:
    """What the form shows beside one field (or beside the cluster part, ``"cluster"``): why its text does not parse,
    then its findings, each with ``True`` where it is shown in full (the first place it concerns, in the form's
    order) and ``False`` where it points to the full one."""

    parse_error: str | None
    findings: list[tuple[Finding, bool]]


def _beside(place: str, path: str) -> bool:
    """Whether the form shows what concerns ``path`` at ``place``: the field itself, the cluster part (cluster,
    Slurm and whole-spec paths) or the Megatron layout (its sizes)."""
    return path == place or (place == "cluster" and path.startswith(CLUSTER_WIDE)) or (
        place == LAYOUT and path in form.LAYOUT_FIELDS)


def beside_fields(findings: list[Finding], places: list[str], parse_errors: dict[str, str]) -> dict[str, Beside]:
    """Where the form shows each finding and each parse error: ``places`` are the form's field paths (and
    ``"cluster"``, ``LAYOUT``) in the order it draws them. A finding goes beside every field it names — its cluster
    and Slurm ones (and a whole-spec one) beside the cluster part, the Megatron sizes' beside the layout — in full the
    first time, in order of severity, once per id."""
    ordered = by_id(sort_findings(findings))
    shown: set[str] = set()
    out = {}
    for place in places:
        here = [f for f in ordered if any(_beside(place, p) for p in f.fields)]
        if place == "cluster":
            error = parse_errors.get(place) or "; ".join(f"{p}: {m}" for p, m in parse_errors.items()
                                                         if p.startswith(("cluster", "slurm"))) or None
        else:
            error = "; ".join(m if p == place else f"{p}: {m}" for p, m in parse_errors.items()
                              if _beside(place, p)) or None
        out[place] = Beside(error, [(f, f.id not in shown) for f in here])
        shown |= {f.id for f in here}
    return out


def hub_arch(spec: JobSpec) -> tuple[ModelArch | None, str | None]:
    """A hub id the catalogue lacks: its architecture from its config.json on the job's hub (ModelScope, or Hugging
    Face with use_hf; kept on disk, a failure not retried for a minute), or why the hub cannot give it."""
    eff = resolve(spec)
    if eff.arch is not None or not spec.train.model:
        return None, None
    try:
        return hub.lookup(spec.train.model, eff.use_hf, timeout=5.0), None
    except hub.HubError as e:
        return None, str(e)


@dataclass(frozen=True)
class ImportOutcome:
    """What one import said: the spec it made (a new draft) with its notes, or why it made none — what bash or
    ms-swift would refuse (``refused``, the findings; the files can still be kept as a partial draft) or a spec that
    does not validate (``error``). Each import's outcome replaces the last one's: nothing of an earlier import is
    said beside a later one."""

    spec: JobSpec | None = None
    notes: list[Finding] = field(default_factory=list)
    refused: list[Finding] = field(default_factory=list)
    error: str | None = None


def import_files(files: dict[str, bytes], version: str, keep_partial: bool = False) -> ImportOutcome:
    """Import uploaded or pasted files (name → bytes) for ms-swift ``version``; ``keep_partial``: what a refused
    script says before its problem, as a partial draft. Token-like env names moved to secret_env are among the
    notes."""
    try:
        spec, notes = import_uploads(files, version, keep_partial=keep_partial)
    except ImportRefused as e:
        return ImportOutcome(refused=list(e.findings))
    except SpecError as e:
        return ImportOutcome(error=str(e))
    return ImportOutcome(spec, [*notes, *secrets_moved(spec)])


def secrets_moved(spec: JobSpec) -> list[Finding]:
    """An imported spec's token-like env names made secret_env names, their values dropped (ENV-SECRET-MOVED)."""
    return [f for f in validate(spec) if f.id == "ENV-SECRET-MOVED"]
