"""Memory estimate: each term's arithmetic, ZeRO partitioning, phases and sleep levels, field report 004, advice."""

from dataclasses import replace

import pytest

from grpo_ui.calibration import evaluate, predicted_gib, problems, summary
from grpo_ui.calibration import load as load_calibration
from grpo_ui.catalog import find_model
from grpo_ui.fit import suggest
from grpo_ui.importer import import_scripts
from grpo_ui.memory import (
    GIB,
    UnknownModel,
    deepspeed_zero2_model_states,
    deepspeed_zero3_model_states,
    estimate_spec,
    format_report,
    inputs_from_spec,
    lora_params,
    model_states,
    step_temporaries,
    zero_buffers,
)
from grpo_ui.spec import JobSpec, load_spec, with_changes

BASE = {"train.model": "Qwen/Qwen2.5-7B-Instruct", "train.dataset": ["d"], "train.reward_funcs": ["accuracy"],
        "rollout.use_vllm": True, "rollout.vllm_mode": "colocate",
        "cluster.nodes": [{"host": "a", "gpus": list(range(8)), "gpu_model": "A100 80GB"}]}


def spec(**changes):
    return with_changes(JobSpec(), {**BASE, **{k.replace("__", "."): v for k, v in changes.items()}})


def term(report, phase, name, role=0):
    p = next(p for p in report.roles[role].phases if p.name == phase)
    return sum(t.gib for t in p.terms if t.name.startswith(name))


P7 = find_model("Qwen2.5-7B").total_params()


@pytest.mark.parametrize("stage,weights,grads,optim", [
    (None, 2 * P7, 2 * P7, 4 * P7),        # plain DDP with bf16 params: AdamW states in bf16
    ("zero1", 2 * P7, 2 * P7, 12 * P7 / 8),
    ("zero2", 2 * P7, 2 * P7 / 8, 12 * P7 / 8),
    ("zero3", 2 * P7 / 8, 2 * P7 / 8, 12 * P7 / 8),
    ("zero3_offload", 0, 2 * P7 / 8, 0),
])
def test_full_tuning_model_states_follow_zero(stage, weights, grads, optim):
    ms = model_states(inputs_from_spec(spec(train__tuner_type="full", train__deepspeed=stage)))
    assert ms["weights"] == pytest.approx(weights) and ms["grads"] == pytest.approx(grads)
    assert ms["optimizer"] == pytest.approx(optim)


def test_lora_adapter_count_matches_peft_arithmetic():
    i = inputs_from_spec(spec(train__lora_rank=8))
    # Qwen2.5-7B: q 3584→3584, k/v 3584→512, o 3584→3584, gate/up 3584→18944, down 18944→3584; 28 layers
    per_layer = 8 * ((3584 + 3584) * 2 + (3584 + 512) * 2 + (3584 + 18944) * 3)
    assert lora_params(i) == per_layer * 28 == 20_185_088
    assert lora_params(inputs_from_spec(spec(train__target_modules=["q_proj", "v_proj"]))) == 28 * 8 * (7168 + 4096)


@pytest.mark.parametrize("stage,adapter_b,grads,optim", [
    (None, 4, 4, 8),         # PEFT keeps adapters fp32; torch AdamW states in fp32
    ("zero2", 2, 2 / 8, 12 / 8),  # DeepSpeed casts the module to bf16, grads in bf16, fp32 master + Adam sharded
])
def test_lora_adapter_bytes_follow_the_engine(stage, adapter_b, grads, optim):
    ms = model_states(inputs_from_spec(spec(train__lora_rank=8, train__deepspeed=stage)))
    n = 20_185_088
    assert ms["weights"] == pytest.approx(2 * P7 + n * adapter_b)
    assert ms["grads"] == pytest.approx(n * grads) and ms["optimizer"] == pytest.approx(n * optim)


def test_autocast_caches_bf16_copies_of_fp32_adapters_only_without_deepspeed():
    cache = lambda **kw: term(estimate_spec(spec(train__lora_rank=8, **kw)), "training", "autocast")  # noqa: E731
    assert cache() == pytest.approx(20_185_088 * 2 / GIB)
    assert cache(train__deepspeed="zero2") == 0 and cache(train__tuner_type="full") == 0
    assert term(estimate_spec(spec(train__lora_rank=8)), "optimizer step", "autocast") == 0  # freed after backward


