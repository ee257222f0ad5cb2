"""`launch job.yaml [--job-id ID] [--wait] [--no-preflight]`: preflight, then start the job on every node (secrets from
the environment)."""

from __future__ import annotations

import os
import time

from grpo_ui.backends.jobs import launcher_for
from grpo_ui.commands import job_id
from grpo_ui.remote.launcher import LaunchError
from grpo_ui.spec import load_spec
from grpo_ui.store import Store


def add_parser(sub) -> None:
    p = sub.add_parser("launch", help="start a job on its nodes over SSH, or submit it to Slurm (detached: it "
                                      "outlives this command)")
    p.add_argument("spec", help="job YAML")
    p.add_argument("--job-id", type=job_id, help="job id / run directory name (default: <name>-<timestamp>)")
    p.add_argument("--wait", action="store_true", help="follow the job until it ends (Ctrl-C stops following only)")
    p.add_argument("--no-preflight", action="store_true",
                   help="skip the preflight check of every node that otherwise runs first and blocks on errors")
    p.set_defaults(run=run)


def run(args) -> int:
    spec = load_spec(args.spec)
    launcher = launcher_for(spec, Store())
    secrets = {name: os.environ.get(name, "") for name in spec.secret_env}
    try:
        job = launcher.launch(spec, args.job_id, secrets, lambda host, msg: print(f"{host}: {msg}"),
                              preflight=not args.no_preflight)
    except LaunchError as e:
        print(e)
        return 1
    print(f"launched {job}")
    if not args.wait:
        return 0
    from grpo_ui.monitor.watch import Watcher
    watcher, state = Watcher(launcher), "running"
    while state in ("starting", "running"):
        time.sleep(3)
        result = watcher.poll(job)
        state = result["state"]
        print(f"{job}: {state}, +{result['new_lines']} log lines, +{result['new_steps']} steps, "
              f"alerts: {', '.join(a['id'] for a in result['alerts']) or 'none'}")
    return 0 if state == "succeeded" else 1
