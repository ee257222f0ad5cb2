"""`args job.yaml [--swift VERSION] [--rollout]`: the exact swift (or megatron) command line for the target ms-swift
version, after the flags grpo-ui adds on its own (as comments saying why); for a Ray-mode job the Ray config, what the
Ray backend submits (as comments) and the command that reads the config."""

from __future__ import annotations

import sys

import yaml

from grpo_ui.api.specs import (
    RAY_CONFIG,
    RAY_ENTRYPOINT,
    RAY_JOB,
    load_spec,
    ray_config,
    resolve,
    rollout_command,
    run_dir,
    submission_text,
    train_command,
)
from grpo_ui.core.findings import format_findings, has_errors
from grpo_ui.core.shell import join


def add_parser(sub) -> None:
    p = sub.add_parser("args", help="print the swift rlhf / megatron rlhf (or swift rollout) command for a job spec")
    p.add_argument("spec", help="job YAML")
    p.add_argument("--swift", metavar="VERSION", help="target ms-swift version (default: the spec's)")
    p.add_argument("--rollout", action="store_true", help="print the swift rollout server command instead")
    p.set_defaults(run=run)


def run(args) -> int:
    spec = load_spec(args.spec)
    eff = resolve(spec)
    if eff.ray and not args.rollout:  # ms-swift's Ray mode: its config, what is submitted, the command it runs
        cfg = ray_config(spec, args.swift)
        added, findings = cfg.added, cfg.findings
        print(f"# {RAY_CONFIG}\n" + yaml.safe_dump(cfg.data, sort_keys=False, allow_unicode=True, width=120))
        print("\n".join(f"# {line}" for line in submission_text(eff, RAY_JOB, run_dir(spec, "<job-id>")).splitlines()))
        words = ["megatron", *RAY_ENTRYPOINT, RAY_CONFIG]
    else:
        cmd = (rollout_command if args.rollout else train_command)(spec, args.swift)
        added, findings, words = cmd.added, cmd.findings, cmd.words
        for key, value in cmd.env.items():
            print(f"export {key}={join([value])}")
    for flags, why in added:
        print(f"# grpo-ui adds {flags}: {why}")
    print(join(words))
    if findings:
        print(format_findings(findings), file=sys.stderr)
    return 1 if has_errors(findings) else 0
