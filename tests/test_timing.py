"""The step-time model (grpo_ui.timing): each phase against a hand-worked example, the directions a practitioner
relies on (longer completions, more generations, a slower GPU, more waves take longer; TP vs DP; colocate vs server;
async), the CLI's contract, and the constants the fit rows give. bench/time_accuracy.py measures its error against
published step times; here only what must hold whatever the data."""

from __future__ import annotations

import hashlib
import json
import math
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from bench.time_calibration import (
    FITTED,
    RowsError,
    constants,
    evaluate_all,
    fit,
    fit_set,
    inexpressible,
    length_prior,
    load,
    out_of_sample,
    ranges,
    source_key,
)
from grpo_ui.knowledge.catalog import find_model
from grpo_ui.spec.model import JobSpec
from grpo_ui.spec.paths import with_changes
from grpo_ui.spec.yaml_io import spec_to_yaml
from grpo_ui.timing import efficiency as eff
from grpo_ui.timing import lengths
from grpo_ui.timing.inputs import NoTimeEstimate, time_inputs
from grpo_ui.timing.predict import predict, predict_spec
from grpo_ui.timing.report import PHASES, RANGE_ASSUMED, RANGE_GIVEN, RANGE_WITHIN

ROOT = Path(__file__).parent.parent
H100 = [{"host": "n0", "gpus": list(range(8)), "gpu_model": "NVIDIA H100 80GB HBM3"}]
# Qwen2.5-7B: the catalogue's count (checked against the published 7.62 B in test_catalog); its input embedding is
# 152064 × 3584 (untied), so a token multiplies by P − that.
P = find_model("Qwen2.5-7B").total_params()
MATMUL = P - 152064 * 3584
KV_TOKEN = 2 * 28 * 4 * 128 * 2  # K and V × layers × KV heads × head_dim × 2 bytes
PEAK, HBM, NVLINK_ONE_WAY, PCIE = 989.5e12, 3350e9, 450e9, 64e9  # H100 SXM datasheet (gpus.yaml)
BASE = {"train.model": "Qwen/Qwen2.5-7B-Instruct", "train.tuner_type": "full", "train.deepspeed": "zero3",
        "train.per_device_train_batch_size": 4, "train.steps_per_generation": 4, "train.num_generations": 8,
        "train.max_completion_length": 1024, "train.beta": 0.04, "train.dataset": ["d.jsonl"],
        "train.reward_funcs": ["accuracy"], "rollout.use_vllm": True, "rollout.vllm_mode": "colocate",
        "rollout.vllm_gpu_memory_utilization": 0.5, "rollout.sleep_level": 1, "estimate.completion_tokens": 512,
        "estimate.prompt_tokens": 256, "cluster.nodes": H100}


def job(**changes) -> JobSpec:
    return with_changes(JobSpec(), {**BASE, **{k.replace("__", "."): v for k, v in changes.items()}})


def per_round(report) -> dict[str, float]:
    return {k: v * report.steps_per_round for k, v in report.phases.items()}


def harmonic(n: float) -> float:
    return math.log(n) + 0.5772 + 1 / (2 * n)


