"""Published step times (tests/data/time_measurements.jsonl) against the step-time model and a naive baseline, and
the fitting of the model's constants.

Each row (its schema: tests/data/time_measurements.README.md) is rebuilt as the ms-swift job of the same shape: the
same model, GPUs and layout (trainer GPUs, rollout GPUs: colocated when it has none), completions per optimizer step,
optimizer steps per generation round, lengths, KL, tuner, offload and async generation. What a row's framework does that
ms-swift expresses otherwise is mapped here, each rule in ``spec_of``'s docstring. The model predicts seconds per
optimizer step (ms-swift's global_step); a row measured per generation round is divided by the optimizer steps the
round feeds.

The split is the rows' own (``split``): ``fit`` and ``held_out`` frozen before any model existed (the README's rule),
``fresh`` collected and frozen after it, ``fresh2`` and ``fresh3`` frozen before the model's rounds 2 and 3; rows of
your own GPU (bench/gpu/, ``own_gpu``) come in with ``--rows``. The rollout's constants (grpo_ui/timing/efficiency.py)
and the completion-length prior (grpo_ui/timing/lengths.py) are fitted on the fit set only (``fit_set``: the fit rows
of a shape ms-swift can run), plus a user's own rows when given (``python bench/time_calibration.py --fit --rows
mine.jsonl``: rows ``python -m grpo_ui calibration export --only time`` writes, every one of them used for fitting
whatever its split); held-out and fresh rows never enter a fit. The training engines' efficiencies come from published
training-step times instead (bench/engine_calibration.py).

Baseline (what a user has without this model): one tokens-per-second-per-GPU figure, the median over the fit rows,
scaled by the step's tokens (completions × (prompt + mean completion)) and the job's GPUs.

The range a prediction carries (timing.report.RANGE_GIVEN / RANGE_ASSUMED, ``ranges``) is the model's error on runs
its fit has not seen. The rule, written down on 2026-11-28 before its effect on any held-out or fresh row was computed:
for each source of the fit set (the data README's source key, a row's ``source`` before " — "; each job of a user's
own rows is a source), the constants fitted here (``fit``: the length prior, the bandwidth, the generate() kernel,
the round overhead) are fitted again without that source's rows, and its rows are predicted with them
(leave-one-source-out). The range is the 10th and 90th percentile of measured ÷ predicted over those predictions:
length given, over the fit set's rows that publish their mean completion, predicted with it; length assumed, over
every fit-set row predicted as if it gave none (the prior refitted without the source too). So 8 in 10 of the fit
set's published runs, each predicted by the model fitted without its own source, fell within it, nominally (as
counted, with the interpolation between order statistics: timing.report.RANGE_WITHIN). The training
engines' efficiencies are not refitted per source: they come from other files (bench/engine_calibration.py), never
from these rows. Held-out and fresh rows never enter the range. (Before, the range was the same percentiles of the
fit rows predicted by the constants fitted on them: in-sample, narrower than the error on an unseen run.)
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

from bench import megatron_calibration
from grpo_ui.spec.model import JobSpec
from grpo_ui.spec.paths import with_changes
from grpo_ui.timing import efficiency, lengths
from grpo_ui.timing.inputs import TimeInputs, time_inputs
from grpo_ui.timing.predict import predict
from grpo_ui.timing.report import TimeReport

DATA = Path(__file__).parent.parent / "tests" / "data" / "time_measurements.jsonl"
LENGTHS = DATA.with_name("completion_lengths.jsonl")  # published response lengths of other runs (lengths.py)
SLEEPING_FRAMEWORKS = ("verl", "nemo-rl", "other:hai-llm")  # their colocated vLLM frees its memory for training
PACKING_FRAMEWORKS = ("verl", "nemo-rl", "other:hai-llm")  # they train on unpadded (packed) sequences


REQUIRED = ("id", "framework", "config", "measured", "split")
REQUIRED_CONFIG = ("model", "tuner", "gpu", "gpus_per_node", "trainer_gpus", "vllm", "prompts_per_step",
                   "num_generations", "max_completion_tokens", "optimizer_steps_per_generation")


class RowsError(ValueError):
    """A row file that cannot be read: the message names the file, the line and what to do."""


def load(path: Path = DATA) -> list[dict]:
    """The rows of a file in the schema of tests/data/time_measurements.jsonl (blank lines skipped); RowsError naming
    the file and line of one that is not JSON or lacks a field the prediction needs."""
    try:
        text = Path(path).read_text()
    except OSError as e:
        raise RowsError(f"{path}: cannot be read ({e.strerror}); give a file `python -m grpo_ui calibration export "
                        "--only time --out FILE` wrote") from None
    rows = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise RowsError(f"{path}, line {number}: not a JSON row ({e.msg}); one row per line, as `calibration "
                            "export` writes them") from None
        missing = [k for k in REQUIRED if k not in row] or [
            f"config.{k}" for k in REQUIRED_CONFIG if k not in (row.get("config") or {})] or (
            [] if "step_s" in (row.get("measured") or {}) else ["measured.step_s"])
        if missing:
            raise RowsError(f"{path}, line {number}: the row lacks {', '.join(missing)} (the schema: "
                            "tests/data/time_measurements.README.md)")
        rows.append(row)
    return rows


def _engine(c: dict) -> str | None:
    """ms-swift's sharding for the row: its ZeRO stage (with optimizer offload), FSDP, else ZeRO-3 for full tuning on
    several GPUs (what a full fine-tune of these sizes needs on ms-swift) and plain DDP for LoRA. (A row measured with
    Megatron-Core becomes a megatron rlhf job instead: spec_of.)"""
    offload = "optimizer" in str(c.get("offload") or "") and "rollout" not in str(c.get("offload"))
    if c.get("zero_stage") is not None:
        return f"zero{c['zero_stage']}" + ("_offload" if offload else "")
    if c.get("fsdp"):
        return "fsdp2"
    return "zero3" if c["tuner"] == "full" and c["trainer_gpus"] > 1 else None


def spec_of(row: dict, assume_length: bool = False) -> JobSpec:
    """The ms-swift job of the row's shape:

    - nodes: the trainer GPUs on as few nodes of gpus_per_node as hold them (evenly), the rollout GPUs likewise as
      rollout nodes (server mode, vLLM data parallel over a node's GPUs ÷ TP); no rollout GPUs: vLLM colocated (or
      generate() when the row has no vLLM);
    - batch: one generation round's completions (prompts × num_generations) over the trainer GPUs and the round's
      optimizer steps; gradient_accumulation_steps as the row's where a step spans several rounds (TRL before 0.18
      generated per micro-batch: steps_per_generation 1, a round each micro-step) or the row gives its micro-batch;
      padding_free where the framework packs sequences (verl's remove-padding, NeMo RL's packing, Megatron-SWIFT's
      padding_free); a bitsandbytes 4-bit model as quant_bits 4;
    - lengths: max_completion_length, max_length = the prompt cap; estimate.completion_tokens the published mean
      (NeMo RL's table: its 'G-Average Seq len'; none with ``assume_length``: the prior's, as for a user who gives
      none), estimate.prompt_tokens the published mean prompt;
    - beta as the row's (none given: 0); colocated vLLM sleeps (level 1) where the framework frees its memory for
      training (verl, NeMo RL), or at the row's sleep_level; the row's offload of the policy around rollout; async
      generation in server mode; the row's gradient checkpointing (unknown: ms-swift's default, on);
    - a row measured with Megatron-Core (NeMo RL, ms-swift's and verl's Megatron backends) as the megatron rlhf job of
      its TP/PP/CP/EP layout (bench/megatron_calibration.as_megatron)."""
    c, extra = row["config"], row["config"].get("extra", {})
    world, per_node = c["trainer_gpus"], c["gpus_per_node"]
    rounds = extra.get("generation_rounds_per_optimizer_step", 1)
    accumulation = extra.get("gradient_accumulation_steps", 1) if rounds > 1 or "completions_per_step" in extra else 1
    steps_per_generation = max(1, accumulation * c["optimizer_steps_per_generation"] // rounds)
    completions = c["prompts_per_step"] * c["num_generations"]  # one generation round's
    per_device = max(1, round(completions / (world * steps_per_generation)))
    tp = c.get("vllm_tp") or 1
    mean = None if assume_length else published_mean(row)
    offload = str(c.get("offload") or "")
    changes: dict = {
        "train.model": c["model"].split(" (")[0], "train.tuner_type": c["tuner"], "train.dataset": ["calibration"],
        "train.reward_funcs": ["accuracy"], "train.num_generations": c["num_generations"],
        "train.per_device_train_batch_size": per_device, "train.gradient_accumulation_steps": accumulation,
        "train.steps_per_generation": steps_per_generation, "train.max_completion_length": c["max_completion_tokens"],
        "train.num_iterations": c.get("num_iterations") or 1, "train.beta": c.get("beta") or 0.0,
        "train.gradient_checkpointing": c.get("gradient_checkpointing") is not False,
        "train.padding_free": row["framework"] in PACKING_FRAMEWORKS or bool(extra.get("padding_free")),
        "rollout.use_vllm": bool(c["vllm"]), "estimate.completion_tokens": mean,
        "estimate.prompt_tokens": c.get("mean_prompt_tokens")}
    if "bnb 4-bit" in str(extra.get("quantization")):
        changes["train.quant_bits"] = 4
    if c.get("lora_rank"):
        changes["train.lora_rank"] = c["lora_rank"]
    if c.get("max_prompt_tokens"):
        changes["train.max_length"] = c["max_prompt_tokens"]
    if _engine(c):
        changes["train.deepspeed" if _engine(c) != "fsdp2" else "train.fsdp"] = _engine(c)
    trainers = math.ceil(world / per_node)
    nodes = [{"host": f"t{n}", "gpus": list(range(world // trainers)), "gpu_model": c["gpu"]} for n in range(trainers)]
    if c.get("rollout_gpus"):
        servers = math.ceil(c["rollout_gpus"] / per_node)
        gpus = c["rollout_gpus"] // servers
        nodes += [{"host": f"r{n}", "role": "rollout", "gpus": list(range(gpus)), "gpu_model": c["gpu"]}
                  for n in range(servers)]
        changes.update({"rollout.vllm_mode": "server", "server.vllm_tensor_parallel_size": tp,
                        "server.vllm_data_parallel_size": max(gpus // tp, 1),
                        "rollout.async_generate": bool(c.get("async_generation")),
                        "server.vllm_gpu_memory_utilization": c.get("vllm_gpu_memory_utilization") or 0.9})
    elif c["vllm"]:
        sleep = extra.get("sleep_level", 1 if row["framework"] in SLEEPING_FRAMEWORKS else 0)
        changes.update({"rollout.vllm_mode": "colocate", "rollout.vllm_tensor_parallel_size": tp,
                        "rollout.vllm_gpu_memory_utilization": c.get("vllm_gpu_memory_utilization") or 0.9,
                        "rollout.sleep_level": sleep, "rollout.offload_model": "param" in offload,
                        "rollout.offload_optimizer": "param+optimizer" in offload})
    changes["cluster.nodes"] = nodes
    spec = with_changes(JobSpec(), changes)
    return megatron_calibration.as_megatron(row, spec) if megatron_calibration.time_row_layout(row) else spec


# The fit set: fit rows of a shape ms-swift can run. A row whose shape ms-swift cannot express stays in its split and
# is reported with the others, but no shared constant (efficiencies, the length prior, the ranges) is fitted on it,
# so that a behaviour the model has no term for cannot pull the terms it has. Decided by the row's configuration as
# its source documents it, never by its error; written down before its effect on any score was looked at.
def inexpressible(row: dict) -> str | None:
    """Why ms-swift cannot run a job of the row's shape, or None:

    - PPO with a critic: a value model's forwards and training (ms-swift's GRPO trainer has no critic);
    - an asynchronous rollout on Megatron-Core: megatron rlhf refuses async_generate, so ms-swift would run the job
      on-policy, generation and training one after the other (NeMo RL's one-step-off rows);
    - verl's fully asynchronous mode (its table's fully_async_policy: streamed, partial rollouts trained up to several
      steps stale): ms-swift's async_generate overlaps one round at most.
    A one-step-off rollout on the DeepSpeed/FSDP path is what ms-swift's async_generate does in server mode: kept."""
    c = row["config"]
    if row.get("algorithm") == "ppo":
        return "PPO with a critic: a value model's forwards and training, which ms-swift's GRPO has not"
    if c.get("async_generation") and megatron_calibration.time_row_layout(row):
        return ("asynchronous rollout on Megatron-Core: megatron rlhf refuses async_generate (ms-swift would run it "
                "on-policy)")
    if c.get("async_generation") and "fully_async" in row.get("quote", ""):
        return ("verl's fully asynchronous rollout (streamed, partial, several steps stale): ms-swift's async_generate "
                "overlaps one round")
    return None


