"""`calibration export [JOB…] [--out FILE]`: each job's measured peak memory next to the estimate it was launched
with, as rows in the calibration format (tests/data/memory_measurements.jsonl), to contribute."""

from __future__ import annotations

import json
import sys

from grpo_ui.jobs.memory_loop import export_rows
from grpo_ui.jobs.store import Store


def add_parser(sub) -> None:
    p = sub.add_parser("calibration", help="measured memory vs estimate of launched jobs, as calibration rows")
    actions = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    export = actions.add_parser("export", help="write the rows (JSON lines) of the given jobs, or of every job")
    export.add_argument("jobs", nargs="*", metavar="JOB", help="job ids (default: every job in the store)")
    export.add_argument("--out", help="append to this file instead of printing")
    export.set_defaults(run=run)


def run(args) -> int:
    store = Store()
    ids = args.jobs or [j["id"] for j in store.jobs()]
    unknown = [j for j in ids if store.job(j) is None]
    if unknown:
        print(f"no such job: {', '.join(unknown)}", file=sys.stderr)
        return 2
    rows = export_rows(store, ids)
    if not rows:
        print("no measured peaks yet for " + ", ".join(ids) + " (nvidia-smi samples arrive while the Monitor page "
              "follows a job; memory(GiB) with rank 0's metrics on GPUs)", file=sys.stderr)
        return 1
    text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
    if args.out:
        with open(args.out, "a") as f:
            f.write(text)
        print(f"{len(rows)} row(s) appended to {args.out}")
    else:
        sys.stdout.write(text)
    return 0