def test_each_phase_of_a_colocated_round_worked_by_hand():
    """8 × H100, Qwen2.5-7B full with ZeRO-3, colocated vLLM TP 1 at 0.5, micro-batch 4 × 4 steps per generation,
    8 generations, completions of 512 tokens on average (cap 1024), prompts of 256, a reference model, sleep level 1."""
    r = predict_spec(job())
    got = per_round(r)
    infer_peak, train_peak, bw = PEAK * eff.INFERENCE_MFU, PEAK * eff.TRANSFORMERS_MFU, HBM * eff.BANDWIDTH_EFFICIENCY
    weights = P * 2
    # rollout: 4 × 8 × 4 = 128 completions on 8 engines = 16 each. KV budget 0.5 × 79.65 GiB − weights − 0.5 GiB holds
    # hundreds of 768-token sequences, max_num_seqs = 4 × 1 × 4 = 16: one wave of 16. The longest of 16 completions
    # of mean 512 (512 · H16 = 1731) is capped at 1024: 512 + (1024 − 512) = 1024 decoding steps at a mean batch of
    # 16 · 512 / 1024 = 8 sequences of 256 + 256 context; memory-bound (15 GB vs 0.1 TFLOP per step), plus vLLM's
    # fixed cost per step. Prefix caching computes each of the 2 prompts once for its 8 completions; chunked prefill
    # puts that compute into the idle compute of the 1024 memory-bound steps, so nothing is left to add.
    read = weights + 8 * 512 * KV_TOKEN
    compute = 8 * (2 * MATMUL + 4 * 28 * 512 * 3584) / infer_peak
    step = max(read / bw, compute) + eff.DECODE_STEP_S
    prefill = 2 * 256 * (2 * MATMUL + 4 * 28 * 128 * 3584) / infer_peak
    assert prefill < 1024 * (read / bw - compute)
    assert got["rollout"] == pytest.approx(1024 * step, rel=1e-3)
    assert r.details["waves"] == 1 and r.details["longest_completion"] == 1024
    # log-probs: 4 micro-batches of 4 sequences per rank, padded to the longest of 4 (512 · H4 = 1069 → 1024): 1280
    # tokens, a forward each (2 · MATMUL + attention over 640 on average) at transformers' training efficiency, plus
    # ZeRO-3's gather of the weights.
    gather = weights * 7 / 8 / NVLINK_ONE_WAY
    tokens = 4 * 1280
    forward = tokens * (2 * MATMUL + 4 * 28 * 640 * 3584) / train_peak
    assert got["old_logprobs"] == pytest.approx(4 * (forward + gather), rel=1e-3)
    assert got["ref_logprobs"] == pytest.approx(got["old_logprobs"], rel=1e-9)  # the reference: the same model
    # training: per micro-step forward + backward (×2) + recomputation = 4 passes of 2 · MATMUL, attention 4 times;
    # ZeRO-3 adds two gathers and a reduce-scatter of the 16-bit gradients (no prefetch: not hidden). Four optimizer
    # steps per round, AdamW on 1/8 of the parameters at 28 B each.
    micro = tokens * (8 * MATMUL + 4 * 4 * 28 * 640 * 3584) / train_peak + 3 * gather
    adam = P / 8 * 28 / bw
    assert got["train"] == pytest.approx(4 * micro + 4 * adam, rel=1e-3)
    # weight sync (ms-swift's colocated path): gather, then vLLM's load_weights copies the bytes (read and write) and
    # handles 28 layers × (7 linears + 3 q/k/v biases + 2 norms) + embedding, final norm and lm_head = 339 tensors
    assert got["weight_sync"] == pytest.approx(gather + 2 * weights / bw + 339 * eff.LOAD_TENSOR_S, rel=1e-3)
    # sleep level 1: vLLM's weights to host memory and back over PCIe Gen5, plus the re-mapping
    assert got["sleep_wake"] == pytest.approx(2 * weights / PCIE + eff.SLEEP_WAKE_S, rel=1e-3)
    assert got["offload"] == 0 and got["reward"] == 0 and got["overhead"] == eff.ROUND_OVERHEAD_S
    assert r.steps_per_round == 4 and r.step_s == pytest.approx(sum(got.values()) / 4)
    assert sum(r.phases.values()) == pytest.approx(r.step_s)


def test_generate_without_vllm_worked_by_hand():
    """transformers' generate(): each GPU decodes its 16 completions together until the longest (cap 1024) ends,
    reading all its weights each step plus GENERATE_KERNEL_S for each kernel its eager layers launch (34 per layer
    of a dense full-tuned model); every prompt is prefilled (no prefix cache); ZeRO-3 gathers the model first."""
    r = predict_spec(job(rollout__use_vllm=False, rollout__vllm_mode=None, rollout__sleep_level=0))
    weights, bw = P * 2, HBM * eff.BANDWIDTH_EFFICIENCY
    longest = 1024  # 512 · H16 capped
    read = weights + 16 * (256 + longest / 2) * KV_TOKEN
    step = max(read / bw, 16 * (2 * MATMUL + 4 * 28 * 768 * 3584) / (PEAK * eff.INFERENCE_MFU)) + (
        28 * 34 * eff.GENERATE_KERNEL_S)
    prefill = 16 * 256 * (2 * MATMUL + 4 * 28 * 128 * 3584) / (PEAK * eff.INFERENCE_MFU)
    gather = weights * 7 / 8 / NVLINK_ONE_WAY
    assert per_round(r)["rollout"] == pytest.approx(gather + prefill + longest * step, rel=1e-3)
    assert per_round(r)["weight_sync"] == 0 and per_round(r)["sleep_wake"] == 0


