"""Where a job stands on the guided path (1. model and GPUs → 2. cluster → 3. training settings → 4. checks →
5. scripts → 6. launch): each step's state and why, from what the Configure page shows — the spec, its assessment
(findings, memory verdict), the fields that do not parse, whether downloads and launch are held, and each host's
latest check. The page only draws what this returns, so the indicator cannot tell another story than the page.

Rules: a field that does not parse counts against the step that draws it (the sidebar's job settings against
none of 1–3: they hide the checks, and step 4 names them); an error counts under one step (``home_step``), and the
checks wait for the steps that hold errors; checks are not done while hidden, while the memory verdict is unknown or
OOM, or while an error is neither fixed nor overridden; scripts wait for steps 1, 3 and 4; launch waits for every
step before it, tested hosts included.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from grpo_ui.checks.assess import Assessment
from grpo_ui.core.findings import Finding, by_id
from grpo_ui.spec.form import FIELDS_BY_PATH
from grpo_ui.spec.model import JobSpec

State = Literal["done", "todo", "blocked"]
HostCheck = Literal["passed", "warning", "failed", "stale", "untested"]
CLUSTER = ("cluster", "slurm")
RUNS = ("train", "rollout", "server")


@dataclass(frozen=True)
class Step:
    number: int
    title: str
    anchor: str           # where on the page the step is done (#model, #cluster, …)
    state: State
    why: str              # what is missing or holding it; for a done step, what it says ("done", "ready", …)

    @property
    def label(self) -> str:
        return f"{self.number}. {self.title}"


def step_of(path: str) -> int | None:
    """The step whose part of the page draws a field: 2 the cluster (nodes, Slurm), 3 the training settings; None
    for the sidebar's job settings (name, version, env, secrets, extra args)."""
    if path.startswith(CLUSTER):
        return 2
    decl = FIELDS_BY_PATH.get(path)
    section = decl.section if decl else path.split(".", 1)[0]
    return 3 if section in RUNS else None


def home_step(f: Finding) -> int:
    """The one step a finding counts under: the memory estimate's own (MEMORY-…) under 4, the checks, where the
    estimate is drawn; any other under the first part of the form that shows it in full (the cluster part, then the
    training settings: grpo_ui.api.specs.beside_fields' order), else under the checks, which list every finding."""
    if f.id.startswith("MEMORY-"):
        return 4
    for step, sections in ((2, (*CLUSTER, "spec")), (3, RUNS)):
        if any(p.startswith(sections) for p in f.fields):
            return step
    return 4


def _errors(findings: list[Finding], step: int) -> list[Finding]:
    return [f for f in findings if f.severity == "error" and home_step(f) == step]


def _problems(unparsed: list[str], errors: list[Finding]) -> str | None:
    return (f"{len(unparsed)} field(s) do not parse" if unparsed
            else f"{len(errors)} error(s)" if errors else None)


def _hosts_step(hosts: dict[str, HostCheck]) -> str | None:
    failed = [h for h, c in hosts.items() if c == "failed"]
    if failed:
        return f"{', '.join(failed)} failed its check"
    stale = [h for h, c in hosts.items() if c == "stale"]
    if stale:
        return "checked before the cluster changed: run preflight again"
    if any(c == "untested" for c in hosts.values()):
        return "hosts not checked yet (Cluster page)"
    return None


def steps(spec: JobSpec, findings: list[Finding], parse_errors: dict[str, str], verdict: str | None, held: bool,
          overridden: bool, hosts: dict[str, HostCheck]) -> list[Step]:
    """Each step's state. ``findings``: what the checks show (empty while fields do not parse); ``verdict``: the
    memory estimate's (fits/tight/oom/unknown: no GPU model), None when there is none; ``held``: downloads and launch are held;
    ``overridden``: an override reason releases the errors; ``hosts``: each host's latest check (Cluster page)."""
    unparsed = {k: [p for p in parse_errors if step_of(p) == k] for k in (2, 3)}
    sidebar = [p for p in parse_errors if step_of(p) is None]
    errors = [f for f in findings if f.severity == "error"]
    model_unknown = any(f.id == "MEMORY-UNKNOWN-MODEL" for f in findings)
    gpu_missing = not all(n.gpu_model or n.gpu_memory_gib for n in spec.trainer_nodes())
    open_errors = [] if overridden else errors  # an override reason releases every error, as it does the downloads
    why: dict[int, str | None] = {
        1: ("No model chosen" if not (spec.train.model or "").strip() else
            "Model unknown: give its config.json" if model_unknown else
            "No GPU model chosen" if gpu_missing else None),
        2: _problems(unparsed[2], _errors(open_errors, 2)) or _hosts_step(hosts),
        3: _problems(unparsed[3], _errors(open_errors, 3)),
    }
    if parse_errors:
        where = ", ".join([*(f"{p} (sidebar)" for p in sidebar), *(p for p in parse_errors if p not in sidebar)])
        why[4] = f"hidden until {where} parse{'s' if len(parse_errors) == 1 else ''}"
    elif open_errors:  # each error counted once, where it is fixed; the checks wait for the others
        elsewhere = sorted({home_step(f) for f in open_errors} - {4})
        oom = verdict == "oom"
        own = [f for f in _errors(open_errors, 4) if not (oom and f.id == "MEMORY-OOM")]  # said as the verdict
        why[4] = "; ".join(["the estimate says OOM"] * oom + [f"{len(own)} error(s)"] * bool(own) + [
            f"after the error(s) in step {' and '.join(map(str, elsewhere))}"] * bool(elsewhere))
    elif verdict in (None, "unknown"):
        reason = why[1] or "the estimate cannot be made"
        why[4] = "no memory verdict yet: " + reason[0].lower() + reason[1:]
    else:
        why[4] = None
    states: dict[int, tuple[State, str]] = {}
    for k in (1, 2, 3, 4):
        released = [f for f in errors if k == 4 or home_step(f) == k] if k > 1 else []
        states[k] = ("todo", why[k]) if why[k] else (
            "done", f"done: {len(released)} error(s) overridden" if released else "done")
    waits_for = {5: (1, 3, 4), 6: (1, 2, 3, 4, 5)}
    for k in (5, 6):
        open_steps = [str(j) for j in waits_for[k] if states[j][0] != "done"]
        if held:
            states[k] = ("blocked", "no scripts while fields do not parse" if parse_errors and k == 5 else
                         "blocked: fix the errors, or give an override reason" if k == 5 else "blocked")
        elif open_steps:
            states[k] = ("todo", f"after step{'s' if len(open_steps) > 1 else ''} {', '.join(open_steps)}")
        else:
            states[k] = ("done", "ready")
    titles = [("Model and GPUs", "model"), ("Cluster", "cluster"), ("Training settings", "training"),
              ("Checks", "checks"), ("Scripts", "scripts"), ("Launch", "launch")]
    return [Step(k, title, anchor, *states[k]) for k, (title, anchor) in enumerate(titles, start=1)]


def job_steps(spec: JobSpec, a: Assessment | None, parse_errors: dict[str, str], held: bool, overridden: bool,
              hosts: dict[str, HostCheck]) -> list[Step]:
    """The steps of the Configure page: ``spec`` as the form describes it, its assessment (None while a field does
    not parse, as the page hides the checks then), its findings as the page lists them (one per id)."""
    return steps(spec, by_id(a.findings) if a else [], parse_errors, a.verdict if a else None, held, overridden,
                 hosts)