def fit_set(rows: list[dict], extra: list[dict] | None = None) -> list[dict]:
    """The rows the shared constants are fitted on: the fit split's rows ms-swift can run (``inexpressible``), plus
    every row of ``extra`` (a user's own, exported from ms-swift runs)."""
    return [r for r in rows if r["split"] == "fit" and not inexpressible(r)] + (extra or [])


def measured_step_s(row: dict) -> float:
    """Seconds per optimizer step: a generation round's seconds ÷ the optimizer steps it feeds."""
    m = row["measured"]
    per_round = m["per"] == "generation_round"
    return m["step_s"] / (row["config"]["optimizer_steps_per_generation"] if per_round else 1)


@dataclass(frozen=True)
class Result:
    row: dict
    measured: float
    inputs: TimeInputs
    report: TimeReport

    @property
    def ours(self) -> float:
        return self.report.step_s

    @property
    def step_tokens(self) -> float:
        """Tokens of one optimizer step's completions, prompts included (the baseline's measure of work)."""
        t = self.inputs
        return t.generation_batch / t.steps_per_round * (t.prompt_tokens + t.completion_tokens)

    @property
    def throughput(self) -> float:
        """Measured tokens per second per GPU."""
        return self.step_tokens / self.measured / self.inputs.total_gpus

    def baseline(self, tokens_per_gpu_s: float) -> float:
        return self.step_tokens / tokens_per_gpu_s / self.inputs.total_gpus

    @property
    def split(self) -> str:
        return self.row["split"]


