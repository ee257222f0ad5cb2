"""megatron rlhf's checks before launch (grpo_ui/checks/rules/megatron.py, ray.py; issue 29): each rule fires on a
spec that breaks the ms-swift (or Megatron-Core) check it cites and stays silent on a near-identical one that does
not; its one-click fix, when it has one, removes it. The arithmetic cases follow ms-swift's own examples
(examples/megatron/grpo/*.sh): batch sizes count completions.
"""

import re

import pytest

from grpo_ui.checks.assess import assess
from grpo_ui.checks.rules import RULES
from grpo_ui.spec.model import JobSpec
from grpo_ui.spec.paths import with_changes
from grpo_ui.spec.swift_cli import train_command

EIGHT = [{"host": "gpu-a", "gpus": list(range(8))}]
BASE = {"engine": "megatron", "train.model": "Qwen/Qwen3-8B", "train.dataset": ["d"],
        "train.reward_funcs": ["accuracy"], "rollout.vllm_mode": "colocate", "train.global_batch_size": 64,
        "train.micro_batch_size": 1, "train.num_generations": 8, "train.train_iters": 10, "cluster.nodes": EIGHT}
RAY = {"train.use_ray": True, "rollout.vllm_mode": None, "cluster.backend": "ssh"}
SEPARATE = {**RAY, "cluster.nodes": [*EIGHT, {"host": "roll-a", "role": "rollout", "gpus": list(range(8))}]}
MOE = {"train.model": "Qwen/Qwen3-30B-A3B-Instruct-2507"}

# id: (changes that trigger it, changes to the same spec that don't)
MEGATRON_CASES = {
    "ENGINE-FLAG": ({"train.per_device_train_batch_size": 4}, {"train.micro_batch_size": 4,
                                                               "train.global_batch_size": 64}),
    "ENGINE-VALUE": ({"train.tuner_type": "longlora"}, {"train.tuner_type": "lora"}),
    "ENGINE-VERSION": ({"swift_version": "3.12"}, {"swift_version": "4.0"}),
    "MEGATRON-WORLD": ({"train.tensor_model_parallel_size": 16}, {"train.tensor_model_parallel_size": 8}),
    "MEGATRON-TP-HEADS": ({**MOE, "train.tensor_model_parallel_size": 8, "train.global_batch_size": 8},
                          {**MOE, "train.tensor_model_parallel_size": 4, "train.global_batch_size": 16}),
    "MEGATRON-EP-EXPERTS": ({**MOE, "train.expert_model_parallel_size": 3},
                            {**MOE, "train.expert_model_parallel_size": 4}),
    "MEGATRON-PP-LAYERS": ({"train.model": "Qwen/Qwen2.5-7B-Instruct", "train.pipeline_model_parallel_size": 8,
                            "train.global_batch_size": 8},
                           {"train.model": "Qwen/Qwen2.5-7B-Instruct", "train.pipeline_model_parallel_size": 4,
                            "train.global_batch_size": 16}),
    "MEGATRON-SP-TP": ({"train.sequence_parallel": True},
                       {"train.sequence_parallel": True, "train.tensor_model_parallel_size": 2}),
    "MEGATRON-CP-ATTENTION": ({"train.context_parallel_size": 2, "train.attention_backend": "local"},
                              {"train.context_parallel_size": 2, "train.attention_backend": "flash"}),
    "MEGATRON-RECOMPUTE": ({"train.recompute_method": "uniform"},
                           {"train.recompute_method": "uniform", "train.recompute_granularity": "full"}),
    "MEGATRON-GLOBAL-BATCH": ({"train.global_batch_size": 60}, {"train.global_batch_size": 64}),
    "MEGATRON-GEN-BATCH": ({"train.generation_batch_size": 96}, {"train.generation_batch_size": 128}),
    "MEGATRON-DP-ALIGN": ({"train.global_batch_size": 32}, {"train.global_batch_size": 64}),
    "MEGATRON-UNSUPPORTED": ({"train.num_iterations": 2}, {"train.steps_per_generation": 2}),
    "MEGATRON-USE-VLLM": ({"rollout.use_vllm": False, "rollout.vllm_mode": None}, {}),
    "MEGATRON-VLLM-MODE": ({"rollout.vllm_mode": None}, {"rollout.vllm_mode": "colocate"}),
    "RAY-BACKEND": (RAY, {"train.use_ray": False}),
    "RAY-NNODES": ({**RAY, "cluster.nodes": [*EIGHT, {"host": "gpu-b", "gpus": list(range(8))},
                                             {"host": "roll-a", "role": "rollout", "gpus": [0, 1, 2]}]},
                   {**RAY, "cluster.nodes": [*EIGHT, {"host": "gpu-b", "gpus": list(range(8))},
                                             {"host": "roll-a", "role": "rollout", "gpus": [0, 1, 2, 3]}]}),
    "RAY-REPLICAS": ({**SEPARATE, "server.vllm_tensor_parallel_size": 3},
                     {**SEPARATE, "server.vllm_tensor_parallel_size": 4}),
    "RAY-VLLM-MODE": ({**RAY, "rollout.vllm_mode": "server"}, RAY),
    "RAY-TRAIN-ITERS": ({**RAY, "train.train_iters": None}, {**RAY, "train.num_train_epochs": 1}),
    "RAY-NO-EVAL": ({**RAY, "train.val_dataset": ["v.jsonl"]}, RAY),
    # 4 training GPUs on one trainer node (nnodes 1), 8 rollout GPUs on two nodes: ms-swift asks for one 8-GPU group
    "RAY-PLACEMENT": ({**RAY, "cluster.nodes": [{"host": "gpu-a", "gpus": [0, 1, 2, 3]},
                                                {"host": "roll-a", "role": "rollout", "gpus": [0, 1, 2, 3]},
                                                {"host": "roll-b", "role": "rollout", "gpus": [0, 1, 2, 3]}]},
                      {**RAY, "cluster.nodes": [{"host": "gpu-a", "gpus": [0, 1, 2, 3]},
                                                {"host": "roll-a", "role": "rollout", "gpus": list(range(8))}]}),
    "RAY-WORKDIR": ({**RAY, "cluster.backend": "ray", "cluster.ray_address": "http://10.0.0.1:8265"},
                    {**RAY, "cluster.backend": "ray", "cluster.ray_address": "http://10.0.0.1:8265",
                     "train.output_dir": "/shared/out"}),
}


