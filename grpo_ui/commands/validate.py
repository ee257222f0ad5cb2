"""`validate job.yaml [--swift VERSION] [--json]`: every finding for a job spec; exit 1 if any is an error."""

from __future__ import annotations

import json

from grpo_ui.api.specs import assess, load_spec, with_changes
from grpo_ui.core.findings import format_findings, sort_findings


def add_parser(sub) -> None:
    p = sub.add_parser("validate", help="check a job spec against ms-swift's rules and field experience")
    p.add_argument("spec", help="job YAML")
    p.add_argument("--swift", metavar="VERSION", help="target ms-swift version (default: the spec's)")
    p.add_argument("--json", action="store_true", help="print the findings as a JSON list")
    p.set_defaults(run=run)


def run(args) -> int:
    spec = load_spec(args.spec)
    if args.swift:
        spec = with_changes(spec, {"swift_version": args.swift})
    a = assess(spec)
    findings = sort_findings(a.findings)
    if args.json:
        print(json.dumps([f.to_dict() for f in findings], indent=2, ensure_ascii=False))
    else:
        print(format_findings(findings) or "no findings")
        print(f"\n{len(a.errors)} error(s), {len(findings) - len(a.errors)} other finding(s) for ms-swift "
              f"{spec.swift_version}")
    return 1 if a.blocked else 0