def test_server_mode_sends_weights_over_the_network_and_async_hides_generation():
    """6 trainer GPUs + a 2-GPU rollout node (ms-swift's grpo_7b.sh layout): the whole model crosses the network at
    cluster.internode_gbs each round; async_generate overlaps generation with training, so the round is the longer
    of the two plus the sync."""
    nodes = [{"host": "t", "gpus": list(range(6)), "gpu_model": "H100"},
             {"host": "r", "role": "rollout", "gpus": [0, 1], "gpu_model": "H100"}]
    server = dict(rollout__vllm_mode="server", rollout__sleep_level=0, server__vllm_data_parallel_size=2,
                  cluster__nodes=nodes, train__steps_per_generation=2, cluster__internode_gbs=50.0)
    sync = per_round(predict_spec(job(**server)))
    overlapped = predict_spec(job(**server, rollout__async_generate=True))
    # ms-swift's server path: gather, flatten each 512 MiB bucket (a copy), 29 buckets of one request each over the
    # network, then the server's load_weights (a copy and 339 tensors)
    gather = P * 2 * 5 / 6 / NVLINK_ONE_WAY
    copies = 2 * (2 * P * 2) / (HBM * eff.BANDWIDTH_EFFICIENCY) + 339 * eff.LOAD_TENSOR_S + 29 * eff.SYNC_REQUEST_S
    assert math.ceil(P * 2 / 2 ** 29) == 29
    assert sync["weight_sync"] == pytest.approx(gather + P * 2 / 50e9 + copies, rel=1e-3)
    trainer_side = sum(v for k, v in sync.items() if k not in ("rollout", "weight_sync"))
    assert overlapped.round_s == pytest.approx(max(sync["rollout"], trainer_side) + sync["weight_sync"], rel=1e-6)
    assert overlapped.round_s < sum(sync.values())
    assert overlapped.gpus == 8
    # the same servers on the trainer's node (ms-swift's grpo_7b.sh layout): the weights cross NVLink instead
    local = [{**nodes[0], "host": "gpu-a"}, {**nodes[1], "host": "gpu-a"}]
    inside = per_round(predict_spec(job(**{**server, "cluster__nodes": local})))
    assert inside["weight_sync"] == pytest.approx(gather + P * 2 / NVLINK_ONE_WAY + copies, rel=1e-3)
    assert not any("internode_gbs" in a for a in predict_spec(job(**{**server, "cluster__nodes": local})).assumptions)


def step(**changes) -> float:
    return predict_spec(job(**changes)).step_s


def rollout_s(**changes) -> float:
    return per_round(predict_spec(job(**changes)))["rollout"]


def test_longer_completions_more_generations_and_a_slower_gpu_take_longer():
    assert step(estimate__completion_tokens=900) > step() > step(estimate__completion_tokens=200)
    assert step(train__max_completion_length=4096, estimate__completion_tokens=None) > step(
        estimate__completion_tokens=None)
    assert step(train__num_generations=16, train__per_device_train_batch_size=8) > step()
    a100 = [{**H100[0], "gpu_model": "NVIDIA A100-SXM4-80GB"}]
    assert step(cluster__nodes=a100) > step()


def test_more_waves_take_longer():
    """A smaller KV budget (lower vllm_gpu_memory_utilization) or a lower vllm_max_num_seqs runs the round in more
    waves."""
    big = dict(train__per_device_train_batch_size=16, estimate__completion_tokens=900, train__max_completion_length=2048)
    roomy = predict_spec(job(**big, rollout__vllm_gpu_memory_utilization=0.6))
    tight = predict_spec(job(**big, rollout__vllm_gpu_memory_utilization=0.22))
    assert tight.details["waves"] > roomy.details["waves"]
    assert per_round(tight)["rollout"] > per_round(roomy)["rollout"]
    capped = predict_spec(job(**big, rollout__vllm_gpu_memory_utilization=0.6, rollout__vllm_max_num_seqs=8))
    assert capped.details["waves"] > roomy.details["waves"] and per_round(capped)["rollout"] > per_round(roomy)["rollout"]


def test_tensor_vs_data_parallel_rollout():
    """Small batches are memory-bound: TP 2 halves each engine's weight reads, so it decodes faster than two TP-1
    engines with half the batch each only when reading dominates … and a large model whose weights leave no room for
    the KV cache at TP 1 runs many waves there, which TP 2 avoids."""
    small = dict(train__per_device_train_batch_size=1, train__steps_per_generation=1)
    assert rollout_s(**small, rollout__vllm_tensor_parallel_size=2) < rollout_s(**small)
    nodes = [{**H100[0], "gpu_model": "NVIDIA A100-SXM4-40GB"}]
    crowded = dict(train__model="Qwen/Qwen2.5-14B-Instruct", train__per_device_train_batch_size=16,
                   rollout__vllm_gpu_memory_utilization=0.9, estimate__completion_tokens=900,
                   train__max_completion_length=2048, cluster__nodes=nodes)
    tp1 = predict_spec(job(**crowded))
    tp2 = predict_spec(job(**crowded, rollout__vllm_tensor_parallel_size=2))
    assert tp1.details["waves"] > tp2.details["waves"] and per_round(tp1)["rollout"] > per_round(tp2)["rollout"]
    # a big round of a small model is compute-bound: data parallel (TP 1, twice the engines) is faster
    busy = dict(train__model="Qwen/Qwen2.5-0.5B-Instruct", train__per_device_train_batch_size=64,
                train__steps_per_generation=8, rollout__vllm_max_num_seqs=512)
    assert rollout_s(**busy) < rollout_s(**busy, rollout__vllm_tensor_parallel_size=2)


