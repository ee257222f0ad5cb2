"""`flags [--settings]`: every ms-swift argument grpo-ui knows, the engines that take it (swift rlhf, megatron rlhf)
and its flag name in each dialect; or every grpo-ui setting (job, cluster, node, Slurm) with its type, default and
meaning."""

from __future__ import annotations

import typing

from grpo_ui.api.specs import ARGS, GROUPS, MEGATRON_RENDERED_SINCE, SETTINGS, form, parse_version

DIALECT_VERSIONS = {"≥ 4.1": "4.6", "4.0": "4.0", "3.5–3.12": "3.12", "3.2–3.4": "3.4"}


def flag_cell(decl, version: str) -> str:
    """The flag name a version knows, or '—' when it has none; a version range's first release decides. A
    Megatron-only argument has none before 4.0 (grpo-ui renders megatron rlhf for ms-swift ≥ 4.0)."""
    firsts = {"4.6": ("4.1", "4.6"), "4.0": ("4.0", "4.0"), "3.12": ("3.5", "3.12"), "3.4": ("3.2", "3.4")}
    lo, hi = firsts[version]
    if "swift" not in decl.engines:
        decl = decl.on("megatron")
        if parse_version(hi) < MEGATRON_RENDERED_SINCE:
            return "—"
    names = {decl.flag_for(v) for v in (lo, hi) if decl.accepted_in(v)}
    if not names:
        return "—"
    cell = " / ".join(f"`{n}`" for n in sorted(names))
    if all(decl.accepted_in(v) for v in (lo, hi)):
        return cell
    return cell + (f" (until {decl.until})" if decl.accepted_in(lo) else f" (from {decl.since})")


def markdown_table() -> str:
    lines = ["| section | field | engines | " + " | ".join(DIALECT_VERSIONS) + " |",
             "|---|---|---|" + "---|" * len(DIALECT_VERSIONS)]
    for group in GROUPS:
        for d in (d for d in ARGS if d.group == group):
            cells = [flag_cell(d, v) for v in DIALECT_VERSIONS.values()]
            engines = " · ".join(d.engines)
            lines.append(f"| {GROUPS[group]} | `{d.path}` | {engines} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _type(decl) -> str:
    """The field's type in words: str, int, one of a / b, list of int, mapping; '(optional)' when it may be empty."""
    ann, optional = form.parts(decl)
    if typing.get_origin(ann) is typing.Literal:
        text = "one of " + " / ".join(map(str, typing.get_args(ann)))
    elif typing.get_origin(ann) in (list, dict):
        text = "mapping" if form.is_mapping(decl) else f"list of {typing.get_args(ann)[0].__name__}"
    else:
        text = ann.__name__
    signs = {"ge": "≥", "gt": ">", "le": "≤", "lt": "<"}
    bounds = [f"{signs[k]} {v}" for k, v in decl.bounds.items()]
    return ", ".join([text, *bounds]) + (" (optional)" if optional else "")


def _default(decl) -> str:
    if decl.required:
        return "required"
    return "—" if decl.default in (None, [], {}) else f"`{form.to_text(decl, decl.default)}`"


def settings_table() -> str:
    lines = ["| setting | type | default | backend | meaning |", "|---|---|---|---|---|"]
    for d in SETTINGS:
        cells = [f"`{d.path}`", _type(d), _default(d), d.applies or "all", d.help]
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(lines)


def add_parser(sub) -> None:
    p = sub.add_parser("flags", help="list the ms-swift flags grpo-ui renders, per dialect (markdown)")
    p.add_argument("--settings", action="store_true", help="list grpo-ui's own settings (job, cluster, node, Slurm)")
    p.set_defaults(run=run)


def run(args) -> int:
    print(settings_table() if args.settings else markdown_table())
    return 0
