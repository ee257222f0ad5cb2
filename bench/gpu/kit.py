"""The GPU calibration kit: real ms-swift GRPO steps on one GPU over a small grid, recorded as calibration rows.

On a GPU machine with no network (bash bench/gpu/run.sh there, after `python bench/gpu/kit.py prepare` here):
for each case of the grid it builds a random-initialised model of a catalogue architecture (bench/gpu/assets.py; no
downloads), writes the job as grpo-ui would launch it (a JobSpec: its swift rlhf command line from
grpo_ui.spec.swift_cli, its memory estimate and step-time prediction at launch from grpo_ui.launch.plan), runs
`swift rlhf` in-process with ms-swift's own phase timers captured (bench/gpu/swift_timed.py) while nvidia-smi is
sampled, and records the run in a grpo-ui store (OUT/grpo-ui.sqlite: its logged metrics, GPU samples and the
estimates at launch), from which the rows come exactly as `python -m grpo_ui calibration export` writes them
(grpo_ui.jobs.memory_loop / time_loop) with what only the kit knows added: ms-swift's phase seconds, torch's
allocated peak, the GPU, driver and versions. Rows go to OUT/memory_rows.jsonl and OUT/time_rows.jsonl (split
'own_gpu'), which `bench/memory_accuracy.py --rows` and `bench/time_calibration.py --fit --rows` read; OUT/summary.txt
sets each run beside its prediction.

The grid (GRID) varies LoRA/full, the micro-batch, the completion length (fixed: a random model never ends a
completion early), gradient checkpointing and Liger, from Qwen2.5-0.5B to 7B, cheapest first; a case starts only if
the time budget (--budget-s) leaves room for it. Generation is transformers' generate(): vLLM's wheels are too large
to travel to the GPU machine. Without DeepSpeed (PyPI has no wheel for it) every case is one GPU, plain PyTorch.

The suite runs the same code on the CPU with the tiny model (`--grid tiny --assets DIR --as-gpu NAME`, in ms-swift's
venv): there a process's peak RSS stands in for GPU memory and no nvidia-smi exists, which the rows say.

    python bench/gpu/kit.py prepare                 # here: wheels for the GPU machine into .whl/
    python bench/gpu/kit.py run --out DIR [--budget-s 540] [--grid gpu|tiny] [--assets DIR] [--as-gpu NAME]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from grpo_ui.doctor.metrics import parse_jsonl_line  # noqa: E402
from grpo_ui.jobs import memory_loop, time_loop  # noqa: E402
from grpo_ui.jobs.store import MemoryAtLaunch, Store, TimeAtLaunch  # noqa: E402
from grpo_ui.knowledge.catalog import find_model, from_hf_config  # noqa: E402
from grpo_ui.launch.plan import assessment_at_launch, time_at_launch  # noqa: E402
from grpo_ui.spec.model import JobSpec  # noqa: E402
from grpo_ui.spec.swift_cli import train_command  # noqa: E402
from grpo_ui.spec.yaml_io import spec_to_yaml, validate_spec  # noqa: E402

WHEELS = ROOT / ".whl"
LOCK = ROOT / "requirements-swift.lock"
ADDED = "bench/gpu"
SPLIT = "own_gpu"
# Packages the GPU machine's image already holds (the device documentation's list of 2026-11-17): they are not
# carried. torch, transformers and their kin stay as the image has them; each run records their versions.
ON_THE_IMAGE = {
    "absl-py", "accelerate", "aiohappyeyeballs", "aiohttp", "aiosignal", "annotated-doc", "anyio", "attrs",
    "certifi", "charset-normalizer", "click", "cloudpickle", "contourpy", "cycler", "einops", "filelock", "fonttools",
    "frozenlist", "fsspec", "grpcio", "h11", "hf-xet", "httpcore", "httpx", "huggingface-hub", "idna", "jinja2",
    "joblib", "kiwisolver", "markdown", "markdown-it-py", "markupsafe", "matplotlib", "mdurl", "mpmath", "multidict",
    "networkx", "numpy", "packaging", "pandas", "peft", "pillow", "propcache", "protobuf", "psutil", "pyarrow",
    "pygments", "pyparsing", "python-dateutil", "pyyaml", "regex", "requests", "rich", "safetensors", "scipy",
    "sentencepiece", "setuptools", "shellingham", "six", "sortedcontainers", "sympy", "tensorboard",
    "tensorboard-data-server", "tiktoken", "tokenizers", "torch", "tqdm", "transformers", "typer",
    "typing-extensions", "urllib3", "werkzeug", "xxhash", "yarl", "zipp"}
# Carried beyond ms-swift's lock: Liger's kernels (a grid dimension; triton is on the image).
EXTRA_WHEELS = ["liger-kernel==0.6.4"]
PLATFORMS = ["manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64",
             "manylinux1_x86_64", "manylinux_2_24_x86_64", "manylinux_2_31_x86_64", "manylinux_2_34_x86_64"]


@dataclass(frozen=True)
class Case:
    """One run of the grid: a catalogue model (or the tiny one), LoRA or full, micro-batch (= completions per step,
    one prompt), completion length, gradient checkpointing, Liger; ``expect_s`` what it is budgeted on an H100."""

    name: str
    model: str
    tuner: str
    micro_batch: int
    completion: int
    grad_ckpt: bool = True
    liger: bool = False
    expect_s: float = 60.0


GRID = [
    Case("q05-full-b4-l256", "Qwen2.5-0.5B", "full", 4, 256, expect_s=45),
    Case("q05-full-b4-l256-nockpt", "Qwen2.5-0.5B", "full", 4, 256, grad_ckpt=False, expect_s=40),
    Case("q05-full-b4-l256-liger", "Qwen2.5-0.5B", "full", 4, 256, liger=True, expect_s=45),
    Case("q05-lora-b4-l256", "Qwen2.5-0.5B", "lora", 4, 256, expect_s=45),
    Case("q05-full-b8-l512", "Qwen2.5-0.5B", "full", 8, 512, expect_s=60),
    Case("q15-full-b4-l256", "Qwen2.5-1.5B", "full", 4, 256, expect_s=60),
    Case("q3-lora-b4-l512", "Qwen2.5-3B", "lora", 4, 512, expect_s=80),
    Case("q7-lora-b4-l256", "Qwen2.5-7B", "lora", 4, 256, expect_s=110),
]
TINY = [Case("tiny-lora-b2-l16", "tiny", "lora", 2, 16, expect_s=60),
        Case("tiny-full-b2-l16-nockpt", "tiny", "full", 2, 16, grad_ckpt=False, expect_s=60)]
STEPS = 4  # optimizer steps per run: the first (warm-up) is left out of the step time
PROMPT_WORDS = 48
CPU_ENV = {"ACCELERATE_USE_CPU": "true", "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
           "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "1"}
GPU_ENV = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}


# prepare (here) ---------------------------------------------------------------------------------------------------

def carried() -> list[str]:
    """NAME==VERSION of every wheel the GPU machine needs: ms-swift's locked environment less what its image holds,
    plus EXTRA_WHEELS."""
    pins = []
    for line in LOCK.read_text().splitlines():
        if "==" in line and not line.startswith((" ", "#")):
            name, version = line.split(" ")[0].split("==")
            if name.lower() not in ON_THE_IMAGE:
                pins.append(f"{name}=={version.split('+')[0]}")
    return pins + EXTRA_WHEELS


def prepare() -> int:
    """Download the wheels into .whl/ as the device documentation says (pip download --no-deps, binary only, CPython
    3.12, manylinux x86-64); a package with no such wheel is named and left out (the kit runs without it when
    ms-swift does not import it in GRPO)."""
    WHEELS.mkdir(exist_ok=True)
    missing = []
    for pin in carried():
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--python-version", "3.12",
               "--implementation", "cp", *[x for p in PLATFORMS for x in ("--platform", p)],
               "--platform", "any", "-d", str(WHEELS), pin]
        if subprocess.run(cmd, capture_output=True, text=True).returncode:
            missing.append(pin)
    size = sum(f.stat().st_size for f in WHEELS.glob("*.whl")) / 2 ** 20
    print(f"{len(list(WHEELS.glob('*.whl')))} wheels in {WHEELS} ({size:.1f} MiB; the device carries 64 MiB)")
    if missing:
        print("no wheel for: " + ", ".join(missing))
    return 0


# run (on the GPU machine, or on the CPU in the suite) --------------------------------------------------------------

def device() -> dict:
    """The GPU (name, driver, memory) as nvidia-smi reports it, and the versions a run depends on."""
    import importlib.metadata as md

    import torch
    facts = {"torch": torch.__version__, "cuda": torch.version.cuda}
    for dist in ("transformers", "ms-swift", "trl", "peft", "accelerate", "liger-kernel"):
        try:
            facts[dist] = md.version(dist)
        except md.PackageNotFoundError:
            facts[dist] = None
    if shutil.which("nvidia-smi"):
        out = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader",
                              "-i", "0"], capture_output=True, text=True).stdout.strip()
        if out:
            name, driver, total = (x.strip() for x in out.split(","))
            facts.update({"gpu": name, "driver": driver, "memory_total": total})
    return facts


class SmiSampler:
    """nvidia-smi's used memory of GPU 0 every 200 ms while a run lasts (the Monitor's sample format)."""

    def __init__(self):
        self.samples: list[dict] = []
        self.proc = None
        if shutil.which("nvidia-smi"):
            self.proc = subprocess.Popen(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits",
                                          "-i", "0", "-lms", "200"], stdout=subprocess.PIPE, text=True)
            threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            if line.strip().isdigit():
                self.samples.append({"host": "localhost", "gpu_index": 0, "ts": time.time(),
                                     "mem_used": float(line.strip())})

    def stop(self) -> list[dict]:
        if self.proc:
            self.proc.terminate()
            self.proc.wait()
        return self.samples


def job_spec(case: Case, model_dir: Path, data: Path, prompt_tokens: float, out: Path, gpu: str) -> JobSpec:
    """The case as a grpo-ui job on one GPU of 'localhost'."""
    cpu = case.model == "tiny"
    return validate_spec({
        "name": case.name,
        "train": {"model": str(model_dir), "model_type": "qwen2", "template": "qwen", "dataset": [str(data)],
                  "reward_funcs": ["format"], "tuner_type": case.tuner, "num_generations": case.micro_batch,
                  "per_device_train_batch_size": case.micro_batch, "max_completion_length": case.completion,
                  "max_steps": STEPS, "gradient_checkpointing": case.grad_ckpt, "use_liger_kernel": case.liger,
                  "torch_dtype": "float32" if cpu else "bfloat16", "logging_steps": 1, "save_strategy": "no",
                  "report_to": ["none"], "dataloader_num_workers": 0, "output_dir": str(out),
                  **({} if cpu else {"attn_impl": "sdpa"})},
        "rollout": {"use_vllm": False, "vllm_mode": None},
        "estimate": {"completion_tokens": case.completion, "prompt_tokens": max(1, round(prompt_tokens))},
        "env": CPU_ENV if cpu else GPU_ENV,
        "cluster": {"nodes": [{"host": "localhost", "gpus": [0], "gpu_model": gpu}]}})


def timers(path: Path) -> tuple[dict, dict]:
    """(seconds per optimizer step by phase after the first step, torch's/the process's peak) from the timer file:
    generate (the 'generate' timer), reward (_score_completions), logprobs (old and reference forwards:
    _get_per_token_logps_and_entropies outside compute_loss), sync (_move_model_to_vllm) and train (the rest of each
    step: _prepare_inputs' time taken from the step's)."""
    records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []
    peak = next((r for r in records if r["name"] == "peak"), {})
    later = [r for r in records if r.get("step") and r["step"] >= 1]  # the warm-up step (global_step 0) left out
    steps = len({r["step"] for r in later}) or 1

    def total(name: str, keep=lambda r: True) -> float:
        return sum(r["s"] for r in later if r["name"] == name and keep(r)) / steps

    phases = {"generate": total("generate"), "reward": total("_score_completions"),
              "logprobs": total("_get_per_token_logps_and_entropies", lambda r: r["parent"] != "compute_loss"),
              "sync": total("_move_model_to_vllm"), "prepare_inputs": total("_prepare_inputs")}
    return {k: round(v, 4) for k, v in phases.items()}, peak


def logged(run_dir: Path) -> list[str]:
    """ms-swift's logging.jsonl lines of the run (the newest version directory under output_dir)."""
    files = sorted(run_dir.glob("*/logging.jsonl"), key=lambda p: p.stat().st_mtime)
    return [line for line in files[-1].read_text().splitlines() if line.strip()] if files else []


