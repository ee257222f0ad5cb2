"""One-GPU smoke check of a tiny Megatron GRPO job (issue 29), for a machine with one NVIDIA GPU and ms-swift ≥ 4.0
with megatron-core, mcore-bridge, Transformer Engine and vLLM installed in the Python that runs it. Nothing is
downloaded: the model is tests/tiny_job.py's random-initialised Qwen2 (hidden 64, 2 layers, 4 heads, 2 KV heads)
built from its config.json, with its own tokenizer and dataset.

It goes the way a user's job goes: a grpo-ui spec (engine megatron, vLLM colocated, TP 1, 2 iterations), assessed
(no error may be found), rendered, node_0.sh run as the SSH backend runs it; then it checks the exit code and that
megatron rlhf logged both iterations ('iteration': 'N/2') in logging.jsonl. It prints one line per check and exits 0
only when all pass.

Never run here: the development machines have no GPU (the device tool's status says whether a task has one).
Run: python bench/gpu/megatron_smoke.py [WORKDIR]   (PYTHONPATH=. from the repository root)
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from grpo_ui.checks.assess import assess  # noqa: E402
from grpo_ui.launch.render import render, write_bundle  # noqa: E402
from grpo_ui.spec.model import JobSpec  # noqa: E402
from grpo_ui.spec.paths import with_changes  # noqa: E402
from tests import tiny_job  # noqa: E402

ITERS = 2


def spec_for(assets: Path, work: Path) -> JobSpec:
    p = tiny_job.paths(assets)
    return with_changes(JobSpec(engine="megatron", name="megatron-smoke"), {
        "train.model": str(p["model"]), "train.model_type": "qwen2", "train.template": "qwen",
        "train.dataset": [str(p["dataset"])], "train.reward_funcs": ["format"], "train.num_generations": 2,
        "train.micro_batch_size": 2, "train.global_batch_size": 4, "train.train_iters": ITERS,
        "train.max_completion_length": 16, "train.logging_steps": 1, "train.save_steps": 1000,
        "train.no_save_optim": True, "train.no_save_rng": True, "train.report_to": ["none"],
        "train.output_dir": str(work / "output"), "train.bf16": True, "rollout.vllm_mode": "colocate",
        "rollout.vllm_gpu_memory_utilization": 0.3, "rollout.vllm_max_model_len": 256,
        "cluster.run_root": str(work / "runs"), "cluster.workdir": str(work),
        "cluster.nodes": [{"host": "localhost", "gpus": [0], "python_env": sys.prefix}]})


def main(work: Path) -> int:
    checks: list[tuple[str, bool, str]] = []
    assets = tiny_job.build(work / "assets")
    spec = spec_for(work / "assets", work)
    errors = [f"{f.id}: {f.message}" for f in assess(spec).findings if f.severity == "error"]
    checks.append(("the spec passes grpo-ui's checks", not errors, "; ".join(errors)))
    bundle = render(spec, "smoke")
    write_bundle(bundle, work / "bundle")
    proc = subprocess.run(["bash", str(work / "bundle" / "node_0.sh")], capture_output=True, text=True,
                          timeout=1800)
    (work / "node_0.log").write_text(proc.stdout + proc.stderr)
    checks.append(("megatron rlhf exited 0", proc.returncode == 0, f"exit {proc.returncode}, log {work / 'node_0.log'}"))
    logs = sorted((work / "output").rglob("logging.jsonl"))
    lines = [json.loads(x) for x in logs[-1].read_text().splitlines() if x.strip()] if logs else []
    iterations = [str(x.get("iteration")) for x in lines if "iteration" in x]
    checks.append(("logging.jsonl has every iteration", iterations[-1:] == [f"{ITERS}/{ITERS}"],
                   f"iterations logged: {iterations} in {logs[-1] if logs else 'no logging.jsonl'}"))
    for what, ok, detail in checks:
        print(f"{'PASS' if ok else 'FAIL'}  {what}" + ("" if ok else f"  ({detail})"))
    print(f"assets: {assets['model']}")
    return 0 if all(ok for _, ok, _ in checks) else 1


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp(prefix="megatron-smoke-"))))