def spec_with(changes: dict) -> JobSpec:
    return with_changes(JobSpec(), {**BASE, **changes})


def ids(changes: dict) -> set[str]:
    return {f.id for f in assess(spec_with(changes)).findings}


def test_base_spec_is_clean():
    assert ids({}) == set()


@pytest.mark.parametrize("rule_id", sorted(MEGATRON_CASES))
def test_rule_fires_and_stays_silent(rule_id):
    trigger, quiet = MEGATRON_CASES[rule_id]
    assert rule_id in ids(trigger)
    assert rule_id not in ids(quiet)


@pytest.mark.parametrize("rule_id", sorted(MEGATRON_CASES))
def test_each_rule_cites_the_line_it_mirrors_and_its_fix_applies(rule_id):
    what, source = RULES[rule_id]
    assert what and (re.search(r"\.py(:\d+(-\d+)?)?", source) or "Megatron-Core" in source), source
    spec = spec_with(MEGATRON_CASES[rule_id][0])
    for f in (f for f in assess(spec).findings if f.id == rule_id):
        assert f.message and f.fix and f.fields and f.severity in ("error", "warning", "info")
        if f.apply:
            fixed = with_changes(spec, f.apply)
            assert not [g for g in assess(fixed).findings if g.id == rule_id and g.fields == f.fields], f.message


