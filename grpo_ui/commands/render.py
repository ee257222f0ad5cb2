"""`render job.yaml --out DIR [--job-id ID]`: write every node's script, YAML configs, sbatch and README (for ms-swift's
Ray mode the Ray config and the driver's script, and what the Ray backend will submit), and the job's findings; exit 1
if any is an error (the files are written all the same, to read)."""

from __future__ import annotations

from grpo_ui.api.specs import assess, default_job_id, load_spec, render, run_dir, submission_text, write_bundle
from grpo_ui.commands import job_id
from grpo_ui.core.findings import format_findings, unique


def add_parser(sub) -> None:
    p = sub.add_parser("render", help="write per-node launch scripts and exports for a job spec")
    p.add_argument("spec", help="job YAML")
    p.add_argument("--out", required=True, help="output directory")
    p.add_argument("--job-id", type=job_id, help="run directory name on the nodes (default: <name>-<timestamp>)")
    p.set_defaults(run=run)


def run(args) -> int:
    spec = load_spec(args.spec)
    job_id = args.job_id or default_job_id(spec)
    a = assess(spec)
    bundle = render(a, job_id)
    for path in write_bundle(bundle, args.out):
        print(path)
    if bundle.ray:
        print(submission_text(a.resolved, bundle.ray, run_dir(spec, job_id)))
    findings = unique(a.findings + bundle.findings)
    if findings:
        print(format_findings(findings))
    return 1 if a.blocked else 0