def record(store: Store, job_id: str, spec: JobSpec, plan: tuple, lines: list[str], samples: list[dict],
           peak: dict, started: float, cpu: bool) -> None:
    """The run as a launched job in the store, as the Monitor's watcher keeps one: spec, estimates at launch, each
    logging.jsonl line as the watcher parses it (doctor.metrics.parse_jsonl_line), GPU samples."""
    assessment, memory = plan
    store.create_job(job_id, spec.name, spec_to_yaml(spec), "succeeded")
    store.set_job(job_id, started=started)
    store.add_node(job_id, 0, "localhost", "trainer", 0, "node_0.sh", spec.train.output_dir)
    store.set_memory_estimate(job_id, MemoryAtLaunch.kept(memory))
    store.set_time_estimate(job_id, TimeAtLaunch.kept(time_at_launch(assessment)))
    for line in lines:
        step, values = parse_jsonl_line(line) or (None, {})
        if step is None:
            continue
        if cpu and peak.get("rss_gib"):
            values["memory(GiB)"] = peak["rss_gib"]  # no GPU: the process's peak RSS stands in
        store.add_metrics(job_id, step, values, ts=started + values.get("elapsed_time_s", 0.0))
    if samples:
        store.add_gpu_samples(job_id, samples)


def rows_of(store: Store, job_id: str, case: Case, facts: dict, phases: dict, peak: dict, cpu: bool,
            hub_id: str | None, prompt_tokens: int) -> tuple[list[dict], list[dict]]:
    """(memory rows, time rows) of one run: `calibration export`'s, with the kit's additions."""
    memory = memory_loop.export_rows(store, [job_id])
    timed, _ = time_loop.export_rows(store, [job_id])
    where = (f"{facts.get('gpu', 'CPU')}, driver {facts.get('driver')}, torch {facts['torch']} (CUDA {facts['cuda']}), "
             f"transformers {facts['transformers']}, ms-swift {facts['ms-swift']}, trl {facts['trl']}, peft "
             f"{facts['peft']}, liger-kernel {facts['liger-kernel']}")
    kit = (f"bench/gpu case {case.name}: random-initialised weights (every completion runs to "
           f"max_completion_length), transformers generate(), one GPU without DeepSpeed; {where}.")
    for row in memory + timed:
        row["added"], row["notes"] = ADDED + (" (CPU pipeline check, not a measurement)" if cpu else ""), \
            f"{kit} {row['notes']}"
        if hub_id:  # the model as the catalogue names it: the row describes the architecture, not this machine's path
            row["config"]["model"] = hub_id
    for row in memory:
        if cpu:
            row["measures"] = "CPU check: the training process's peak RSS in place of memory(GiB) (no GPU)"
    if peak.get("allocated_gib") and memory:
        base = next(r for r in memory if r["compare"] == "torch") if any(
            r["compare"] == "torch" for r in memory) else memory[0]
        memory.append({**base, "id": f"grpoui-{job_id}-allocated", "measured_gib": round(peak["allocated_gib"], 3),
                       "unit": "GiB", "compare": "allocated",
                       "measures": "torch.cuda.max_memory_allocated() of the training process"})
    for row in timed:
        row["split"] = SPLIT
        row["config"]["mean_prompt_tokens"] = prompt_tokens
        row["measured"]["phases_s"].update({k: v for k, v in phases.items() if k != "prepare_inputs"})
        step_time = row["measured"]["phases_s"].get("step_time")
        if step_time is not None:
            row["measured"]["phases_s"]["train"] = round(max(0.0, step_time - phases["prepare_inputs"]), 4)
        row["config"]["extra"]["bench_gpu"] = {"case": case.name, **facts}
    return memory, timed


