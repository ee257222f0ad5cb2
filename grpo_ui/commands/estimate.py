"""`estimate job.yaml [--gpu NAME | --gpu-gib N] [--config config.json] [--completion-tokens N] [--steps N] [--price P]
[--json]`: per-GPU memory, every term and phase, verdict and make-it-fit advice; seconds per optimizer step by phase,
the run's hours, GPU-hours and cost."""

from __future__ import annotations

import json
import sys

from grpo_ui.checks.fit import suggest
from grpo_ui.knowledge import hub
from grpo_ui.knowledge.catalog import from_hf_config
from grpo_ui.memory.estimate import estimate_spec
from grpo_ui.memory.report import format_report
from grpo_ui.spec.resolve import resolve
from grpo_ui.spec.yaml_io import load_spec
from grpo_ui.timing.predict import predict_spec
from grpo_ui.timing.report import format_time


def add_parser(sub) -> None:
    p = sub.add_parser("estimate", help="estimate per-GPU memory for a job spec")
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


def run(args) -> int:
    spec = load_spec(args.spec)
    try:
        arch = from_hf_config(args.config, name=spec.train.model.split("/")[-1]) if args.config else None
        eff = resolve(spec, arch)
        if eff.arch is None:  # a hub id the catalogue lacks: its config.json from the job's hub (cached)
            eff = resolve(eff, hub.lookup(spec.train.model, eff.use_hf))
        report = estimate_spec(eff, args.gpu, gpu_gib=args.gpu_gib)
    except ValueError as e:  # unknown model or GPU, unreadable DeepSpeed/FSDP config or config.json, the hub
        print(f"cannot estimate: {e}", file=sys.stderr)
        return 2
    advice = suggest(eff, args.gpu, gpu_gib=args.gpu_gib)
    try:
        timing = predict_spec(eff, args.gpu, completion_tokens=args.completion_tokens, steps=args.steps,
                              price=args.price)
        time_error = None
    except ValueError as e:  # no GPU speed facts (a CPU host), or what the memory estimate also lacks
        timing, time_error = None, str(e)
    if args.json:
        out = report.to_dict()
        out["advice"] = [{"changes": s.changes, "why": s.why, "cost": s.cost, "peak_gib": round(s.peak_gib, 2),
                          "verdict": s.verdict} for s in advice]
        out["time"] = timing.to_dict() if timing else {"error": time_error}
        print(json.dumps(out, indent=2, ensure_ascii=False))
    else:
        print(format_report(report))
        for s in advice:
            changes = ", ".join(f"{k}={v}" for k, v in s.changes.items())
            print(f"make it fit: {s.why} [{changes}] → {s.peak_gib:.1f} GiB ({s.verdict})")
        print("\n" + (format_time(timing) if timing else time_error))
    return 1 if report.verdict == "oom" else 0