def test_colocate_vs_server():
    """Moving generation from all 8 training GPUs to 2 rollout GPUs (same 8 in all) makes the rollout slower and sends
    the weights over the network, but the trainers no longer sleep/wake vLLM."""
    colocated = per_round(predict_spec(job(cluster__nodes=H100)))
    nodes = [{"host": "t", "gpus": list(range(6)), "gpu_model": "H100"},
             {"host": "r", "role": "rollout", "gpus": [0, 1], "gpu_model": "H100"}]
    server = per_round(predict_spec(job(rollout__vllm_mode="server", rollout__sleep_level=0, cluster__nodes=nodes,
                                        server__vllm_data_parallel_size=2, train__steps_per_generation=4)))
    assert server["rollout"] > colocated["rollout"]
    assert server["weight_sync"] > colocated["weight_sync"]
    assert server["sleep_wake"] == 0 < colocated["sleep_wake"]


def test_lora_reference_ms_swift_versions_and_offload():
    lora = per_round(predict_spec(job(train__tuner_type="lora", train__deepspeed=None)))
    full = per_round(predict_spec(job()))
    assert lora["train"] < full["train"]  # no weight gradients, no ZeRO-3 collectives
    assert predict_spec(job(train__beta=0.0)).phases["ref_logprobs"] == 0
    # ms-swift 3.x computes the old policy's log-probs only off-policy (a round feeding several optimizer steps, or
    # num_iterations > 1); 4.x always
    on_policy = dict(swift_version="3.9", train__steps_per_generation=1)
    assert predict_spec(job(**on_policy)).phases["old_logprobs"] == 0
    assert predict_spec(job(**on_policy, train__num_iterations=2)).phases["old_logprobs"] > 0
    assert predict_spec(job(swift_version="3.9")).phases["old_logprobs"] > 0
    assert predict_spec(job(train__steps_per_generation=1)).phases["old_logprobs"] > 0
    offloaded = per_round(predict_spec(job(rollout__offload_model=True, rollout__offload_optimizer=True)))
    assert offloaded["offload"] > 0
    # vllm_enable_lora syncs only the adapters
    adapters = per_round(predict_spec(job(train__tuner_type="lora", train__deepspeed=None,
                                          rollout__vllm_enable_lora=True)))
    assert adapters["weight_sync"] < lora["weight_sync"]


def test_reward_latency_and_reward_models():
    plain = per_round(predict_spec(job()))
    assert plain["reward"] == 0
    assert per_round(predict_spec(job(estimate__reward_latency_s=3.0)))["reward"] == pytest.approx(3.0)
    assert per_round(predict_spec(job(train__reward_model=["Qwen/Qwen2.5-1.5B-Instruct"])))["reward"] > 0


def test_steps_hours_gpu_hours_and_cost():
    """dataset #N rows × epochs ÷ prompts per round × optimizer steps per round; max_steps wins; unknown without
    either; cost only with a price."""
    spec = job(train__dataset=["AI-MO/NuminaMath-TIR#5000"], train__num_train_epochs=2,
               estimate__price_per_gpu_hour=2.0)
    r = predict_spec(spec)
    assert r.steps == math.ceil(2 * math.ceil(5000 / 16) * 4)  # 128 completions ÷ 8 = 16 prompts per round
    assert r.total_h == pytest.approx(r.steps * r.step_s / 3600)
    assert r.gpu_hours == pytest.approx(r.total_h * 8) and r.cost == pytest.approx(r.gpu_hours * 2.0)
    assert predict_spec(job(estimate__dataset_rows=1600)).steps == 3 * 100 * 4
    assert predict_spec(job(train__max_steps=50)).steps == 50
    unknown = predict_spec(job())
    assert unknown.steps is None and unknown.total_h is None and unknown.cost is None
    assert any("estimate.dataset_rows" in a for a in unknown.assumptions)
    assert predict_spec(job(train__max_steps=50, train__split_dataset_ratio=0.5)).steps == 50


def test_assumptions_name_the_field_that_changes_them():
    r = predict_spec(job(estimate__completion_tokens=None, estimate__prompt_tokens=None,
                         cluster__nodes=[*H100, {**H100[0], "host": "n1"}]))
    said = " ".join(r.assumptions)
    for path in ("estimate.completion_tokens", "estimate.prompt_tokens", "cluster.internode_gbs",
                 "estimate.price_per_gpu_hour", "estimate.dataset_rows"):
        assert path in said
    assert f"completions average {lengths.assumed_mean(1024):.0f} tokens of max_completion_length 1024" in said


def test_the_assumed_length_levels_off_for_long_caps():
    """With no mean given, a short cap is filled to lengths.FILL of it and a long one levels off near
    lengths.TYPICAL_TOKENS: a 28K cap is not assumed to average 18K tokens."""
    assert lengths.assumed_mean(128) == pytest.approx(lengths.FILL * 128, rel=0.02)
    caps = [256, 1024, 4096, 8192, 16384, 28672]
    means = [lengths.assumed_mean(cap) for cap in caps]
    assert means == sorted(means) and all(m < lengths.FILL * cap for m, cap in zip(means, caps, strict=True))
    assert means[-1] == pytest.approx(lengths.TYPICAL_TOKENS, rel=0.05)
    long = predict_spec(job(estimate__completion_tokens=None, train__max_completion_length=28672))
    assert long.details["mean_completion"] == pytest.approx(lengths.assumed_mean(28672))
    assert long.details["longest_completion"] == 28672  # the round still waits for the cap


