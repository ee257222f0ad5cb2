"""The Megatron path's memory estimate and step time (grpo_ui/memory/megatron.py, grpo_ui/timing/megatron.py), held to
what their sources publish: Megatron-LM's bytes per parameter for the distributed optimizer ("6 + 12/d" for bf16
parameters with fp32 gradients, 18 without it), Korthikanti et al. 2022's activation counts (the attention block and
norms' 12sbh bytes per layer, ÷ t with tensor and sequence parallelism, 2sbh per layer under full recomputation, the
first pipeline stage holding p micro-batches), ms-swift 4.6's choices (the reference model full tuning always builds,
what offload_model / offload_optimizer move, last-rank logging), and the jobs written like ms-swift's Megatron GRPO
examples (tests/data/megatron_jobs/) estimated end to end, on the CLI too. bench/memory_accuracy.py and
bench/time_accuracy.py measure the error against published figures (tests/data/megatron_measurements.jsonl)."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from bench import megatron_calibration
from bench.calibration import source_key
from grpo_ui.checks.assess import assess
from grpo_ui.knowledge.catalog import find_model
from grpo_ui.memory import megatron
from grpo_ui.memory.estimate import estimate
from grpo_ui.memory.inputs import inputs_from_spec
from grpo_ui.memory.report import GIB
from grpo_ui.spec.model import JobSpec
from grpo_ui.spec.paths import with_changes
from grpo_ui.spec.resolve import resolve
from grpo_ui.spec.yaml_io import load_spec
from grpo_ui.timing import megatron as megatron_time
from grpo_ui.timing.inputs import time_inputs
from grpo_ui.timing.predict import predict

ROOT = Path(__file__).parent.parent
JOBS = ROOT / "tests" / "data" / "megatron_jobs"
H100 = "NVIDIA H100 80GB HBM3"


def job(model: str = "Qwen/Qwen2.5-7B-Instruct", gpus: int = 8, nodes: int = 1, **changes) -> JobSpec:
    cluster = [{"host": f"10.0.0.{n + 1}", "gpus": list(range(gpus)), "gpu_model": H100} for n in range(nodes)]
    return with_changes(JobSpec(engine="megatron"), {
        "train.model": model, "train.dataset": ["d.jsonl"], "train.reward_funcs": ["accuracy"],
        "rollout.vllm_mode": "colocate", "train.max_length": 1024, "train.max_completion_length": 1024,
        "train.global_batch_size": 64, "cluster.nodes": cluster, **{k.replace("__", "."): v for k, v in changes.items()}})


def terms(report, phase: str = "training") -> dict[str, float]:
    p = next(p for p in report.trainer.phases if p.name == phase)
    return {t.name: t.gib * GIB for t in p.terms}


# Model states: Megatron-LM's distributed optimizer guide

@pytest.mark.parametrize("tp,distributed,per_param", [(1, True, lambda d: 6 + 12 / d), (2, True, lambda d: 6 + 12 / d),
                                                       (4, True, lambda d: 6 + 12 / d), (2, False, lambda d: 18)])
def test_dense_model_states_are_megatron_lms_bytes_per_parameter(tp, distributed, per_param):
    """bf16 parameters with fp32 gradients: 2 + 4 + 12/d bytes per parameter with the distributed optimizer over d
    data-parallel ranks, 18 without it (Megatron-LM docs/source/api-guide/dist_optimizer.md); the GPU holds 1/TP of
    the parameters (a tied or untied vocabulary split by TP too)."""
    report = estimate(inputs_from_spec(job(train__tensor_model_parallel_size=tp,
                                           train__use_distributed_optimizer=distributed, train__tuner_type="full")))
    t = terms(report)
    params = find_model("Qwen2.5-7B").total_params() / tp
    dp = 8 // tp
    assert t["weights"] + t["gradients"] + t["optimizer states"] == pytest.approx(params * per_param(dp), rel=1e-3)


def test_experts_are_split_by_ep_and_dense_parameters_by_tp():
    """An MoE layer's experts are split over EP·ETP, the rest over TP: doubling EP halves the expert part alone."""
    base = inputs_from_spec(job("Qwen/Qwen3-30B-A3B", train__tensor_model_parallel_size=2,
                                train__expert_model_parallel_size=2, train__sequence_parallel=True))
    more = inputs_from_spec(job("Qwen/Qwen3-30B-A3B", train__tensor_model_parallel_size=2,
                                train__expert_model_parallel_size=4, train__sequence_parallel=True))
    dense, experts = megatron.stage_params(base, 0)
    dense4, experts4 = megatron.stage_params(more, 0)
    assert dense4 == pytest.approx(dense) and experts4 == pytest.approx(experts / 2)
    arch = find_model("Qwen3-30B-A3B")
    routed = arch.num_experts * 3 * arch.hidden_size * arch.moe_intermediate_size * arch.num_hidden_layers
    assert experts * 2 == pytest.approx(routed)  # EP 2 GPUs hold every expert once
    assert dense * 2 == pytest.approx(arch.total_params() - routed, rel=1e-5)  # TP 2 GPUs hold the rest once (the
    # final norm is replicated on both)


