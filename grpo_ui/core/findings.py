"""Finding: the one shape every check in grpo-ui reports in (rules, import, render, preflight, doctor)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Literal

Severity = Literal["error", "warning", "info"]
SEVERITY_ORDER = {"error": 0, "warning": 1, "info": 2}


@dataclass(frozen=True)
class Finding:
    """One problem or advisory.

    id: stable identifier (e.g. ``GRPO-BATCH-DIV``) that tests, docs and the UI refer to.
    fields: dotted spec paths it concerns (``train.num_generations``, ``cluster.nodes[1].host``).
    message: what is wrong, with the numbers. fix: the concrete change that resolves it.
    apply: optional ready-to-apply change {dotted path: new value} for one-click fixes.
    """

    id: str
    severity: Severity
    fields: tuple[str, ...]
    message: str
    fix: str
    apply: dict = field(default_factory=dict, compare=False)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["fields"] = list(self.fields)
        return d


def finding(id: str, severity: Severity, fields, message: str, fix: str, apply: dict | None = None) -> Finding:
    """Build a Finding; ``fields`` may be a single path or an iterable of paths."""
    fields = (fields,) if isinstance(fields, str) else tuple(fields)
    return Finding(id, severity, fields, message, fix, apply or {})


def unique(findings) -> list[Finding]:
    """One finding per (id, fields): the first of each, in order (two checks may report the same problem)."""
    seen: set = set()
    return [f for f in findings if (f.id, f.fields) not in seen and not seen.add((f.id, f.fields))]


def by_id(findings) -> list[Finding]:
    """One finding per id, as the pages list them: the first one's message, every field any of them names, all
    their one-click changes."""
    kept: dict[str, Finding] = {}
    for f in findings:
        first = kept.get(f.id)
        kept[f.id] = f if first is None else replace(first, fields=tuple(dict.fromkeys(first.fields + f.fields)),
                                                     apply={**first.apply, **f.apply})
    return list(kept.values())


def has_errors(findings) -> bool:
    return any(f.severity == "error" for f in findings)


def sort_findings(findings) -> list[Finding]:
    return sorted(findings, key=lambda f: (SEVERITY_ORDER[f.severity], f.id))


def format_findings(findings) -> str:
    """Plain-text listing, errors first; empty string when there is nothing to say."""
    lines = []
    for f in sort_findings(findings):
        lines.append(f"[{f.severity.upper()}] {f.id} ({', '.join(f.fields)})")
        lines.append(f"    {f.message}")
        lines.append(f"    fix: {f.fix}")
    return "\n".join(lines)


def error_list(text: str) -> str:
    """A stored error text (a headline, then format_findings' listing, if any) as Markdown: the headline, then one
    bullet per finding ("ID (fields): message — fix: …")."""
    head, *rest = text.strip().splitlines() or [""]
    items: list[str] = []
    for line in rest:
        if line.startswith("["):
            items.append(line.split("] ", 1)[-1] + ":")
        elif items:
            items[-1] += " " + line.strip().replace("fix: ", "— fix: ", 1)
        else:
            head += " " + line.strip()
    return head + "".join(f"\n- {item}" for item in items)


# How each severity is marked on the pages: Streamlit's bundled Material icons (emoji depend on the browser's fonts).
SEVERITY_ICON = {"error": ":material/error:", "warning": ":material/warning:", "info": ":material/info:"}