def test_the_range_is_wider_when_the_length_is_assumed():
    given, assumed = predict_spec(job()), predict_spec(job(estimate__completion_tokens=None))
    assert given.range == pytest.approx((given.step_s * RANGE_GIVEN[0], given.step_s * RANGE_GIVEN[1]))
    assert assumed.range == pytest.approx((assumed.step_s * RANGE_ASSUMED[0], assumed.step_s * RANGE_ASSUMED[1]))
    assert RANGE_ASSUMED[1] / RANGE_ASSUMED[0] > RANGE_GIVEN[1] / RANGE_GIVEN[0]
    assert given.to_dict()["range"] == [round(x, 3) for x in given.range]


def test_a_gpu_without_speed_facts_gets_no_number_and_says_why():
    with pytest.raises(NoTimeEstimate, match="GPU model is not set"):
        time_inputs(job(cluster__nodes=[{"host": "localhost", "gpus": [0]}]))
    with pytest.raises(NoTimeEstimate, match="no speed facts"):
        time_inputs(job(cluster__nodes=[{"host": "a", "gpus": [0], "gpu_model": "NVIDIA A16"}]))


CALIBRATION = load()


FIT_ROWS = fit_set(CALIBRATION)


def test_the_fit_set_leaves_out_by_shape_what_ms_swift_cannot_run():
    """A row ms-swift cannot express (PPO's critic, an asynchronous rollout on Megatron-Core, verl's fully
    asynchronous mode) stays in its split but fits nothing; the decision reads the row's configuration, so a one-step-
    off row on the DeepSpeed/FSDP path (ms-swift's async_generate in server mode) and every on-policy row stay in."""
    left_out = {row["id"]: inexpressible(row) for row in CALIBRATION if inexpressible(row)}
    assert all(row["algorithm"] == "ppo" or row["config"]["async_generation"] for row in CALIBRATION
               if row["id"] in left_out)
    assert {row["id"] for row in CALIBRATION if row["algorithm"] == "ppo"} <= set(left_out)
    assert "verl-osop-7b-dapo-onestepoff-fsdp2-4+12xh20" not in left_out
    assert "verl-fa-7b-dapo-fullyasync-16-16xh20" in left_out
    assert {"nemo-v05-h100-llama31-8b-1off", "nemo-v05-h100-qwen3-32b-1off"} <= set(left_out)
    assert [r["id"] for r in FIT_ROWS] == [r["id"] for r in CALIBRATION
                                           if r["split"] == "fit" and r["id"] not in left_out]
    assert "Megatron-Core" in left_out["nemo-v05-h100-llama31-8b-1off"]


@pytest.mark.parametrize("split,count", [("fresh", 16), ("fresh2", 12), ("fresh3", 3)])
def test_the_fresh_rows_are_as_frozen(split, count):
    """Each round's fresh rows were committed before the model was changed or run on them; they stay byte-for-byte as
    the data README's sha256 says (its 'Fresh rows' sections: the split's lines in file order, each ending in a
    newline), so the out-of-sample figures cannot drift."""
    lines = [line for line in (ROOT / "tests/data/time_measurements.jsonl").read_text().splitlines()
             if line.strip() and json.loads(line)["split"] == split]
    digest = hashlib.sha256(("\n".join(lines) + "\n").encode()).hexdigest()
    assert len(lines) == count and digest in (ROOT / "tests/data/time_measurements.README.md").read_text()


def test_the_engine_rows_are_as_frozen_and_split_by_the_memory_rows_rule():
    """tests/data/engine_measurements.jsonl stays byte-for-byte as its README says, and each row's split is the one
    the memory rows' rule gives its source (bench/calibration.held_out), decided before any constant was set."""
    from bench.calibration import held_out
    path = ROOT / "tests/data/engine_measurements.jsonl"
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    assert digest in (ROOT / "tests/data/engine_measurements.README.md").read_text()
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    assert [r["split"] for r in rows] == ["held_out" if held_out(r) else "fit" for r in rows]
    assert {r["engine"] for r in rows} == {"deepspeed", "megatron"}


def test_a_row_file_that_cannot_be_read_names_the_file_and_the_line(tmp_path):
    bad = tmp_path / "mine.jsonl"
    bad.write_text(json.dumps(CALIBRATION[0]) + "\n\n{not json\n")
    with pytest.raises(RowsError, match=r"mine.jsonl, line 3: not a JSON row"):
        load(bad)
    bad.write_text(json.dumps({**CALIBRATION[0], "measured": {"per": "optimizer_step"}}) + "\n")
    with pytest.raises(RowsError, match=r"mine.jsonl, line 1: the row lacks measured.step_s"):
        load(bad)
    with pytest.raises(RowsError, match=r"absent.jsonl: cannot be read"):
        load(tmp_path / "absent.jsonl")