def run_case(case: Case, out: Path, assets: Path | None, gpu: str, facts: dict, store: Store,
             timeout: float) -> tuple[list[dict], list[dict], str]:
    """One case: assets, the job, `swift rlhf` with its timers, the store, the rows; and a summary line."""
    from transformers import AutoTokenizer

    from bench.gpu import assets as make

    cpu = case.model == "tiny"
    if cpu:
        model_dir, data = assets / "model", assets / "data.jsonl"
        arch, hub_id = from_hf_config(model_dir / "config.json", "tiny"), None
    else:
        catalogue = find_model(case.model)
        model_dir, data = make.model(catalogue, out / "models" / case.model), out / "data.jsonl"
        make.dataset(data, PROMPT_WORDS)
        arch, hub_id = from_hf_config(model_dir / "config.json", case.model), catalogue.hub[0]
    prompt = make.mean_prompt_tokens(AutoTokenizer.from_pretrained(model_dir), data)
    run_dir = out / "runs" / case.name
    shutil.rmtree(run_dir, ignore_errors=True)
    spec = job_spec(case, model_dir, data, prompt, run_dir, gpu)
    plan = assessment_at_launch(spec, arch)
    argv = train_command(plan[0].resolved).argv[1:]  # after 'rlhf'
    timer_file = out / "runs" / f"{case.name}.timers.jsonl"
    timer_file.parent.mkdir(parents=True, exist_ok=True)
    timer_file.unlink(missing_ok=True)
    env = {**os.environ, **spec.env, "CUDA_VISIBLE_DEVICES": "0",  # the node's gpus, as grpo-ui's node script sets it
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    sampler, started = SmiSampler(), time.time()
    with open(out / "runs" / f"{case.name}.log", "w") as log:
        try:
            code = subprocess.run([sys.executable, str(ROOT / "bench/gpu/swift_timed.py"), str(timer_file), "--",
                                   *argv], stdout=log, stderr=subprocess.STDOUT, env=env, timeout=timeout).returncode
        except subprocess.TimeoutExpired:
            code = "timeout"
    samples = sampler.stop()
    if code != 0:
        return [], [], f"{case.name}: swift rlhf ended with {code} (log: runs/{case.name}.log)"
    phases, peak = timers(timer_file)
    job_id = f"{case.name}-{time.strftime('%Y%m%d-%H%M%S')}"
    record(store, job_id, spec, plan, logged(run_dir), samples, peak, started, cpu)
    memory, timed = rows_of(store, job_id, case, facts, phases, peak, cpu, hub_id, spec.estimate.prompt_tokens)
    predicted = plan[0].time.step_s if plan[0].time else None
    measured = timed[0]["measured"]["step_s"] if timed else None
    est = plan[1].get("roles", [{}])[0].get("expected_gib") if "roles" in plan[1] else None
    got = next((r["measured_gib"] for r in memory if r["compare"] == "peak"), None) or next(
        (r["measured_gib"] for r in memory if r["compare"] == "torch"), None)
    return memory, timed, (f"{case.name:<26} step {measured} s (predicted {predicted and round(predicted, 3)} s)  "
                           f"memory {got} GiB (estimated on nvidia-smi {est and round(est, 2)} GiB)  phases {phases}")


def run(out: Path, budget_s: float, grid: str, assets: Path | None, as_gpu: str | None) -> int:
    start = time.time()
    out.mkdir(parents=True, exist_ok=True)
    facts = device()
    gpu = facts.get("gpu") or as_gpu
    if not gpu:
        print("error: no GPU found (nvidia-smi) and no --as-gpu NAME for the CPU check", file=sys.stderr)
        return 2
    if grid == "tiny" and not (assets and (assets / "model" / "config.json").exists()):
        print("error: --grid tiny needs --assets DIR holding the tiny model (python tests/tiny_job.py build DIR)",
              file=sys.stderr)
        return 2
    store = Store(out / "grpo-ui.sqlite")
    memory_rows, time_rows, lines = [], [], [f"device: {json.dumps(facts)}"]
    for case in TINY if grid == "tiny" else GRID:
        left = budget_s - (time.time() - start)
        if left < case.expect_s:
            lines.append(f"{case.name}: skipped, {left:.0f} s of the budget left (expects {case.expect_s:.0f} s)")
            continue
        memory, timed, line = run_case(case, out, assets, gpu, facts, store, left)
        memory_rows += memory
        time_rows += timed
        lines.append(line)
        print(line, flush=True)
    (out / "memory_rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in memory_rows))
    (out / "time_rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in time_rows))
    lines.append(f"{len(memory_rows)} memory rows, {len(time_rows)} step-time rows in {out} "
                 f"({time.time() - start:.0f} s)")
    (out / "summary.txt").write_text("\n".join(lines) + "\n")
    print(lines[-1])
    return 0 if time_rows else 1


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="bench/gpu/kit.py", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="action", required=True)
    sub.add_parser("prepare", help="download the wheels the GPU machine lacks into .whl/ (here, with network)")
    r = sub.add_parser("run", help="run the grid and write the rows")
    r.add_argument("--out", type=Path, default=ROOT / "runs" / "gpu-kit")
    r.add_argument("--budget-s", type=float, default=540.0, help="start no case that would end after this many "
                                                                 "seconds (default 540: 10 minutes with the installs)")
    r.add_argument("--grid", choices=("gpu", "tiny"), default="gpu")
    r.add_argument("--assets", type=Path, help="the tiny model's directory (tests/tiny_job.py build DIR)")
    r.add_argument("--as-gpu", help="the GPU model the rows name when there is none (the CPU check)")
    args = parser.parse_args(argv)
    if args.action == "prepare":
        return prepare()
    return run(args.out, args.budget_s, args.grid, args.assets, args.as_gpu)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