def test_precision_aware_and_cpu_offloaded_optimizers():
    """The precision-aware optimizer keeps the fp32 main parameters' low 16 bits (TE's store_param_remainders): 10 B
    instead of 12; optimizer_cpu_offload moves optimizer_offload_fraction of the states to host RAM."""
    plain = terms(estimate(inputs_from_spec(job(train__tuner_type="full"))))["optimizer states"]
    aware = terms(estimate(inputs_from_spec(job(train__tuner_type="full", train__use_precision_aware_optimizer=True))))
    assert aware["optimizer states"] == pytest.approx(plain * 10 / 12)
    half = estimate(inputs_from_spec(job(train__tuner_type="full", train__optimizer_cpu_offload=True,
                                         train__optimizer_offload_fraction=0.5)))
    whole = estimate(inputs_from_spec(job(train__tuner_type="full")))
    assert terms(half)["optimizer states"] == pytest.approx(plain / 2)
    assert half.host_ram_gib["per_trainer_node"] > whole.host_ram_gib["per_trainer_node"]


# Activations: Korthikanti et al. 2022

MHA = replace(find_model("Llama-3.1-8B"), num_key_value_heads=32, name="mha")


def layer_inputs(tp: int, sp: bool, recompute: str = "selective", **changes):
    spec = job(train__tensor_model_parallel_size=tp, train__sequence_parallel=sp, train__recompute_granularity=recompute,
               **changes)
    return inputs_from_spec(resolve(spec, MHA))


def test_attention_and_norms_keep_korthikantis_twelve_sbh_split_by_tp_with_sequence_parallelism():
    """The paper's attention block keeps QKV's input 2sbh, Q and K 4sbh, V 2sbh and the projection's input 2sbh, and
    its layer norm its input 2sbh (§4.1, without dropout masks and, with flash attention, without the 5as² terms):
    12sbh bytes. With tensor and sequence parallelism everything is ÷ t (§4.2.2); with tensor parallelism alone the
    norms' input and output stay whole. (fp32 rsigma and flash attention's log-sum-exp add a few bytes per token.)"""
    h = MHA.hidden_size
    for tp in (1, 2, 4):
        i = layer_inputs(tp, sp=tp > 1)
        mlp_free = megatron.layer_bytes(i) - (2 * 2 * h + 4) / tp - 2 * 3 * MHA.intermediate_size / tp  # its MLP block
        fp32 = 4 + 4 * MHA.num_attention_heads  # the norm's rsigma, flash attention's log-sum-exp per head
        assert mlp_free == pytest.approx((12 * h + fp32) / tp)
    without_sp = megatron.layer_bytes(layer_inputs(4, sp=False))
    with_sp = megatron.layer_bytes(layer_inputs(4, sp=True))
    assert without_sp - with_sp == pytest.approx(2 * (4 * h + 4) * (1 - 1 / 4), rel=1e-6)