def test_the_ranges_and_the_length_prior_are_what_the_fit_rows_give():
    """timing.report's ranges are the 10th-90th percentiles of measured ÷ predicted over the fit set's rows, each
    predicted by the constants fitted without its source (length given: the rows that publish it; assumed: every
    fit-set row predicted without it), RANGE_WITHIN how many of those and of the fresh rows fall within them,
    timing.lengths' prior the pair that best fits the fit rows' published means and tests/data/completion_lengths.jsonl;
    re-derive them (bench/time_calibration.py --fit prints them) when the rows or the model change."""
    found = ranges(CALIBRATION)
    assert (RANGE_GIVEN, RANGE_ASSUMED, RANGE_WITHIN) == (found.given, found.assumed, found.within)
    assert (lengths.FILL, lengths.TYPICAL_TOKENS) == length_prior(FIT_ROWS)


def test_a_sources_rows_are_predicted_by_constants_fitted_without_them():
    """The ranges' predictions are out of sample: with one source's rows measured ten times slower, its own rows'
    predictions stay as they were (fitted without them) while other sources' move (fitted with them); the constants
    in grpo_ui.timing are left as they were."""
    before = constants()
    given, _ = out_of_sample(FIT_ROWS)
    coursia = source_key(next(r for r in FIT_ROWS if r["id"].startswith("coursia-qwen3-14b")))
    slowed = [{**r, "measured": {**r["measured"], "step_s": r["measured"]["step_s"] * 10}}
              if source_key(r) == coursia else r for r in FIT_ROWS]
    again, _ = out_of_sample(slowed)
    assert constants() == before
    own = [(a.ours, b.ours) for a, b in zip(given, again, strict=True) if source_key(a.row) == coursia]
    assert len(own) == 4 and all(a == b for a, b in own)
    assert any(a.ours != b.ours for a, b in zip(given, again, strict=True) if source_key(a.row) != coursia)


def test_the_efficiencies_are_the_fit_rows_best(monkeypatch):
    """efficiency's and lengths' fitted constants are what bench/time_calibration.fit finds on the fit rows (the
    held-out and fresh rows never enter it); re-run `python bench/time_calibration.py --fit` after changing the model
    or the rows."""
    for name in FITTED:  # fit() leaves its result in the modules: restore it after
        monkeypatch.setattr(eff, name, getattr(eff, name))
    monkeypatch.setattr(lengths, "FILL", lengths.FILL)
    monkeypatch.setattr(lengths, "TYPICAL_TOKENS", lengths.TYPICAL_TOKENS)
    frozen = {**{name: getattr(eff, name) for name in FITTED}, "FILL": lengths.FILL,
              "TYPICAL_TOKENS": lengths.TYPICAL_TOKENS}
    assert fit(CALIBRATION) == frozen


def test_the_training_efficiencies_are_what_the_engine_fit_rows_give():
    """efficiency's per-engine training constants are the medians bench/engine_calibration.derive finds on the fit
    rows of tests/data/engine_measurements.jsonl and megatron_measurements.jsonl (each row's value that reproduces its
    s/it); the inference engines' share is transformers' (the same dense GEMMs)."""
    from bench.engine_calibration import derive
    values, per_row = derive()
    assert values == {name: getattr(eff, name) for name in values}
    assert all(per_row[name] for name in values)  # every constant rests on at least one fit row
    assert eff.INFERENCE_MFU == eff.TRANSFORMERS_MFU


def test_zero3_hides_its_gathers_only_when_it_prefetches():
    """ms-swift's GRPO zeroes ZeRO-3's prefetch bucket, so a micro-step's gathers and reduce-scatter add to its
    compute; with a prefetch bucket (swift sft's 'auto') they overlap it: the round is shorter by the smaller of the
    two on every micro-step."""
    from grpo_ui.timing.training import micro_step_s, train_s
    t = time_inputs(job())
    assert t.mem.stage == 3 and t.mem.zero3_prefetch == 0
    prefetching = replace(t, mem=replace(t.mem, zero3_prefetch=0.9 * t.mem.arch.hidden_size ** 2))
    compute, comm = micro_step_s(t)
    micro = t.steps_per_generation * t.iterations
    assert train_s(t) - train_s(prefetching) == pytest.approx(micro * min(compute, comm))


def test_every_calibration_row_but_an_unmodelled_architecture_is_predicted():
    results, skipped = evaluate_all(CALIBRATION)
    assert [row["id"] for row, _ in skipped] == ["deepseek-r1-zero-v3-base-512xh800"]  # MLA: not a ModelArch
    assert all(r.ours > 0 and sum(r.report.phases.values()) == pytest.approx(r.ours) for r in results)