# Qwen2.5-7B: hidden 3584, vocab 152064 (untied lm_head), largest linear gate/up/down 3584 × 18944, 28 layers
H7, VH7, LIN7 = 3584, 152064 * 3584, 3584 * 18944


def test_zero3_buffers_follow_deepspeed_stage3():
    """lm_head kept gathered from its forward to its backward + reduce bucket (h², 'auto') in bf16; the prefetch bucket
    (0.9·h² under HF 'auto', 0 under ms-swift GRPO) adds whole parameters, overshooting by at most one linear."""
    grpo = inputs_from_spec(spec(train__deepspeed="zero3"))
    assert grpo.zero3_prefetch == 0 and zero_buffers(grpo, 0) == (VH7 + H7 ** 2) * 2
    sft = replace(grpo, zero3_prefetch=0.9 * H7 ** 2)
    assert zero_buffers(sft, 0) == pytest.approx((VH7 + H7 ** 2 + 0.9 * H7 ** 2 + LIN7) * 2)
    full = inputs_from_spec(spec(train__deepspeed="zero3", train__tuner_type="full"))
    assert zero_buffers(full, 0) == (2 * VH7 + H7 ** 2) * 2  # + the lm_head's own full-size gradient


def test_ddp_buckets_hold_a_copy_of_the_trainable_gradients():
    lora = inputs_from_spec(spec(train__lora_rank=8))
    assert zero_buffers(lora, 20_185_088) == 20_185_088 * 4  # fp32 adapter gradients
    one_gpu = inputs_from_spec(spec(train__lora_rank=8, **{"cluster__nodes": [
        {"host": "a", "gpus": [0], "gpu_model": "A100 80GB"}]}))
    assert zero_buffers(one_gpu, 20_185_088) == 0


def test_zero_step_temporaries_flat_bf16_copy_and_fp32_cast_or_fp64_norm():
    """stage_1_and_2.py step: flatten (2 B) + .to(fp32) (4 B) of the partition; get_grad_norm_direct: one tensor in
    fp64 (8 B). 8 GPUs: the flat copy wins; 12 GPUs: the fp64 copy of the lm_head's gradient (V·h) wins; 64 GPUs: the
    partition (smaller than V·h) bounds it."""
    z2 = inputs_from_spec(spec(train__deepspeed="zero2", train__tuner_type="full"))
    assert step_temporaries(z2, P7) == pytest.approx(6 * P7 / 8)
    assert step_temporaries(replace(z2, world=12), P7) == 8 * VH7
    assert step_temporaries(replace(z2, world=64), P7) == pytest.approx(8 * P7 / 64)
    z3 = inputs_from_spec(spec(train__deepspeed="zero3", train__tuner_type="full"))
    assert step_temporaries(replace(z3, world=2), P7) == 6e9  # sub_group_size caps ZeRO-3's flat copy
    assert step_temporaries(replace(z3, world=64), P7) == pytest.approx(6 * P7 / 64)  # fp64 slice: 8·V·h/64 smaller


def test_reference_model_only_for_full_tuning_with_beta():
    assert term(estimate_spec(spec(train__tuner_type="full")), "training", "reference") == pytest.approx(2 * P7 / GIB)
    assert term(estimate_spec(spec(train__tuner_type="full", train__beta=0.0)), "training", "reference") == 0
    assert term(estimate_spec(spec()), "training", "reference") == 0  # LoRA: the base is the reference


def test_sleep_levels_free_vllm_memory_while_training():
    """vLLM's worker sleep unmaps every CuMem allocation at both levels; level 1 keeps a CPU copy of the weights."""
    reports = [estimate_spec(spec(rollout__sleep_level=lvl, rollout__vllm_gpu_memory_utilization=0.4))
               for lvl in (0, 1, 2)]
    held = [term(r, "training", "vLLM while") for r in reports]
    assert held[0] == pytest.approx(0.4 * 79.15) and held[1] == 0 and held[2] == 0
    ram = [r.host_ram_gib["per_trainer_node"] for r in reports]
    assert ram[1] - ram[0] == pytest.approx(8 * 2 * P7 / GIB) and ram[2] == ram[0]  # 8 processes' weight backups


