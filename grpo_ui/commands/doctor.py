"""`doctor LOG [LOG …] [--job JOB.yaml] [--quiet-for SECONDS] [--json]`: diagnose any run from its logs — whole logs
or excerpts, one file per node, rank or process (trainer nodes and rollout servers together name the process that
failed first), logging.jsonl and py-spy dumps too; exit 1 on an error."""

from __future__ import annotations

import json
import sys

from grpo_ui.api.diagnose import LogFileError, report_of_files
from grpo_ui.api.specs import load_spec
from grpo_ui.core.findings import format_findings, has_errors, sort_findings


def add_parser(sub) -> None:
    p = sub.add_parser("doctor", help="diagnose a run from its log files or excerpts (launched by grpo-ui or not)")
    p.add_argument("logs", nargs="+", metavar="LOG",
                   help="node/rank/rollout-server logs or excerpts in node order, logging.jsonl, py-spy dumps")
    p.add_argument("--job", metavar="JOB.yaml", help="the job spec (logging_steps, server mode, ports); default: "
                                                     "read from ms-swift's argument dump in the log")
    p.add_argument("--quiet-for", type=float, metavar="SECONDS",
                   help="how long ago the logs last grew (default: from the newest file's modification time)")
    p.add_argument("--json", action="store_true", help="print the findings as a JSON list")
    p.set_defaults(run=run)


def run(args) -> int:
    job = load_spec(args.job) if args.job else None
    try:
        found = report_of_files(args.logs, job, args.quiet_for)
    except LogFileError as e:
        print(f"doctor: {e}", file=sys.stderr)
        return 2
    findings = sort_findings(a.finding() for a in found.alerts)
    if args.json:
        print(json.dumps([f.to_dict() for f in findings], indent=2, ensure_ascii=False))
    else:
        errors = sum(f.severity == "error" for f in findings)
        if found.headline:
            print(found.headline + "\n")
        print(format_findings(findings) or "no findings")
        print(f"\n{errors} error(s), {len(findings) - errors} other finding(s); run {found.state}"
              + (f", last logged step {found.last_step}" if found.last_step is not None else ", no step logged"))
    return 1 if has_errors(findings) else 0