def cli(path, *args):
    return subprocess.run([sys.executable, "-m", "grpo_ui", "estimate", str(path), *args], capture_output=True,
                          text=True, cwd=ROOT, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin",
                                                    "GRPO_UI_HOME": str(path.parent)})


def test_cli_contract(tmp_path):
    """`estimate job.yaml --gpu NAME --json` has a top-level "time": step_s, phases_s adding up to it, steps, total_h,
    gpu_hours, cost, range; --completion-tokens, --steps and --price set what they say; the text prints the same."""
    path = tmp_path / "job.yaml"
    path.write_text(spec_to_yaml(job(estimate__completion_tokens=None, cluster__nodes=[
        {"host": "localhost", "gpus": list(range(8))}])))
    out = json.loads(cli(path, "--gpu", "H100", "--json").stdout)["time"]
    assert set(out) == {"step_s", "phases_s", "steps", "total_h", "gpu_hours", "cost", "range", "range_share",
                        "range_meaning"}
    within, runs = RANGE_WITHIN["assumed"]
    assert out["range_share"] == round(within / runs, 2)
    assert out["range_meaning"].startswith(f"{within} of the {runs} published GRPO runs the model is fitted on measured")
    assert "as if its completion length were unknown" in out["range_meaning"]
    assert isinstance(out["step_s"], float) and set(out["phases_s"]) == set(PHASES)
    assert sum(out["phases_s"].values()) == pytest.approx(out["step_s"], abs=0.01)
    assert out["steps"] is None and out["total_h"] is None and out["cost"] is None
    low, high = out["range"]
    assert low < out["step_s"] < high
    given = json.loads(cli(path, "--gpu", "H100", "--json", "--completion-tokens", "300", "--steps", "200",
                           "--price", "3").stdout)["time"]
    assert given["step_s"] < out["step_s"] and given["steps"] == 200
    assert given["total_h"] == pytest.approx(200 * given["step_s"] / 3600, rel=5e-3)
    assert given["gpu_hours"] == pytest.approx(given["total_h"] * 8, rel=5e-3)
    assert given["cost"] == pytest.approx(given["gpu_hours"] * 3, rel=5e-3)
    within, runs = RANGE_WITHIN["given"]
    assert given["range_meaning"].startswith(f"{within} of the {runs} published GRPO runs the model is fitted on that "
                                             "give their completion length")
    assert "unknown" not in given["range_meaning"] and given["range_share"] == round(within / runs, 2)
    text = cli(path, "--gpu", "H100", "--completion-tokens", "300", "--steps", "200", "--price", "3").stdout
    assert f"{given['phases_s']['rollout']:.2f} s" in text and "200 steps" in text and "GPU-hours on 8 GPUs" in text
    assert f"range: {given['range_meaning']}" in text


def test_cli_on_a_cpu_host_says_why_there_is_no_time(tmp_path):
    path = tmp_path / "job.yaml"
    path.write_text(spec_to_yaml(job(cluster__nodes=[{"host": "localhost", "gpus": [0], "gpu_memory_gib": 16.0}])))
    done = cli(path, "--json")
    assert done.returncode in (0, 1)
    assert json.loads(done.stdout)["time"] == {"error": "no step time: the trainer nodes' GPU model is not set; "
                                               "choose it (cluster.nodes[0].gpu_model) from the catalogue"}
    assert "no step time: the trainer nodes' GPU model is not set" in cli(path).stdout


def test_every_speed_fact_has_a_source_or_says_why_not():
    from grpo_ui.knowledge.catalog import gpus
    fast = [g for g in gpus().values() if g.has_speed]
    assert len(fast) >= 36
    assert all(g.speed_source or g.name in ("NVIDIA L20", "NVIDIA H20") for g in fast)
    assert all(g.tflops_bf16 > 0 and g.hbm_gbs > 0 and g.pcie_gbs > 0 for g in fast)


def test_the_inputs_follow_ms_swift_s_batch():
    t = time_inputs(job())
    assert (t.generation_batch, t.replicas, t.max_num_seqs, t.steps_per_round) == (128, 8, 16, 4)
    r = predict(t)
    assert r.gpus == 8


def test_the_launch_plan_carries_the_prediction_and_the_store_keeps_it(tmp_path):
    """LaunchPlan.time is the CLI's time object with its assumptions (or why there is none), stored with the job
    for Monitor and History to compare with the measured pace."""
    from grpo_ui.jobs.store import Store, TimeAtLaunch
    from grpo_ui.launch.plan import make_plan

    spec = job(estimate__dataset_rows=1600)
    plan = make_plan(spec, "t-1")
    report = predict_spec(spec)
    assert plan.time == {**report.to_dict(), "assumptions": report.assumptions}
    store = Store(tmp_path / "jobs.db")
    store.set_time_estimate("t-1", TimeAtLaunch(plan.time))
    assert store.time_estimate("t-1") == TimeAtLaunch(json.loads(json.dumps(plan.time)))
    cpu = make_plan(job(cluster__nodes=[{"host": "localhost", "gpus": [0], "gpu_memory_gib": 80.0}]), "t-2")
    assert cpu.time == {"error": "no step time: the trainer nodes' GPU model is not set; choose it "
                                 "(cluster.nodes[0].gpu_model) from the catalogue"}