def published_mean(row: dict) -> float | None:
    """The row's published mean completion (NeMo RL's 'G-Average Seq len' where that is all it gives), or None."""
    c = row["config"]
    return c.get("mean_completion_tokens") or c.get("extra", {}).get("g_average_seq_len")


def evaluate(row: dict, assume_length: bool = False) -> Result:
    """The row predicted (with ``assume_length``, as if its mean completion were not published); ValueError (the
    memory estimate's EstimateError) when the model cannot be (an architecture the catalogue cannot describe)."""
    t = time_inputs(spec_of(row, assume_length))
    return Result(row, measured_step_s(row), t, predict(t))


def evaluate_all(rows: list[dict], assume_length: bool = False) -> tuple[list[Result], list[tuple[dict, str]]]:
    """Every row predicted, and those that cannot be with why."""
    results, skipped = [], []
    for row in rows:
        try:
            results.append(evaluate(row, assume_length))
        except ValueError as e:
            skipped.append((row, str(e)))
    return results, skipped


def error(predicted: float, measured: float) -> float:
    """Absolute error in % of the measurement."""
    return abs(predicted - measured) / measured * 100


def stats(errors: list[float]) -> tuple[float, float]:
    """(median, p90) of absolute % errors; p90 by linear interpolation between order statistics."""
    if len(errors) == 1:
        return errors[0], errors[0]
    return statistics.median(errors), statistics.quantiles(errors, n=10, method="inclusive")[8]


