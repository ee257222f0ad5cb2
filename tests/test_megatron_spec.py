"""The Megatron dialect of the job spec (issue 29): the engine a job names, arguments declared once with the engines
that take them and megatron rlhf's own defaults, the effective values resolve() derives once (DP, micro-batches, the
generation batch, the run's length, Ray mode's placement), and an argument of the other engine as an error naming it.

Defaults and formulas are ms-swift 4.6's (swift/megatron/arguments/megatron_args.py); tests/test_megatron_oracle.py
checks them against its own argument classes.
"""

from pathlib import Path

import pytest

from grpo_ui.spec.model import ARGS, ARGS_BY_PATH, JobSpec
from grpo_ui.spec.paths import with_changes
from grpo_ui.spec.resolve import resolve
from grpo_ui.spec.swift_cli import train_command
from grpo_ui.spec.yaml_io import load_spec, spec_to_yaml


def megatron(gpus_per_node: int = 8, nodes: int = 1, rollout_nodes: int = 0, **changes) -> JobSpec:
    cluster = [{"host": f"10.0.0.{i + 1}", "gpus": list(range(gpus_per_node))} for i in range(nodes)]
    cluster += [{"host": f"10.0.1.{i + 1}", "gpus": list(range(gpus_per_node)), "role": "rollout"}
                for i in range(rollout_nodes)]
    return with_changes(JobSpec(engine="megatron"), {
        "train.model": "Qwen/Qwen3-8B", "train.dataset": ["d.jsonl"], "train.reward_funcs": ["accuracy"],
        "rollout.vllm_mode": "colocate", "cluster.nodes": cluster, **changes})


def test_a_job_without_an_engine_is_the_swift_rlhf_job_it_always_was():
    """Job history in the database holds spec YAML written before engines existed: it loads unchanged, writes back
    without an engine, and resolves to the same values."""
    spec = load_spec(Path(__file__).parent / "fixtures" / "seeds" / "003_multi_node_hang.yaml")
    assert spec.engine == "swift" and "engine" not in spec_to_yaml(spec)
    eff = resolve(spec)
    assert eff.megatron is None and eff.world_size == eff.nnodes * eff.nproc_per_node
    assert train_command(spec).program == "swift"


def test_declared_megatron_defaults_differ_where_ms_swift_says():
    spec = JobSpec(engine="megatron")
    value = {path: spec.value(ARGS_BY_PATH[path]) for path in (
        "train.tuner_type", "train.padding_free", "train.num_train_epochs",
        "train.dataloader_num_workers", "rollout.use_vllm", "train.global_batch_size", "train.finetune")}
    assert value == {"train.tuner_type": "full", "train.padding_free": True,
                     "train.num_train_epochs": None, "train.dataloader_num_workers": 4, "rollout.use_vllm": True,
                     "train.global_batch_size": 16, "train.finetune": True}
    swift = JobSpec()
    assert swift.value(ARGS_BY_PATH["train.tuner_type"]) == "lora" and not swift.value(ARGS_BY_PATH["rollout.use_vllm"])
    # top_k/top_p changed to -1/1.0 in 4.1 for swift rlhf, in 4.3 for megatron rlhf
    assert JobSpec(engine="megatron", swift_version="4.2").value(ARGS_BY_PATH["train.top_k"]) == 50
    assert JobSpec(swift_version="4.2").value(ARGS_BY_PATH["train.top_k"]) == -1


def test_every_argument_names_its_engines():
    assert all(d.engines and set(d.engines) <= {"swift", "megatron"} for d in ARGS)
    megatron_only = {d.name for d in ARGS if d.engines == ("megatron",)}
    assert {"tensor_model_parallel_size", "pipeline_model_parallel_size", "context_parallel_size",
            "expert_model_parallel_size", "expert_tensor_parallel_size", "sequence_parallel", "micro_batch_size",
            "global_batch_size", "recompute_granularity", "recompute_method", "recompute_num_layers",
            "use_distributed_optimizer", "offload_bridge", "optimizer_cpu_offload", "use_precision_aware_optimizer",
            "train_iters", "finetune", "no_save_optim", "no_save_rng", "attention_backend", "use_ray"} <= megatron_only
    swift_only = {d.name for d in ARGS if d.engines == ("swift",)}
    assert {"per_device_train_batch_size", "gradient_accumulation_steps", "deepspeed", "learning_rate",
            "max_steps"} <= swift_only
    # every argument one engine lacks says what the other uses instead (the finding's fix)
    assert all(d.instead for d in ARGS if len(d.engines) == 1)


