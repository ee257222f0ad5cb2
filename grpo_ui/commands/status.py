"""`status [JOB]`: jobs and their nodes, after re-checking every unfinished one through its backend."""

from __future__ import annotations

from grpo_ui.api.workspace import Workspace


def add_parser(sub) -> None:
    p = sub.add_parser("status", help="show jobs (all, or one with its nodes, alerts and latest metrics)")
    p.add_argument("job", nargs="?", help="job id")
    p.set_defaults(run=run)


def run(args) -> int:
    workspace = Workspace()
    if not args.job:
        errors = workspace.reattach()  # each job alone may fail: its lines say why
        for j in workspace.all_jobs():
            print(f"{j.id:<40} {j.state:<10} {j.name}")
            for e in errors.get(j.id, []):
                print(f"  unreachable or unreadable: {e}")
        return 0
    if not workspace.job(args.job):
        print(f"no job {args.job!r}")
        return 1
    result = workspace.poll(args.job)
    view = workspace.view(args.job)
    job = view.job
    print(f"{job.id}: {result.state}")
    if backend := view.backend_words():
        position = backend.queue_position
        print(f"  {backend.detail}" + (f", queue position {position}" if position else ""))
    for n in view.nodes():
        print(f"  node {n.node_index} {n.host:<20} {n.role:<8} rank {n.node_rank} pid {n.pid} "
              f"{n.state} exit {n.exit_code}")
    metrics = view.metrics()
    if metrics:
        step = max(s for series in metrics.values() for s, _ in series)
        latest = {k: v[-1][1] for k, v in metrics.items() if v[-1][0] == step}
        print(f"  step {step}: " + ", ".join(f"{k}={latest[k]:.4g}" for k in ("reward", "reward_std", "kl", "loss")
                                             if k in latest))
        pace = view.step_time()
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