def test_every_published_row_outside_the_band_says_why():
    """No published row is predicted under −50 % or over +100 % without a stated reason (its own 'reason' or
    bench/time_accuracy.REASONS): a model change that pushes a row out must say why or be fixed."""
    from bench.time_accuracy import unexplained
    assert [r.row["id"] for r in unexplained(evaluate_all(CALIBRATION)[0])] == []


def test_a_multi_turn_round_waits_for_the_environment_once_per_turn():
    multi = dict(train__multi_turn_scheduler="thinking_tips_scheduler", train__max_turns=4)
    silent = predict_spec(job(**multi))
    assert any("env_seconds_per_turn" in a for a in silent.assumptions)
    timed = per_round(predict_spec(job(**multi, estimate__env_seconds_per_turn=2.5)))
    assert timed["rollout"] == pytest.approx(per_round(silent)["rollout"] + 4 * 2.5)
    assert not any("env_seconds_per_turn" in a for a in predict_spec(job()).assumptions)


def test_prefix_caching_shares_a_prompt_among_its_completions():
    """vLLM's prefix cache keeps a prompt's KV blocks once for its num_generations completions (and computes it
    once): with long prompts and a small KV budget, turning it off leaves room for fewer sequences, so more waves."""
    long = dict(estimate__prompt_tokens=6000, train__max_length=6000, train__per_device_train_batch_size=16,
                rollout__vllm_gpu_memory_utilization=0.3)
    shared, unshared = predict_spec(job(**long)), predict_spec(job(**long, rollout__vllm_enable_prefix_caching=False))
    assert unshared.details["waves"] > shared.details["waves"]
    assert per_round(unshared)["rollout"] > per_round(shared)["rollout"]


def test_generate_pays_per_kernel_and_for_dequantised_weights():
    """transformers' generate() launches every kernel of its eager layers per token: a LoRA model's adapters add
    theirs (5 per adapted linear), and a bitsandbytes 4-bit model also writes and reads a 16-bit copy of each weight
    it uses, which a slow-memory GPU feels most."""
    off = dict(rollout__use_vllm=False, rollout__vllm_mode=None, rollout__sleep_level=0, train__deepspeed=None)
    full = predict_spec(job(**off)).details["decode_step_ms"]
    lora = predict_spec(job(**off, train__tuner_type="lora")).details["decode_step_ms"]
    assert lora - full == pytest.approx(28 * 7 * 5 * eff.GENERATE_KERNEL_S * 1e3, rel=1e-6)
    t4 = [{"host": "a", "gpus": [0], "gpu_model": "Tesla T4"}]
    bf16 = predict_spec(job(**off, train__tuner_type="lora", train__torch_dtype="float16", cluster__nodes=t4))
    nf4 = predict_spec(job(**off, train__tuner_type="lora", train__torch_dtype="float16", train__quant_bits=4,
                           cluster__nodes=t4))
    assert nf4.details["decode_step_ms"] > bf16.details["decode_step_ms"]  # 4.5 bytes moved per weight, not 2


def test_servers_started_outside_the_job_count_their_data_parallel_gpus():
    """grpo_7b.sh's layout with its rollout server started by hand (cluster.external_rollout): the server's
    vllm_data_parallel_size 2 is two engines on two GPUs, so the run holds 8 GPUs and its GPU-hours are the run's
    hours × 8 — the same GPUs the rollout time counts (issue 32: it said 7, and GPU-hours did not move)."""
    outside = dict(rollout__vllm_mode="server", rollout__sleep_level=0, rollout__vllm_server_host=["10.0.0.9"],
                   rollout__vllm_server_port=[8000], cluster__external_rollout=True, train__max_steps=100,
                   cluster__nodes=[{"host": "t", "gpus": list(range(6)), "gpu_model": "H100"}])
    for dp, tp in ((1, 1), (2, 1), (2, 2)):
        r = predict_spec(job(**outside, server__vllm_data_parallel_size=dp, server__vllm_tensor_parallel_size=tp))
        assert r.details["engines"] == dp and r.gpus == 6 + dp * tp
        assert r.gpu_hours == pytest.approx(r.total_h * (6 + dp * tp))
    two = predict_spec(job(**{**outside, "rollout__vllm_server_host": ["10.0.0.9", "10.0.0.10"],
                              "rollout__vllm_server_port": [8000, 8000]}, server__vllm_data_parallel_size=2))
    assert two.details["engines"] == 4 and two.gpus == 6 + 4