def baseline_rate(fit: list[Result]) -> float:
    """The baseline's one figure: the median measured tokens per second per GPU over the fit rows."""
    return statistics.median(r.throughput for r in fit)


def published_lengths(fit_rows: list[dict], path: Path = LENGTHS) -> list[tuple[int, float]]:
    """(cap, mean) pairs the completion-length prior is fitted on: the given rows that publish a mean below their cap
    (a mean at the cap was forced there, not chosen by the model) and the response lengths of tests/data/
    completion_lengths.jsonl."""
    pairs = [(r["config"]["max_completion_tokens"], published_mean(r)) for r in fit_rows]
    pairs = [(cap, mean) for cap, mean in pairs if mean and mean < cap]
    published = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return pairs + [(r["cap"], r["mean"]) for r in published]


FILL_GRID = [round(0.10 + 0.02 * i, 2) for i in range(46)]  # 0.10 … 1.00
TYPICAL_GRID = list(range(300, 8001, 50))


def length_prior(fit_rows: list[dict]) -> tuple[float, int]:
    """(lengths.FILL, lengths.TYPICAL_TOKENS): the grid pair with the least mean |ln(prior ÷ published mean)| over
    ``published_lengths``."""
    pairs = published_lengths(fit_rows)

    def error(fill: float, typical: int) -> float:
        return statistics.fmean(abs(math.log(lengths.assumed_mean(cap, fill, typical) / mean)) for cap, mean in pairs)
    return min(((f, t) for f in FILL_GRID for t in TYPICAL_GRID), key=lambda p: error(*p))


