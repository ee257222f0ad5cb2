"""`preflight job.yaml [--trust] [--json]`: check every node (on Slurm: the partition, the request and the shared
run directory, from the login node) before a launch; exit 1 on errors."""

from __future__ import annotations

import json
from dataclasses import asdict

from grpo_ui.api.cluster import Pool, preflight, trust_unknown_keys
from grpo_ui.api.specs import load_spec
from grpo_ui.core.findings import format_findings, has_errors


def add_parser(sub) -> None:
    p = sub.add_parser("preflight", help="check the nodes of a job: SSH, GPUs, versions, ports, paths, disk")
    p.add_argument("spec", help="job YAML")
    p.add_argument("--trust", action="store_true",
                   help="after showing their fingerprints, add unknown host keys to known_hosts")
    p.add_argument("--json", action="store_true", help="print facts and findings as JSON")
    p.set_defaults(run=run)


def run(args) -> int:
    spec = load_spec(args.spec)
    pool = Pool()
    if args.trust:
        trust_unknown_keys(spec, pool, print)
    facts, findings = preflight(spec, pool, lambda host, msg: None if args.json else print(f"{host}: {msg}"))
    pool.close()
    if args.json:
        print(json.dumps({"hosts": [asdict(f) for f in facts], "findings": [f.to_dict() for f in findings]},
                         indent=2))
    else:
        for f in facts:
            gpus = ", ".join(f"{g['gpu_index']}:{g['name']}" for g in f.gpus) or "no GPU"
            swift = f.versions.get("ms-swift") if f.versions else None
            cuda = f"CUDA {f.torch_cuda or 'none (CPU build)'}, driver CUDA {f.driver_cuda or 'unknown'}"
            print(f"{f.host}: python {f.python}, ms-swift {swift}, torch {f.versions.get('torch')} ({cuda}), {gpus}"
                  if f.python else f"{f.host}: {f.error}")
        print(format_findings(findings) or "preflight: no findings")
    return 1 if has_errors(findings) else 0
