"""`flags [--markdown]`: every ms-swift argument grpo-ui knows, with its flag name in each dialect."""

from __future__ import annotations

from grpo_ui.spec import ARGS, GROUPS

DIALECT_VERSIONS = {"≥ 4.1": "4.6", "4.0": "4.0", "3.5–3.12": "3.12", "3.2–3.4": "3.4"}


def flag_cell(decl, version: str) -> str:
    """The flag name a version knows, or '—' when it has none; a version range's first release decides."""
    firsts = {"4.6": ("4.1", "4.6"), "4.0": ("4.0", "4.0"), "3.12": ("3.5", "3.12"), "3.4": ("3.2", "3.4")}
    lo, hi = firsts[version]
    names = {decl.flag_for(v) for v in (lo, hi) if decl.accepted_in(v)}
    if not names:
        return "—"
    cell = " / ".join(f"`{n}`" for n in sorted(names))
    if all(decl.accepted_in(v) for v in (lo, hi)):
        return cell
    return cell + (f" (until {decl.until})" if decl.accepted_in(lo) else f" (from {decl.since})")


def markdown_table() -> str:
    lines = ["| section | field | " + " | ".join(DIALECT_VERSIONS) + " |",
             "|---|---|" + "---|" * len(DIALECT_VERSIONS)]
    for group in GROUPS:
        for d in (d for d in ARGS if d.group == group):
            cells = [flag_cell(d, v) for v in DIALECT_VERSIONS.values()]
            lines.append(f"| {GROUPS[group]} | `{d.path}` | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def add_parser(sub) -> None:
    p = sub.add_parser("flags", help="list the ms-swift flags grpo-ui renders, per dialect (markdown)")
    p.set_defaults(run=run)


def run(args) -> int:
    print(markdown_table())
    return 0