PERCENTILES = (10, 90)  # the range's ends: these percentiles of measured ÷ predicted


def measured_range(results: list[Result]) -> tuple[float, float]:
    """PERCENTILES of measured ÷ predicted over ``results`` (linear interpolation between order statistics), rounded
    as timing.report holds them."""
    q = statistics.quantiles([r.measured / r.ours for r in results], n=100, method="inclusive")
    return round(q[PERCENTILES[0] - 1], 2), round(q[PERCENTILES[1] - 1], 2)


def source_key(row: dict) -> str:
    """The source a row comes from, as the data README's split rule keys it: its ``source`` before " — " (the rows
    of one page share it; an exported job's names the job)."""
    return row["source"].split(" — ")[0]


def out_of_sample(fit_rows: list[dict]) -> tuple[list[Result], list[Result]]:
    """Each row of ``fit_rows`` predicted by the constants ``fit_on`` fits on the rows of the other sources
    (leave-one-source-out): (predicted with its published mean completion where it gives one, predicted as if it
    gave none). The constants in grpo_ui.timing are left as they were."""
    kept, given, assumed = constants(), [], []
    try:
        for key in dict.fromkeys(map(source_key, fit_rows)):
            fit_on([r for r in fit_rows if source_key(r) != key])
            own = [r for r in fit_rows if source_key(r) == key]
            given += evaluate_all(own)[0]
            assumed += evaluate_all(own, assume_length=True)[0]
    finally:
        set_constants(kept)
    return given, assumed


def within(r: Result, given: tuple[float, float], assumed: tuple[float, float]) -> bool:
    """The row's measurement lies in the range ``given`` (its mean completion published) or ``assumed`` (not) puts
    around its prediction."""
    low, high = given if r.inputs.completion_given else assumed
    return low <= r.measured / r.ours <= high


