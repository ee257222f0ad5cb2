"""`launch job.yaml [--job-id ID] [--wait] [--no-preflight] [--override REASON]`: plan the job once (findings,
estimate, scripts), show the plan, then preflight and start exactly it (secrets from the environment)."""

from __future__ import annotations

import os
import time

from grpo_ui.api.jobs import JobState, LaunchError, Unavailable, predictions_of
from grpo_ui.api.specs import LaunchPlan, load_spec, submission_text
from grpo_ui.api.workspace import Workspace
from grpo_ui.commands import job_id
from grpo_ui.core.findings import format_findings


def add_parser(sub) -> None:
    p = sub.add_parser("launch", help="start a job on its nodes over SSH, or submit it to Slurm (detached: it "
                                      "outlives this command)")
    p.add_argument("spec", help="job YAML")
    p.add_argument("--job-id", type=job_id, help="job id / run directory name (default: <name>-<timestamp>)")
    p.add_argument("--wait", action="store_true", help="follow the job until it ends (Ctrl-C stops following only)")
    p.add_argument("--no-preflight", action="store_true",
                   help="skip the preflight check of every node that otherwise runs first and blocks on errors")
    p.add_argument("--override", metavar="REASON",
                   help="launch despite the spec's errors (an OOM verdict included) for this reason, kept with the job")
    p.set_defaults(run=run)


def describe_plan(plan: LaunchPlan) -> str:
    """What will be launched, in a few lines: where (for ms-swift's Ray mode, what is submitted), the estimate it is
    launched with, what validation said."""
    spec, trainers, rollouts = plan.spec, plan.role("trainer"), plan.role("rollout")
    hosts = ", ".join(n.host for n in plan.nodes)
    where = {"slurm": f"Slurm via {spec.cluster.login}",
             "ray": f"Ray at {spec.cluster.ray_address} ({hosts})" if spec.cluster.ray_address else
             f"a Ray cluster started on {hosts}"}.get(spec.cluster.backend, hosts)
    gpus = len(spec.cluster.nodes[trainers[0].index].gpus) if trainers else 0
    if plan.bundle.ray and spec.cluster.backend == "ray":
        lines = [f"plan {plan.job_id}: ms-swift's Ray mode, run dir {plan.run_dir}",
                 submission_text(plan.resolved, plan.bundle.ray, plan.run_dir)]
    else:
        lines = [f"plan {plan.job_id}: {len(trainers)} trainer node(s) × {gpus} GPU(s)"
                 + (f", {len(rollouts)} rollout server(s)" if rollouts else "") + f" on {where}; run dir {plan.run_dir}"]
    memory, _ = predictions_of(plan)
    lines += ([f"  no memory estimate: {memory.why}"] if isinstance(memory, Unavailable) else
              [f"  estimate at launch, {r.role} GPU: peak {r.peak_gib} GiB ({r.verdict})" for r in memory.roles])
    notes = [f for f in plan.findings if f.severity != "error"]
    return "\n".join(lines + ([format_findings(notes)] if notes else []))


def run(args) -> int:
    spec = load_spec(args.spec)
    workspace = Workspace(telemetry=args.wait)
    secrets = {name: os.environ.get(name, "") for name in spec.secret_env}
    try:
        plan = workspace.plan(spec, args.job_id)
        print(describe_plan(plan))
        job = workspace.launch(plan, secrets, lambda host, msg: print(f"{host}: {msg}"),
                               preflight=not args.no_preflight, override=args.override)
        print(f"launched {job}")
        return follow(workspace, job) if args.wait else 0
    except LaunchError as e:
        print(e)
        return 1
    finally:
        workspace.close()


def follow(workspace: Workspace, job: str) -> int:
    """Watch the job until it ends (its GPUs sampled meanwhile); 0 when it succeeded."""
    state = workspace.job(job).state
    while state.launched:
        time.sleep(3)
        result = workspace.poll(job)
        state = result.state
        print(f"{job}: {state}, +{result.new_lines} log lines, +{result.new_steps} steps, "
              f"alerts: {', '.join(a.id for a in result.alerts) or 'none'}")
    return 0 if state == JobState.SUCCEEDED else 1
