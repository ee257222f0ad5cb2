"""`calibration export [JOB…] [--only memory|time] [--out FILE]`: each job's measured peak memory next to the estimate
it was launched with (the rows of tests/data/memory_measurements.jsonl) and its measured step time with the
prediction made at launch (the rows of tests/data/time_measurements.jsonl), to contribute."""

from __future__ import annotations

import json
import sys

from grpo_ui.api.workspace import Workspace

KINDS = ("memory", "time")


def add_parser(sub) -> None:
    p = sub.add_parser("calibration", help="measured memory and step time of launched jobs, as calibration rows")
    actions = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    export = actions.add_parser("export", help="write the rows (JSON lines) of the given jobs, or of every job")
    export.add_argument("jobs", nargs="*", metavar="JOB", help="job ids (default: every job in the store)")
    export.add_argument("--only", choices=KINDS, help="only memory rows or only step-time rows (default: both)")
    export.add_argument("--out", help="append to this file instead of printing (needs --only: each kind has its "
                                      "own calibration file)")
    export.set_defaults(run=run)


def run(args) -> int:
    if args.out and not args.only:
        print("--out needs --only memory or --only time: memory rows belong in memory_measurements.jsonl, step-time "
              "rows in time_measurements.jsonl", file=sys.stderr)
        return 2
    workspace = Workspace()
    ids = args.jobs or [j.id for j in workspace.all_jobs()]
    unknown = [j for j in ids if workspace.job(j) is None]
    if unknown:
        print(f"no such job: {', '.join(unknown)}", file=sys.stderr)
        return 2
    rows = []
    if args.only in (None, "memory"):
        rows += workspace.memory_rows(ids)
        if not rows:
            print("no measured peaks yet for " + ", ".join(ids) + " (nvidia-smi samples arrive while the "
                  "Monitor page follows a job; memory(GiB) with rank 0's metrics on GPUs)", file=sys.stderr)
    if args.only in (None, "time"):
        timed, skipped = workspace.time_rows(ids)
        rows += timed
        for job_id, why in skipped.items():
            print(f"no step-time row for {job_id}: {why}", file=sys.stderr)
    if not rows:
        return 1
    text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
    if args.out:
        with open(args.out, "a") as f:
            f.write(text)
        print(f"{len(rows)} row(s) appended to {args.out}")
    else:
        sys.stdout.write(text)
    return 0