UNSEEN_SPLITS = ("fresh", "fresh2", "fresh3")  # collected and frozen after the model was built, never fitted on


@dataclass(frozen=True)
class Ranges:
    """timing.report's RANGE_GIVEN, RANGE_ASSUMED and RANGE_WITHIN."""

    given: tuple[float, float]
    assumed: tuple[float, float]
    within: dict[str, tuple[int, int]]


def ranges(rows: list[dict], extra: list[dict] | None = None) -> Ranges:
    """The ranges by the module docstring's rule, over the out-of-sample predictions (``out_of_sample``) of
    ``fit_set(rows, extra)``: given, ``measured_range`` of the rows that publish their mean completion, predicted with
    it; assumed, of every row predicted with the length assumed (the prior's, as for a user who gives none), which
    adds the prior's own error. ``within``: (runs within, runs) of those two sets, and of the rows of UNSEEN_SPLITS of
    a shape ms-swift can run predicted by the constants as they are (how the range held on runs never fitted on:
    measured, never set, by them)."""
    given, assumed = out_of_sample(fit_set(rows, extra))
    given = [r for r in given if r.inputs.completion_given]
    low_high = measured_range(given), measured_range(assumed)
    unseen = [r for r in evaluate_all([r for r in rows if r["split"] in UNSEEN_SPLITS])[0] if not inexpressible(r.row)]

    def count(results: list[Result]) -> tuple[int, int]:
        return sum(within(r, *low_high) for r in results), len(results)
    return Ranges(*low_high, {"given": count(given), "assumed": count(assumed), "unseen": count(unseen)})


def in_sample_ranges(fit_rows: list[dict]) -> tuple[tuple[float, float], tuple[float, float]]:
    """The ranges by the rule they had before: ``measured_range`` over ``fit_rows`` predicted by the constants as they
    are (fitted on those rows), printed by bench/time_accuracy.py beside ``ranges`` to show what it changed."""
    given = [r for r in evaluate_all(fit_rows)[0] if r.inputs.completion_given]
    return measured_range(given), measured_range(evaluate_all(fit_rows, assume_length=True)[0])


FITTED = ("BANDWIDTH_EFFICIENCY", "GENERATE_KERNEL_S", "ROUND_OVERHEAD_S")
GRID = {"BANDWIDTH_EFFICIENCY": [0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9],
        "GENERATE_KERNEL_S": [5e-6, 10e-6, 15e-6, 20e-6, 30e-6, 40e-6, 60e-6, 80e-6, 120e-6],
        "ROUND_OVERHEAD_S": [0.0, 1.0, 2.0, 4.0, 6.0, 8.0]}


def log_error(cases: list[tuple[TimeInputs, float]]) -> float:
    """The fit's objective over (inputs, measured seconds) pairs: mean |ln(predicted ÷ measured)| (a factor too fast
    costs what a factor too slow does)."""
    return statistics.fmean(abs(math.log(predict(t).step_s / measured)) for t, measured in cases)


def constants() -> dict[str, float]:
    """The fitted constants as the model holds them now."""
    return {**{name: getattr(efficiency, name) for name in FITTED}, "FILL": lengths.FILL,
            "TYPICAL_TOKENS": lengths.TYPICAL_TOKENS}


def set_constants(values: dict[str, float]) -> None:
    """Put ``constants()``' values into grpo_ui.timing."""
    for name in FITTED:
        setattr(efficiency, name, values[name])
    lengths.FILL, lengths.TYPICAL_TOKENS = values["FILL"], values["TYPICAL_TOKENS"]


def fit(rows: list[dict], extra: list[dict] | None = None, rounds: int = 3) -> dict[str, float]:
    """``fit_on`` the fit set (``fit_set(rows, extra)``: the fit rows ms-swift can run, plus every row of a user's
    own)."""
    return fit_on(fit_set(rows, extra), rounds)


