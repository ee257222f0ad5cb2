"""`estimate job.yaml [--gpu NAME | --gpu-gib N] [--config config.json] [--json]`: per-GPU memory, every term and
phase, verdict and make-it-fit advice."""

from __future__ import annotations

import json
import sys

from grpo_ui.checks.assess import assess
from grpo_ui.knowledge.catalog import from_hf_config
from grpo_ui.memory.report import format_report
from grpo_ui.spec.paths import with_changes
from grpo_ui.spec.yaml_io import load_spec


def add_parser(sub) -> None:
    p = sub.add_parser("estimate", help="estimate per-GPU memory for a job spec")
    p.add_argument("spec", help="job YAML")
    p.add_argument("--gpu", help="GPU model as nvidia-smi prints it, or a catalogue alias (default: node 0's gpu_model)")
    p.add_argument("--gpu-gib", type=float, help="memory per GPU in GiB (for a GPU the catalogue does not know)")
    p.add_argument("--config", help="the model's config.json (when the model is not in the catalogue)")
    p.add_argument("--json", action="store_true", help="print the report and advice as one JSON object")
    p.set_defaults(run=run)


def on_gpu(spec, gpu: str | None, gpu_gib: float | None):
    """The spec with its trainer nodes' GPU given on the command line (a name alone: the catalogue's memory)."""
    changes = {}
    for i, node in enumerate(spec.cluster.nodes):
        if node.role == "trainer" and (gpu or gpu_gib):
            changes |= {f"cluster.nodes[{i}].gpu_model": gpu} if gpu else {}
            changes |= {f"cluster.nodes[{i}].gpu_memory_gib": gpu_gib}
    return with_changes(spec, changes) if changes else spec


def run(args) -> int:
    spec = on_gpu(load_spec(args.spec), args.gpu, args.gpu_gib)
    try:
        arch = from_hf_config(args.config, name=spec.train.model.split("/")[-1]) if args.config else None
    except ValueError as e:  # an unreadable config.json
        print(f"cannot estimate: {e}", file=sys.stderr)
        return 2
    a = assess(spec, arch)
    if a.memory is None:  # unknown model or GPU, unreadable DeepSpeed/FSDP config
        print(f"cannot estimate: {a.memory_error}", file=sys.stderr)
        return 2
    if args.json:
        out = a.memory.to_dict()
        out["advice"] = [{"changes": s.changes, "why": s.why, "cost": s.cost, "peak_gib": round(s.peak_gib, 2),
                          "verdict": s.verdict} for s in a.suggestions]
        print(json.dumps(out, indent=2, ensure_ascii=False))
    else:
        print(format_report(a.memory))
        for s in a.suggestions:
            changes = ", ".join(f"{k}={v}" for k, v in s.changes.items())
            print(f"make it fit: {s.why} [{changes}] → {s.peak_gib:.1f} GiB ({s.verdict})")
    return 1 if a.memory.verdict == "oom" else 0