@pytest.mark.parametrize("tp,pp,cp,dp", [(1, 1, 1, 8), (2, 1, 1, 4), (4, 2, 1, 1), (2, 2, 2, 1), (3, 1, 1, 2)])
def test_dp_is_the_world_over_tp_pp_cp(tp, pp, cp, dp):
    eff = resolve(megatron(**{"train.tensor_model_parallel_size": tp, "train.pipeline_model_parallel_size": pp,
                              "train.context_parallel_size": cp}))
    assert eff.megatron.world == 8 == eff.world_size and eff.megatron.dp == dp
    assert (eff.megatron.tp, eff.megatron.pp, eff.megatron.cp) == (tp, pp, cp)


def test_batch_values_count_completions_like_ms_swift():
    """dense_colocate.sh's arithmetic: DP 8, global 128 = micro 4 × DP 8 × 4 micro-steps; generation batch 128 × 4 =
    512, 64 prompts per rollout."""
    eff = resolve(megatron(**{"train.global_batch_size": 128, "train.micro_batch_size": 4,
                              "train.steps_per_generation": 4}))
    m = eff.megatron
    assert (m.dp, m.num_microbatches, m.generation_batch, m.steps_per_generation, m.prompts_per_rollout) == (
        8, 4, 512, 4, 64)
    assert eff.generation_batch == 512 and eff.grad_accum == 4 and eff.rollout_steps == 4
    # generation_batch_size alone: steps per generation follow from it; neither: one step per rollout
    assert resolve(megatron(**{"train.generation_batch_size": 64})).megatron.steps_per_generation == 4
    assert resolve(megatron()).megatron.generation_batch == 16


def test_train_iters_from_epochs_needs_the_rows():
    eff = resolve(megatron(**{"train.num_train_epochs": 1, "train.global_batch_size": 64,
                              "estimate.dataset_rows": 1000}))
    assert eff.megatron.train_iters == 1000 // 8 * 8 * 8 * 1 // 64  # rows to whole DP steps × G × epochs ÷ global
    assert resolve(megatron(**{"train.train_iters": 100})).megatron.train_iters == 100
    assert resolve(megatron(**{"train.num_train_epochs": 1})).megatron.train_iters is None


def test_sequence_parallel_and_recompute_as_ms_swift_applies_them():
    assert not resolve(megatron(**{"train.sequence_parallel": True})).megatron.sequence_parallel  # TP 1: off
    eff = resolve(megatron(**{"train.sequence_parallel": True, "train.tensor_model_parallel_size": 2,
                              "train.recompute_granularity": "none"}))
    assert eff.megatron.sequence_parallel and eff.megatron.recompute is None
    assert resolve(megatron()).megatron.recompute == "selective"


def test_ray_placement_comes_from_the_cluster():
    colocated = resolve(megatron(nodes=2, **{"train.use_ray": True})).ray
    assert (colocated.colocate, colocated.train_gpus, colocated.rollout_gpus, colocated.nnodes,
            colocated.sleep_level, colocated.total_gpus) == (True, 16, 16, 2, 1, 16)
    separate = resolve(megatron(gpus_per_node=4, rollout_nodes=1, **{
        "train.use_ray": True, "rollout.vllm_mode": None, "server.vllm_tensor_parallel_size": 2}))
    ray = separate.ray
    assert (ray.colocate, ray.train_gpus, ray.rollout_gpus, ray.sleep_level, ray.replicas, ray.total_gpus) == (
        False, 4, 4, 0, 2, 8)
    assert separate.vllm_mode == "separate" and not separate.server and separate.world_size == 4
    given = resolve(megatron(**{"train.use_ray": True, "rollout.sleep_level": 2})).ray
    assert given.sleep_level == 2


def test_an_argument_of_the_other_engine_is_an_error_naming_it():
    cmd = train_command(megatron(**{"train.per_device_train_batch_size": 4, "train.learning_rate": 1e-6}))
    found = {f.fields[0]: f for f in cmd.findings}
    assert set(found) == {"train.per_device_train_batch_size", "train.learning_rate"}
    assert all(f.id == "ENGINE-FLAG" and f.severity == "error" for f in found.values())
    assert "--per_device_train_batch_size" in found["train.per_device_train_batch_size"].message
    assert "micro_batch_size" in found["train.per_device_train_batch_size"].fix
    assert "lr" in found["train.learning_rate"].fix and "--learning_rate" not in cmd.argv
    cmd = train_command(with_changes(JobSpec(), {"train.model": "m", "train.tensor_model_parallel_size": 2}))
    assert [f.id for f in cmd.findings] == ["ENGINE-FLAG"] and "--tensor_model_parallel_size" not in cmd.argv
    assert "megatron rlhf argument" in cmd.findings[0].message


def test_a_megatron_job_runs_megatron_rlhf():
    cmd = train_command(megatron(**{"train.tensor_model_parallel_size": 2, "train.finetune": True}))
    assert cmd.words[:4] == ["megatron", "rlhf", "--rlhf_type", "grpo"] and not cmd.findings
    assert cmd.argv[cmd.argv.index("--tensor_model_parallel_size") + 1] == "2"
