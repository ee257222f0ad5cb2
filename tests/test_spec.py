"""JobSpec: declarations, YAML round-trips, path edits and errors that name the field."""

import pytest

from grpo_ui.spec.cluster import Node
from grpo_ui.spec.errors import SpecError
from grpo_ui.spec.fields import GROUPS, parse_version
from grpo_ui.spec.model import ARGS, ARGS_BY_PATH, JobSpec
from grpo_ui.spec.paths import get_path, with_changes
from grpo_ui.spec.resolve import resolve
from grpo_ui.spec.yaml_io import spec_from_yaml, spec_to_yaml


def full_spec() -> JobSpec:
    return with_changes(JobSpec(), {
        "name": "qwen7b-math", "swift_version": "4.5",
        "train.model": "Qwen/Qwen2.5-7B-Instruct", "train.dataset": ["AI-MO/NuminaMath-TIR#5000", "local.jsonl"],
        "train.reward_funcs": ["accuracy", "format"], "train.reward_weights": [1.0, 0.5],
        "train.tuner_type": "full", "train.deepspeed": "zero3", "train.num_generations": 16,
        "train.system": "You are 'helpful'.\nThink step by step: $x `y`", "train.beta": 0.0,
        "rollout.vllm_mode": "server", "rollout.async_generate": True, "rollout.vllm_server_group_port": [51300],
        "server.vllm_data_parallel_size": 2,
        "cluster.nodes": [{"host": "gpu-a", "gpus": [0, 1, 2, 3], "python_env": "/opt/venv"},
                          {"host": "gpu-b", "gpus": [0, 1, 2, 3], "user": "ml", "port": 2222},
                          {"host": "roll-a", "role": "rollout", "gpus": [0, 1]}],
        "env": {"NCCL_DEBUG": "INFO"}, "secret_env": ["WANDB_API_KEY"], "extra_args": ["--save_only_model", "true"],
    })


def test_yaml_round_trip_is_exact():
    spec = full_spec()
    text = spec_to_yaml(spec)
    again = spec_from_yaml(text)
    assert again == spec
    assert spec_to_yaml(again) == text


def test_yaml_keeps_only_changes_and_default_spec_is_tiny():
    text = spec_to_yaml(JobSpec())
    assert text.strip().splitlines() == ["name: grpo-job", "swift_version: '4.6'"]
    assert "num_generations: 16" in spec_to_yaml(full_spec())


def test_every_declared_argument_has_help_group_and_a_valid_default():
    assert len(ARGS) > 100
    for d in ARGS:
        assert d.help and d.group in GROUPS, d.path
        if d.since:
            parse_version(d.since)
    assert ARGS_BY_PATH["train.tuner_type"].flag_for("3.9") == "train_type"
    assert ARGS_BY_PATH["train.tuner_type"].flag_for("4.0") == "tuner_type"
    assert not ARGS_BY_PATH["train.generation_batch_size"].accepted_in("3.4")
    assert ARGS_BY_PATH["train.generation_batch_size"].accepted_in("3.5.0")


@pytest.mark.parametrize("text,path", [
    ("train: {num_generations: 0}", "train.num_generations"),
    ("train: {tuner_type: qlora}", "train.tuner_type"),
    ("train: {num_genrations: 4}", "train.num_genrations"),
    ("cluster: {nodes: [{host: 'a b'}]}", "cluster.nodes[0].host"),
    ("cluster: {nodes: [{host: a, gpus: [0, 0]}]}", "cluster.nodes[0].gpus"),
    ("swift_version: banana", "swift_version"),
    ("env: {'BAD-NAME': x}", "env"),
    ("cluster: {nodes: [{host: a, env: {'X;echo INJECTED;Y': '1'}}]}", "cluster.nodes[0].env"),
    ("secret_env: ['A B']", "secret_env"),
])
def test_bad_yaml_names_the_field(text, path):
    with pytest.raises(SpecError) as e:
        spec_from_yaml(text, "job.yaml")
    assert path in [p for p, _ in e.value.problems]
    assert "job.yaml" in str(e.value)


def test_not_yaml_and_not_a_mapping_are_clear_errors():
    for text in ("train: [", "- a\n- b"):
        with pytest.raises(SpecError, match="spec"):
            spec_from_yaml(text)


def test_paths_read_and_write_nested_fields():
    spec = full_spec()
    assert get_path(spec, "cluster.nodes[1].port") == 2222
    changed = with_changes(spec, {"cluster.nodes[1].port": 22, "train.num_generations": 8})
    assert (changed.cluster.nodes[1].port, changed.train.num_generations) == (22, 8)
    assert spec.cluster.nodes[1].port == 2222  # the original is untouched
    with pytest.raises(SpecError, match="no such field"):
        with_changes(spec, {"train.nope": 1})
    with pytest.raises(SpecError, match="cluster.nodes"):
        with_changes(spec, {"cluster.nodes[7].port": 1})


def test_cluster_helpers():
    spec = full_spec()
    eff = resolve(spec)
    assert eff.world_size == 8 and eff.master_addr == "gpu-a"
    assert eff.server_endpoints == (("roll-a", 8000),)
    assert Node(host="localhost").is_local and not Node(host="gpu-a").is_local
