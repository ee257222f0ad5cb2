"""`status [JOB]`: jobs and their nodes, after re-checking every unfinished one through its backend."""

from __future__ import annotations

import json

from grpo_ui.jobs.follow import Watcher
from grpo_ui.jobs.service import STATUS, Jobs
from grpo_ui.jobs.store import Store
from grpo_ui.jobs.time_loop import summary
from grpo_ui.spec.yaml_io import spec_from_yaml


def add_parser(sub) -> None:
    p = sub.add_parser("status", help="show jobs (all, or one with its nodes, alerts and latest metrics)")
    p.add_argument("job", nargs="?", help="job id")
    p.set_defaults(run=run)


def run(args) -> int:
    store = Store()
    watcher = Watcher(Jobs(store))
    if not args.job:
        errors = watcher.reattach()  # each job alone may fail: its lines say why
        for j in store.jobs():
            print(f"{j.id:<40} {j.state:<10} {j.name}")
            for e in errors.get(j.id, []):
                print(f"  unreachable or unreadable: {e}")
        return 0
    job = store.job(args.job)
    if not job:
        print(f"no job {args.job!r}")
        return 1
    result = watcher.poll(args.job)
    job = store.job(args.job)
    print(f"{job.id}: {result.state}")
    backend = json.loads(store.meta(args.job, STATUS) or "null")
    if backend:
        position = backend["queue_position"]
        print(f"  {backend['detail']}" + (f", queue position {position}" if position else ""))
    for n in store.nodes(args.job):
        print(f"  node {n.node_index} {n.host:<20} {n.role:<8} rank {n.node_rank} pid {n.pid} "
              f"{n.state} exit {n.exit_code}")
    metrics = store.metrics(args.job)
    if metrics:
        step = max(s for series in metrics.values() for s, _ in series)
        latest = {k: v[-1][1] for k, v in metrics.items() if v[-1][0] == step}
        print(f"  step {step}: " + ", ".join(f"{k}={latest[k]:.4g}" for k in ("reward", "reward_std", "kl", "loss")
                                             if k in latest))
        pace = summary(store, args.job, spec_from_yaml(job.spec_yaml))
        print(f"  step time: {pace.median} per step measured (median; recent {pace.recent}), "
              f"{pace.predicted} predicted" + (f", ETA {pace.eta}" if pace.eta else ""))
        for line in pace.lines:
            print(f"    {line}")
    for a in result.alerts:
        print(f"  [{a.severity}] {a.id}: {a.title}")
    if job.error:
        print("  error: " + job.error)
    for e in result.errors:
        print("  unreachable: " + e)
    return 0
