"""`args job.yaml [--swift VERSION] [--rollout]`: the exact swift command line for the target ms-swift version, after
the flags grpo-ui adds on its own (as comments saying why)."""

from __future__ import annotations

import sys

from grpo_ui.api.specs import load_spec, rollout_command, train_command
from grpo_ui.core.findings import format_findings, has_errors
from grpo_ui.core.shell import join


def add_parser(sub) -> None:
    p = sub.add_parser("args", help="print the swift rlhf (or swift rollout) command for a job spec")
    p.add_argument("spec", help="job YAML")
    p.add_argument("--swift", metavar="VERSION", help="target ms-swift version (default: the spec's)")
    p.add_argument("--rollout", action="store_true", help="print the swift rollout server command instead")
    p.set_defaults(run=run)


def run(args) -> int:
    spec = load_spec(args.spec)
    cmd = (rollout_command if args.rollout else train_command)(spec, args.swift)
    for flags, why in cmd.added:
        print(f"# grpo-ui adds {flags}: {why}")
    for key, value in cmd.env.items():
        print(f"export {key}={join([value])}")
    print(join(["swift", *cmd.argv]))
    if cmd.findings:
        print(format_findings(cmd.findings), file=sys.stderr)
    return 1 if has_errors(cmd.findings) else 0