def test_the_batch_arithmetic_of_ms_swifts_examples_passes():
    """dense_colocate.sh (8 GPUs, global 128, micro 4, 4 steps per generation, G 8) and moe_colocate_full.sh
    (TP 4, PP 2, EP 4: DP 1, global 8, micro 1, G 8) as ms-swift computes them: no batch finding."""
    dense = {"train.model": "Qwen/Qwen2.5-VL-3B-Instruct", "train.global_batch_size": 128,
             "train.micro_batch_size": 4, "train.steps_per_generation": 4}
    moe = {**MOE, "train.tensor_model_parallel_size": 4, "train.pipeline_model_parallel_size": 2,
           "train.expert_model_parallel_size": 4, "train.global_batch_size": 8, "train.sequence_parallel": True}
    for changes in (dense, moe):
        assert not {i for i in ids(changes) if i.startswith("MEGATRON-")}, changes


def test_dp_alignment_is_checked_on_prompts_not_completions():
    """64 completions of G 8 are 8 prompts; over DP 8 one prompt per rank passes, over micro_batch_size 2 it does not
    (ms-swift divides the per-rank prompts by the micro batch, megatron_args.py:321-325)."""
    assert "MEGATRON-DP-ALIGN" not in ids({})
    f = next(f for f in assess(spec_with({"train.micro_batch_size": 2, "train.global_batch_size": 64})).findings
             if f.id == "MEGATRON-DP-ALIGN")
    assert "= 1 must be divisible by micro_batch_size (2)" in f.message
    assert f.apply == {"train.global_batch_size": 128}


def test_a_rejected_feature_names_the_megatron_equivalent():
    found = {f.fields[0]: f for f in assess(spec_with({"rollout.async_generate": True, "train.num_iterations": 2,
                                                       "train.sync_ref_model": True})).findings
             if f.id == "MEGATRON-UNSUPPORTED"}
    assert set(found) == {"rollout.async_generate", "train.num_iterations", "train.sync_ref_model"}
    assert "steps_per_generation" in found["train.num_iterations"].fix
    assert "Ray mode" in found["rollout.async_generate"].fix


def test_hf_trainer_flags_are_refused_with_their_megatron_equivalents():
    cmd = train_command(spec_with({"train.learning_rate": 1e-6, "train.max_steps": 100,
                                   "train.gradient_accumulation_steps": 4, "train.deepspeed": "zero3"}))
    fixes = {f.fields[0]: f.fix for f in cmd.findings if f.id == "ENGINE-FLAG"}
    assert "use lr" in fixes["train.learning_rate"] and "train_iters" in fixes["train.max_steps"]
    assert "global_batch_size" in fixes["train.gradient_accumulation_steps"]
    assert "use_distributed_optimizer" in fixes["train.deepspeed"]
    assert not {"--learning_rate", "--max_steps", "--deepspeed"} & set(cmd.argv)


def test_rlhf_type_grpo_is_always_given():
    """megatron rlhf runs DPO unless --rlhf_type says otherwise (rlhf_args.py: rlhf_type = 'dpo')."""
    cmd = train_command(spec_with({}))
    assert cmd.argv[:3] == ["rlhf", "--rlhf_type", "grpo"] and "DPO" in dict(cmd.added)["--rlhf_type grpo"]


def test_the_deepspeed_path_has_no_ray_mode_and_says_so():
    cmd = train_command(with_changes(JobSpec(), {"train.model": "m", "train.use_ray": True}))
    (f,) = cmd.findings
    assert f.id == "ENGINE-FLAG" and "megatron rlhf argument" in f.message and "no Ray mode" in f.fix


def test_vllm_tp_stays_within_a_node_on_megatron_too():
    nodes = [{"host": "gpu-a", "gpus": [0, 1, 2, 3]}, {"host": "gpu-b", "gpus": [0, 1, 2, 3]}]
    found = ids({"cluster.nodes": nodes, "cluster.master_addr": "10.0.0.1", "rollout.vllm_tensor_parallel_size": 8})
    assert "VLLM-TP-WORLD" in found
    assert "VLLM-TP-WORLD" not in ids({"cluster.nodes": nodes, "cluster.master_addr": "10.0.0.1",
                                       "rollout.vllm_tensor_parallel_size": 4})