def test_longer_completions_and_no_checkpointing_cost_more():
    short = estimate_spec(spec(train__max_completion_length=512))
    long = estimate_spec(spec(train__max_completion_length=4096))
    assert term(long, "training", "logits") > 7 * term(short, "training", "logits")
    nock = estimate_spec(spec(train__gradient_checkpointing=False))
    assert term(nock, "training", "activations") > 5 * term(short, "training", "activations")
    liger = estimate_spec(spec(train__use_liger_kernel=True, train__max_completion_length=4096))
    assert term(liger, "training", "logits") < term(long, "training", "logits") / 2


def test_server_mode_reports_the_rollout_gpu():
    s = spec(rollout__vllm_mode="server", server__vllm_tensor_parallel_size=2, **{"cluster__nodes": [
        {"host": "a", "gpus": [0, 1], "gpu_model": "H100 80GB"},
        {"host": "r", "role": "rollout", "gpus": [0, 1], "gpu_model": "H100 80GB"}]})
    report = estimate_spec(s)
    assert [r.role for r in report.roles] == ["trainer", "rollout"]
    assert term(report, "rollout", "vLLM weights", role=1) == pytest.approx(P7 * 2 / 2 / GIB)
    assert "vLLM" not in " ".join(t.name for p in report.trainer.phases for t in p.terms)


def test_field_report_004_oom_and_advice_that_fits():
    bad = load_spec("tests/fixtures/seeds/004_qwen2_7b_24gb.yaml")
    report = estimate_spec(bad)
    assert report.verdict == "oom" and report.trainer.headroom_gib < 0
    advice = suggest(bad)
    assert advice and all(estimate_spec(with_changes(bad, a.changes)).verdict in ("fits", "tight") for a in advice)
    assert advice == sorted(advice, key=lambda a: (a.cost, a.peak_gib))
    text = format_report(report)
    assert "OOM" in text and "vLLM while training" in text


def test_fitting_job_gets_no_advice_and_unknown_model_is_explained():
    ok = spec(rollout__vllm_gpu_memory_utilization=0.4)
    assert estimate_spec(ok).verdict == "fits" and suggest(ok) == []
    with pytest.raises(UnknownModel, match="config.json"):
        estimate_spec(spec(train__model="acme/mystery"))


# DeepSpeed's own estimators (deepspeed/runtime/zero/stage_1_and_2.py and stage3.py), reproduced for the baseline.
def test_deepspeed_zero2_estimator_formula():
    assert deepspeed_zero2_model_states(7_000_000_000, 8, 1, cpu_offload=False) == (
        int(7e9 * 4 * 8 * 1.5), int(4 * 7e9 + int(16 * 7e9 / 8)))
    assert deepspeed_zero2_model_states(7_000_000_000, 8, 2, cpu_offload=True) == (int(7e9 * 64 * 1.5), int(14e9))
    assert deepspeed_zero2_model_states(10, 1, 1, cpu_offload=True) == (240, 20)


def test_deepspeed_zero3_estimator_formula():
    p, layer = 7_000_000_000, 545_000_000
    assert deepspeed_zero3_model_states(p, layer, 8, 1, cpu_offload=False) == (
        int(layer * 4 * 8 * 1.5), int(4 * layer + int(18 * p / 8)))
    assert deepspeed_zero3_model_states(p, layer, 8, 2, True, True, True) == (int(p * 18 / 2 * 1.5), 4 * layer)
    assert deepspeed_zero3_model_states(p, layer, 8, 2, True, False, False) == (
        int(p * max(32, 8) * 1.5), int(4 * layer + int(2 * p / 16)))


def test_field_report_004_working_config_fits_with_vllm_on_the_spare_gpu():
    """ms-swift 3.2 with num_infer_workers 1 on 4 GPUs: 3 training processes, vLLM alone on the 4th GPU."""
    good = load_spec("tests/fixtures/seeds/004_qwen2_7b_a10_working.yaml")
    assert (good.nproc_per_node(), good.world_size(), good.spare_rollout_gpus()) == (3, 3, 1)
    report = estimate_spec(good)
    assert report.verdict in ("fits", "tight")
    assert [r.role for r in report.roles] == ["trainer", "rollout"]
    assert term(report, "training", "vLLM") == 0  # no vLLM memory on the training GPUs
    assert term(report, "rollout", "vLLM", role=1) == pytest.approx(0.9 * 22.49, rel=0.01)
    # with the lengths of the original issue (ms-swift#3361: max_length 2048, completion 1024) it still runs
    longer = with_changes(good, {"train.max_length": 2048, "train.max_completion_length": 1024})
    assert estimate_spec(longer).verdict in ("fits", "tight")
    # from 3.5 on ms-swift ignores num_infer_workers: the same job puts vLLM on all four training GPUs
    assert with_changes(good, {"swift_version": "3.5"}).spare_rollout_gpus() == 0