def test_unfused_attention_keeps_five_a_s_bytes_unless_recomputed_selectively():
    """Unfused attention keeps its scores, softmax and mask, 5as bytes per token (÷ t); selective recomputation drops
    exactly that term (§5)."""
    seq = 2048
    unfused = megatron.layer_bytes(layer_inputs(2, True, recompute="full", train__attention_backend="unfused"))
    flash = megatron.layer_bytes(layer_inputs(2, True, recompute="full"))
    assert unfused - flash == pytest.approx(5 * MHA.num_attention_heads * seq / 2)
    selective = megatron.layer_bytes(layer_inputs(2, True, train__attention_backend="unfused"))
    assert selective == pytest.approx(flash)


def test_full_recomputation_keeps_each_layers_input_and_one_layer_recomputed():
    """Full recomputation stores 2sbh per layer (÷ t with sequence parallelism) and rebuilds one layer at a time."""
    i = layer_inputs(2, True, recompute="full")
    tokens = megatron.micro_batch_tokens(i)
    layers = MHA.num_hidden_layers
    expected = tokens * (layers * 2 * MHA.hidden_size / 2 + megatron.layer_bytes(i))
    assert megatron.activations(i, 0) == pytest.approx(expected)
    assert megatron.activations(layer_inputs(2, True), 0) == pytest.approx(tokens * layers * megatron.layer_bytes(i))


def test_the_first_pipeline_stage_holds_pp_micro_batches_so_all_layers_worth():
    """Under 1F1B the first stage holds p micro-batches of its L/p layers: L layers' worth, whatever p (§4.2.3); the
    last stage one micro-batch, and the logits; interleaving adds (p−1)/(p·v) on the first stage."""
    one = layer_inputs(1, False, train__micro_batch_size=1)
    four = layer_inputs(1, False, train__micro_batch_size=1, train__pipeline_model_parallel_size=4)
    assert megatron.in_flight(four, 0) == 4 and megatron.in_flight(four, 3) == 1
    assert megatron.activations(four, 0) == pytest.approx(megatron.activations(one, 0))
    assert megatron.logits(four, 0) == 0 and megatron.logits(four, 3) == pytest.approx(megatron.logits(one, 0))
    interleaved = replace(four, megatron=replace(four.megatron, vpp=2))
    assert megatron.in_flight(interleaved, 0) == pytest.approx(4 * (1 + 3 / 8))


def test_grpo_logits_are_vocab_parallel_and_cover_the_packed_sequence():
    """The output layer is vocab-parallel (÷ TP) and scores every token of the micro-batch's packed sequences:
    GRPO's bf16 log-softmax keeps 8 B per logit; ÷ CP splits the sequence."""
    i = layer_inputs(2, True, train__micro_batch_size=2)
    assert megatron.logits(i, 0) == pytest.approx(8 * 2 * 2048 * MHA.vocab_size / 2)
    cp = layer_inputs(2, True, train__micro_batch_size=2, train__context_parallel_size=2)
    assert megatron.logits(cp, 0) == pytest.approx(megatron.logits(i, 0) / 2)


# ms-swift's choices

def test_full_tuning_holds_a_reference_model_whatever_beta_and_lora_none():
    """MegatronRLHFTrainer.prepare_model builds the reference model for tuner_type full even at beta 0; LoRA disables
    its adapter instead."""
    for beta in (0.0, 0.04):
        full = terms(estimate(inputs_from_spec(job(train__tuner_type="full", train__beta=beta))))
        assert full["reference/reward models"] == pytest.approx(full["weights"])
    lora = terms(estimate(inputs_from_spec(job(train__tuner_type="lora", train__beta=0.04))))
    assert lora["reference/reward models"] == 0


