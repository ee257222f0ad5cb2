"""`stop JOB [--grace S]`: SIGTERM every node's processes, SIGKILL after the grace period (on Slurm: scancel), verify
nothing is left."""

from __future__ import annotations

from grpo_ui.api.jobs import LaunchError
from grpo_ui.api.workspace import Workspace


def add_parser(sub) -> None:
    p = sub.add_parser("stop", help="stop a job on every node and verify nothing of it is left")
    p.add_argument("job", help="job id")
    p.add_argument("--grace", type=float, default=10.0, help="seconds between SIGTERM and SIGKILL")
    p.set_defaults(run=run)


def run(args) -> int:
    try:
        outcome = Workspace().stop(args.job, args.grace)
    except LaunchError as e:
        print(e)
        return 1
    for host, result in outcome.items():
        print(f"{host}: {result}")
    return 0