def fit_on(fit_rows: list[dict], rounds: int = 3) -> dict[str, float]:
    """The length prior (``length_prior``), then coordinate descent over GRID on ``fit_rows``: each efficiency in
    turn set to the grid value with the least log_error, ``rounds`` times over. Leaves the constants in grpo_ui.timing
    at the best values and returns them."""
    lengths.FILL, lengths.TYPICAL_TOKENS = length_prior(fit_rows)
    cases = [(r.inputs, r.measured) for r in evaluate_all(fit_rows)[0]]  # the inputs do not depend on GRID's constants
    for _ in range(rounds):
        for name in FITTED:
            best = min(GRID[name], key=lambda v, n=name: (setattr(efficiency, n, v), log_error(cases))[1])
            setattr(efficiency, name, best)
    return constants()


def split_errors(rows: list[dict], extra: list[dict]) -> dict[str, tuple[int, float, float]]:
    """Split → (rows predicted, median, p90 absolute % error) under the constants as they are now."""
    parts = {"fit": [r for r in rows if r["split"] == "fit"], "held out (seen)": [
        r for r in rows if r["split"] == "held_out"], "fresh": [r for r in rows if r["split"] == "fresh"],
        "fresh, round 2": [r for r in rows if r["split"] == "fresh2"],
        "fresh, round 3": [r for r in rows if r["split"] == "fresh3"]}
    if extra:
        parts["your rows"] = extra
    out = {}
    for name, part in parts.items():
        results = evaluate_all(part)[0]
        if results:
            out[name] = (len(results), *stats([error(r.ours, r.measured) for r in results]))
    return out


def main(argv: list[str]) -> int:
    """``--fit [--rows FILE …]``: refit the constants on the fit rows plus the rows of each FILE (a user's exported
    rows, every one used for fitting) and print them with each split's error before and after. The constants in
    grpo_ui/timing are not rewritten: copy the printed values there to keep them."""
    parser = argparse.ArgumentParser(prog="bench/time_calibration.py", description=main.__doc__)
    parser.add_argument("--fit", action="store_true", required=True, help="refit the constants")
    parser.add_argument("--rows", nargs="+", default=[], metavar="FILE",
                        help="your own rows (`python -m grpo_ui calibration export --only time --out FILE`)")
    files = parser.parse_args(argv).rows
    try:
        extra = [row for path in files for row in load(Path(path))]
    except RowsError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    rows = load()
    before, errors_before = constants(), split_errors(rows, extra)
    after = fit(rows, extra)
    errors_after = split_errors(rows, extra)
    found = ranges(rows, extra)
    print(f"refit on {len(fit_set(rows))} published fit rows (the fit split's rows ms-swift can run)"
          + (f" + {len(extra)} of yours ({', '.join(files)})" if extra else "") + "\n")
    print(f"{'constant':<22} {'before':>10} {'after':>10}")
    for name in after:
        print(f"{name:<22} {before[name]:>10g} {after[name]:>10g}")
    print(f"\n{'absolute % error':<22} {'n':>3}  {'before: median   p90':<22} {'after: median   p90'}")
    for name, (n, median, p90) in errors_after.items():
        b = errors_before[name]
        print(f"{name:<22} {n:>3}  {b[1]:>14.0f} {b[2]:>6.0f}   {median:>13.0f} {p90:>6.0f}")
    print(f"\nrange (measured ÷ predicted, {PERCENTILES[0]}th-{PERCENTILES[1]}th percentile, each fit source predicted by "
          f"the constants fitted without it): length given {found.given[0]:.2f}-{found.given[1]:.2f}, assumed "
          f"{found.assumed[0]:.2f}-{found.assumed[1]:.2f}; runs within it (within, runs): {found.within}")
    print("to keep them: set the constants in grpo_ui/timing/efficiency.py and lengths.py, the ranges (RANGE_GIVEN, "
          "RANGE_ASSUMED, RANGE_WITHIN) in grpo_ui/timing/report.py")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