def test_offload_and_sleep_level_during_rollout_and_training():
    """offload_model frees the policy, its grad buffer and the reference model during rollout; offload_optimizer the
    optimizer states; a sleeping vLLM keeps nothing while training, an awake one its reservation."""
    kept = estimate(inputs_from_spec(job(train__tuner_type="full", rollout__sleep_level=0)))
    moved = estimate(inputs_from_spec(job(train__tuner_type="full", rollout__sleep_level=1, rollout__offload_model=True,
                                          rollout__offload_optimizer=True)))
    for name in ("weights", "gradients", "optimizer states", "reference/reward models"):
        assert terms(kept, "rollout")[name] > 0 and terms(moved, "rollout")[name] == 0
    awake = next(v for k, v in terms(kept).items() if k.startswith("vLLM while training"))
    asleep = next(v for k, v in terms(moved).items() if k.startswith("vLLM while training"))
    assert awake > 0 and asleep == 0


@pytest.mark.parametrize("name", ["dense_colocate", "dense_server", "moe_colocate_full", "moe_colocate_lora"])
def test_jobs_written_like_ms_swifts_examples_get_memory_and_time(name):
    """Each job like ms-swift's examples/megatron/grpo scripts has a memory report (server mode: a rollout GPU too)
    and a step time whose training phase includes the pipeline bubble and the optimizer; no 'not estimated'."""
    a = assess(load_spec(JOBS / f"{name}.yaml"))
    assert a.memory is not None and a.memory_error is None and a.time is not None and a.time_error is None
    assert [r.role for r in a.memory.roles] == (["trainer", "rollout"] if name == "dense_server" else ["trainer"])
    assert a.time.phases["train"] > 0 and a.time.phases["rollout"] > 0
    assert "Megatron-Core" in " ".join(a.memory.assumptions)