CALIBRATION = load_calibration("tests/data/memory_measurements.jsonl")


@pytest.mark.parametrize("row", CALIBRATION, ids=lambda r: r["id"])
def test_calibration_row_is_well_formed_and_buildable(row):
    assert problems(row) == []
    assert row["source"].startswith("https://") and row["notes"]
    result = evaluate(row)
    assert result.ours > 0 and result.weights_only > 0
    assert (result.deepspeed is None) == (row["workload"] == "vllm")


def test_torch_figure_counts_a_colocated_vllm_at_its_reservation_even_asleep():
    """ms-swift's memory(GiB) is torch.cuda.max_memory_reserved: vLLM's cuMem pool is a torch MemPool whose blocks
    stay counted after sleep() (vllm#17117), so the figure is the training peak's torch terms + vLLM's reservation;
    nvidia-smi (peak) sees the memory sleep gave back."""
    report = estimate_spec(spec(rollout__sleep_level=1, rollout__vllm_gpu_memory_utilization=0.4))
    training = next(p for p in report.trainer.phases if p.name == "training")
    torch_terms = sum(t.gib for t in training.terms if not t.name.startswith(("vLLM", "CUDA context", "NCCL")))
    pool = term(report, "rollout", "vLLM")
    assert pool == pytest.approx(0.4 * 79.15) and term(report, "training", "vLLM") == 0
    assert predicted_gib({"workload": "grpo", "compare": "torch"}, report) == pytest.approx(torch_terms + pool)
    assert predicted_gib({"workload": "grpo", "compare": "peak"}, report) == pytest.approx(report.trainer.peak_gib)


def test_estimate_is_within_target_of_published_measurements():
    """Median ≤ 10 % and p90 ≤ 25 % absolute error over the calibration set (bench/memory_accuracy.py prints it),
    and better than both baselines."""
    assert len(CALIBRATION) >= 40 and len({r["kind"] for r in CALIBRATION}) >= 4
    results = [evaluate(r) for r in CALIBRATION]
    median, p90 = summary([r.error(r.ours) for r in results])
    assert median <= 10 and p90 <= 25, (median, p90)
    assert median < summary([r.error(r.weights_only) for r in results])[0]
    assert median < summary([r.error(r.deepspeed) for r in results if r.deepspeed is not None])[0]


REPORT_004_SCRIPT = """# field report 004's working launch, ms-swift 3.2 (vLLM on the GPU that NPROC_PER_NODE leaves free)
CUDA_VISIBLE_DEVICES=0,1,2,3 NPROC_PER_NODE=3 swift rlhf --rlhf_type grpo --model Qwen/Qwen2-7B-Instruct \\
  --train_type lora --lora_rank 16 --lora_alpha 32 --deepspeed zero3 --use_vllm true \\
  --vllm_gpu_memory_utilization 0.9 --per_device_train_batch_size 7 --gradient_accumulation_steps 8 \\
  --num_generations 21 --reward_funcs accuracy --dataset d
"""


def test_field_report_004_script_imports_to_the_spare_gpu_layout():
    spec, _ = import_scripts([("run.sh", REPORT_004_SCRIPT)], "3.2")
    assert spec.rollout.num_infer_workers == 1 and spec.nproc_per_node() == 3
    assert estimate_spec(with_changes(spec, {"cluster.nodes[0].gpu_model": "A10"})).verdict in ("fits", "tight")
    # the same script for 4.6 cannot express the layout: the removed flag is named, vLLM shares the GPUs
    explicit = REPORT_004_SCRIPT.replace("--dataset d", "--dataset d --num_infer_workers 1")
    new, findings = import_scripts([("run.sh", explicit)], "4.6")
    assert new.spare_rollout_gpus() == 0 and any(f.id == "IMPORT-REMOVED-FLAG" for f in findings)
