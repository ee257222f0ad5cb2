"""`estimate job.yaml [--gpu NAME] [--json]`: per-GPU memory, every term and phase, verdict and make-it-fit advice."""

from __future__ import annotations

import json
import sys

from grpo_ui.fit import suggest
from grpo_ui.memory import UnknownModel, estimate_spec, format_report
from grpo_ui.spec import load_spec


def add_parser(sub) -> None:
    p = sub.add_parser("estimate", help="estimate per-GPU memory for a job spec")
    p.add_argument("spec", help="job YAML")
    p.add_argument("--gpu", help="GPU model from the catalogue (default: node 0's gpu_model)")
    p.add_argument("--json", action="store_true", help="print the report and advice as one JSON object")
    p.set_defaults(run=run)


def run(args) -> int:
    spec = load_spec(args.spec)
    try:
        report = estimate_spec(spec, args.gpu)
    except UnknownModel as e:
        print(f"train.model: {e}", file=sys.stderr)
        return 2
    advice = suggest(spec, args.gpu)
    if args.json:
        out = report.to_dict()
        out["advice"] = [{"changes": s.changes, "why": s.why, "cost": s.cost, "peak_gib": round(s.peak_gib, 2),
                          "verdict": s.verdict} for s in advice]
        print(json.dumps(out, indent=2, ensure_ascii=False))
    else:
        print(format_report(report))
        for s in advice:
            changes = ", ".join(f"{k}={v}" for k, v in s.changes.items())
            print(f"make it fit: {s.why} [{changes}] → {s.peak_gib:.1f} GiB ({s.verdict})")
    return 1 if report.verdict == "oom" else 0
