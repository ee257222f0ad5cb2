"""`estimate job.yaml [--gpu NAME | --gpu-gib N] [--config config.json] [--completion-tokens N] [--steps N] [--price P]
[--json]`: per-GPU memory, every term and phase, verdict and make-it-fit advice; seconds per optimizer step by phase,
the run's hours, GPU-hours and cost."""

from __future__ import annotations

import json
import sys
from dataclasses import replace

from grpo_ui.api.specs import assess, format_report, format_time, from_hf_config, hub, load_spec, resolve, with_changes


def add_parser(sub) -> None:
    p = sub.add_parser("estimate", help="estimate per-GPU memory and the time per step for a job spec")
    p.add_argument("spec", help="job YAML")
    p.add_argument("--gpu", help="GPU model as nvidia-smi prints it, or a catalogue alias (default: node 0's gpu_model)")
    p.add_argument("--gpu-gib", type=float, help="memory per GPU in GiB (for a GPU the catalogue does not know)")
    p.add_argument("--config", help="the model's config.json (when the model is not in the catalogue; else it is "
                   "fetched from the job's hub: ModelScope, or Hugging Face with use_hf)")
    p.add_argument("--completion-tokens", type=int, metavar="N",
                   help="expected mean completion length (default: estimate.completion_tokens, else assumed)")
    p.add_argument("--steps", type=int, metavar="N", help="optimizer steps of the run (default: train.max_steps, or "
                   "the dataset's rows × epochs ÷ prompts per step)")
    p.add_argument("--price", type=float, metavar="P", help="price per GPU-hour (default: estimate.price_per_gpu_hour)")
    p.add_argument("--json", action="store_true", help="print the report and advice as one JSON object (the step-time "
                   "prediction under \"time\")")
    p.set_defaults(run=run)


def on_gpu(spec, gpu: str | None, gpu_gib: float | None):
    """The spec with its trainer nodes' GPU given on the command line (a name alone: the catalogue's memory)."""
    changes = {}
    for i, node in enumerate(spec.cluster.nodes):
        if node.role == "trainer" and (gpu or gpu_gib):
            changes |= {f"cluster.nodes[{i}].gpu_model": gpu} if gpu else {}
            changes |= {f"cluster.nodes[{i}].gpu_memory_gib": gpu_gib}
    return with_changes(spec, changes) if changes else spec


def expecting(spec, completion_tokens: int | None, price: float | None):
    """The spec with what the command line says of the run (its estimate section)."""
    changes = {"estimate.completion_tokens": completion_tokens} if completion_tokens else {}
    changes |= {"estimate.price_per_gpu_hour": price} if price is not None else {}
    return with_changes(spec, changes) if changes else spec


def run(args) -> int:
    spec = expecting(on_gpu(load_spec(args.spec), args.gpu, args.gpu_gib), args.completion_tokens, args.price)
    try:
        arch = from_hf_config(args.config, name=spec.train.model.split("/")[-1]) if args.config else None
        eff = resolve(spec, arch)
        if eff.arch is None:  # a hub id the catalogue lacks: its config.json from the job's hub (cached)
            arch = hub.lookup(spec.train.model, eff.use_hf)
    except ValueError as e:  # an unreadable config.json, the hub cannot give it
        print(f"cannot estimate: {e}", file=sys.stderr)
        return 2
    a = assess(spec, arch)
    if a.memory is None:  # unknown model or GPU, unreadable DeepSpeed/FSDP config
        if args.json:
            print(json.dumps({"error": a.memory_error, "time": {"error": a.time_error}}, indent=2))
        print(f"cannot estimate: {a.memory_error}", file=sys.stderr)
        return 2
    timing = replace(a.time, steps=args.steps) if a.time and args.steps else a.time
    if args.json:
        out = a.memory.to_dict()
        out["advice"] = [{"changes": s.changes, "why": s.why, "cost": s.cost, "peak_gib": round(s.peak_gib, 2),
                          "verdict": s.verdict} for s in a.suggestions]
        out["time"] = timing.to_dict() if timing else {"error": a.time_error}
        print(json.dumps(out, indent=2, ensure_ascii=False))
    else:
        print(format_report(a.memory))
        for s in a.suggestions:
            changes = ", ".join(f"{k}={v}" for k, v in s.changes.items())
            print(f"make it fit: {s.why} [{changes}] → {s.peak_gib:.1f} GiB ({s.verdict})")
        print("\n" + (format_time(timing) if timing else a.time_error))
    return 1 if a.memory.verdict == "oom" else 0