def test_the_cli_estimates_a_megatron_job_with_memory_and_time():
    out = subprocess.run([sys.executable, "-m", "grpo_ui", "estimate", str(JOBS / "moe_colocate_full.yaml"), "--json"],
                         capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    names = {t["name"] for t in report["roles"][0]["phases"][0]["terms"]}
    assert {"weights", "gradients", "optimizer states", "activations", "logits"} <= names
    assert report["time"]["step_s"] > 0 and "train" in report["time"]["phases_s"]


# Step time

def megatron_time_inputs(**changes):
    return time_inputs(job(**{"train__tuner_type": "full", "estimate__completion_tokens": 512,
                              "estimate__prompt_tokens": 256, **changes}))


def test_the_pipeline_bubble_is_pp_minus_one_over_micro_batches_plus_pp_minus_one():
    """1F1B's bubble: (p−1)/(m+p−1) of the step (Narayanan et al. 2021); m from the global batch ÷ (micro × DP)."""
    t = megatron_time_inputs(train__pipeline_model_parallel_size=4, train__global_batch_size=32)
    lay = t.mem.megatron
    assert lay.micro_batches == 32 // 2  # DP 2
    assert megatron_time.bubble_share(t) == pytest.approx(3 / (16 + 3))
    one = megatron_time.pipeline_s(t, 1, backward=True)
    assert megatron_time.pipeline_s(t, 16, backward=True) == pytest.approx(one * (16 + 3) / 4)


def test_tensor_expert_and_data_parallel_traffic_costs_time():
    """TP adds its all-reduces, EP its all-to-alls, the distributed optimizer its gradient reduce-scatter and
    parameter all-gather over DP; a model replica on fewer GPUs does more work each."""
    tp1 = megatron_time_inputs()
    tp2 = megatron_time_inputs(train__tensor_model_parallel_size=2, train__sequence_parallel=True)
    assert megatron_time._collectives_s(tp1, True) == 0 < megatron_time._collectives_s(tp2, True)
    assert megatron_time.grad_sync_s(tp1) > 0
    moe1 = time_inputs(job("Qwen/Qwen3-30B-A3B", estimate__completion_tokens=512, estimate__prompt_tokens=256))
    moe4 = time_inputs(job("Qwen/Qwen3-30B-A3B", estimate__completion_tokens=512, estimate__prompt_tokens=256,
                           train__expert_model_parallel_size=4))
    assert megatron_time._collectives_s(moe1, True) == 0 < megatron_time._collectives_s(moe4, True)


def test_an_moes_routed_experts_run_at_their_share_of_megatrons_efficiency(monkeypatch):
    """A micro-batch's routed-expert FLOPs (k experts' gate, up and down projections per token and layer) run at
    MEGATRON_EXPERT_EFFICIENCY of Megatron-Core's share of the peak, the rest at MEGATRON_MFU: halving the expert
    efficiency adds exactly the expert FLOPs' time once more; a dense model has none."""
    from grpo_ui.timing import efficiency
    moe = time_inputs(job("Qwen/Qwen3-30B-A3B", estimate__completion_tokens=512, estimate__prompt_tokens=256,
                          train__expert_model_parallel_size=8, train__recompute_granularity="full"))
    monkeypatch.setattr(efficiency, "MEGATRON_EXPERT_EFFICIENCY", 1.0)
    whole = megatron_time._stage_compute_s(moe, backward=True)
    monkeypatch.setattr(efficiency, "MEGATRON_EXPERT_EFFICIENCY", 0.5)
    halved = megatron_time._stage_compute_s(moe, backward=True)
    arch = moe.mem.arch
    tokens = moe.mem.micro_batch * (256 + 512)
    experts = tokens * 2 * 4 * arch.num_hidden_layers * arch.num_experts_per_tok * 3 * arch.hidden_size * (
        arch.moe_intermediate_size)  # forward, backward (2), recomputation
    assert halved - whole == pytest.approx(experts / (moe.gpu.tflops_bf16 * 1e12 * efficiency.MEGATRON_MFU))
    dense = megatron_time_inputs()
    assert megatron_time._stage_compute_s(dense, backward=True) == pytest.approx(
        megatron_time._flops(dense, megatron_time.micro_batch_tokens(dense), True)[0]
        / (dense.gpu.tflops_bf16 * 1e12 * efficiency.MEGATRON_MFU))


def test_log_probs_run_one_micro_batch_at_a_time_and_the_reference_only_with_beta():
    """ms-swift computes the old policy's log-probs per micro-batch through the whole pipeline (no pipelining across
    them), the reference's only when beta ≠ 0."""
    t = megatron_time_inputs(train__pipeline_model_parallel_size=2, train__beta=0.04)
    old, ref = megatron_time.logprobs_s(t)
    assert old == pytest.approx(t.steps_per_generation * megatron_time.pipeline_s(t, 1, backward=False)) and ref == old
    assert megatron_time.logprobs_s(megatron_time_inputs(train__beta=0.0))[1] == 0


def test_a_megatron_step_adds_up_and_longer_completions_take_longer():
    short, long = (predict(megatron_time_inputs(estimate__completion_tokens=n)) for n in (256, 1024))
    assert sum(short.phases.values()) == pytest.approx(short.step_s)
    assert long.step_s > short.step_s and long.phases["train"] > short.phases["train"]


def test_the_run_is_megatrons_train_iters_not_swift_rlhfs_max_steps():
    """megatron rlhf runs train_iters iterations (or those num_train_epochs makes of the dataset's rows); max_steps is
    swift rlhf's and unset here. The prediction once counted epochs of the dataset for a job that sets train_iters."""
    from grpo_ui.timing.predict import predict_spec
    given = predict_spec(job(train__train_iters=50, estimate__dataset_rows=2000))
    assert given.steps == 50 and given.total_h == pytest.approx(50 * given.step_s / 3600)
    by_epochs = predict_spec(job(train__num_train_epochs=1, estimate__dataset_rows=640))
    assert by_epochs.steps == resolve(job(train__num_train_epochs=1, estimate__dataset_rows=640)).megatron.train_iters > 0
    unknown = predict_spec(job(train__num_train_epochs=1))
    assert unknown.steps is None and any("train.train_iters" in a for a in unknown.assumptions)


# The published rows

ROWS = megatron_calibration.rows()


@pytest.mark.parametrize("row", ROWS, ids=[r["id"] for r in ROWS])
def test_every_megatron_row_is_estimated_and_its_split_is_the_frozen_rule(row):
    """Each row builds as a megatron rlhf job and is estimated; its split is the memory rows' rule on its source."""
    result = megatron_calibration.evaluate(row)
    assert result.ours > 0
    digest = int(hashlib.sha256(f"2:{source_key(row)}".encode()).hexdigest(), 16)
    assert row["split"] == ("held_out" if digest % 2 == 0 else "fit")


def test_the_rank_overhead_is_what_the_fit_rows_give():
    results = [megatron_calibration.evaluate(r) for r in ROWS]
    assert megatron.RANK_OVERHEAD_GIB == pytest.approx(megatron_calibration.rank_overhead(results), abs=0.05)



def test_nemo_rls_megatron_rows_are_predicted_as_megatron_jobs():
    """Time rows measured with Megatron-Core (NeMo RL's tables, ms-swift's own Megatron GRPO run) are predicted as
    megatron rlhf jobs with their TP/PP/CP/EP, on-policy."""
    from bench.time_calibration import load, spec_of
    rows = [r for r in load() if megatron_calibration.time_row_layout(r)]
    assert any(r["framework"] == "nemo-rl" for r in rows) and any(r["framework"] == "ms-swift" for r in rows)
    for row in rows:
        eff = resolve(spec_of(row))
        layout = megatron_calibration.time_row_layout(row)
        assert eff.megatron is not None and (eff.megatron.tp, eff.megatron.pp) == (layout["tp"], layout["pp"])
        assert eff.megatron.dp >= 1 and eff.megatron.num_microbatches >= 1 and not eff.spec.rollout.async_generate


# Make it fit, make it faster

def test_make_it_fit_offers_megatrons_levers_and_only_those_the_rules_pass():
    """An OOM Megatron job is offered Megatron's levers (parallelism, recomputation, the optimizer, the micro-batch),
    never swift rlhf's (DeepSpeed, per_device_train_batch_size); a TP the KV heads do not divide (Qwen2.5-VL-3B has
    2: MEGATRON-TP-HEADS) is never offered, and each offer fits or is tight."""
    from grpo_ui.checks.fit import suggest
    spec = load_spec(JOBS / "dense_colocate.yaml")
    at_two = resolve(with_changes(spec, {"train.tensor_model_parallel_size": 2, "train.sequence_parallel": True}))
    for eff in (resolve(spec), at_two):
        offers = suggest(eff, limit=10)
        assert offers and all(s.verdict in ("fits", "tight") for s in offers)
        keys = {k for s in offers for k in s.changes}
        assert not keys & {"train.deepspeed", "train.per_device_train_batch_size", "train.gradient_checkpointing"}
        assert all(s.changes.get("train.tensor_model_parallel_size", 1) <= 2 for s in offers)


def test_make_it_faster_offers_megatrons_levers_and_no_async_generate():
    from grpo_ui.checks.faster import _candidates
    full = resolve(load_spec(JOBS / "moe_colocate_full.yaml"))
    levers = {k for changes, _ in _candidates(full) for k in changes}
    assert {"train.pipeline_model_parallel_size", "train.tensor_model_parallel_size", "train.tuner_type"} <= levers
    server = resolve(load_spec(JOBS / "dense_server.yaml"))
    assert not any("rollout.async_generate" in changes for changes, _ in _candidates(server))
    assert any(f.changes for f in assess(full.spec).faster)
