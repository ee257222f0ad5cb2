"""swift_cli: argv per ms-swift dialect — exactly the set fields, grpo-ui's own additions listed with why."""

import shlex

import pytest

from grpo_ui.checks.assess import assess
from grpo_ui.core.shell import join as shell_join
from grpo_ui.importer import import_scripts
from grpo_ui.spec.model import JobSpec
from grpo_ui.spec.paths import with_changes
from grpo_ui.spec.resolve import effective_output_dir, model_name
from grpo_ui.spec.swift_args import dialect_of
from grpo_ui.spec.swift_cli import rollout_command, train_command
from grpo_ui.spec.yaml_io import spec_from_yaml, spec_to_yaml

BASE = {"train.model": "Qwen/Qwen2.5-7B-Instruct", "train.dataset": ["AI-MO/NuminaMath-TIR#1000"],
        "train.reward_funcs": ["accuracy", "format"], "train.num_generations": 4, "train.tuner_type": "lora",
        "rollout.use_vllm": True, "rollout.vllm_mode": "colocate"}


def spec(**changes) -> JobSpec:
    return with_changes(JobSpec(), {**BASE, **{k.replace("__", "."): v for k, v in changes.items()}})


def flags(argv):
    return [a for a in argv if a.startswith("--")]


@pytest.mark.parametrize("version,dialect", [("4.6", "4.1+"), ("4.1.0", "4.1+"), ("4.0.2", "4.0"),
                                             ("3.12", "3.5-3.12"), ("3.5", "3.5-3.12"), ("3.4.1", "3.2-3.4"),
                                             ("3.2", "3.2-3.4")])
def test_dialects(version, dialect):
    assert dialect_of(version) == dialect


def test_too_old_version_is_refused_with_a_reason():
    with pytest.raises(ValueError, match="no GRPO"):
        dialect_of("3.1")


def test_tuner_flag_follows_the_version():
    assert "--tuner_type" in train_command(spec(), "4.6").argv
    assert "--tuner_type" in train_command(spec(), "4.0").argv
    argv = train_command(spec(), "3.9").argv
    assert "--train_type" in argv and "--tuner_type" not in argv


def test_colocate_in_3_2_uses_num_infer_workers_and_no_vllm_mode():
    s = spec(**{"cluster__nodes": [{"host": "localhost", "gpus": [0, 1, 2, 3]}]})
    argv = train_command(s, "3.3").argv
    assert "--vllm_mode" not in argv
    assert argv[argv.index("--num_infer_workers") + 1] == "4"
    new = train_command(s, "3.5").argv
    assert new[new.index("--vllm_mode") + 1] == "colocate" and "--num_infer_workers" not in new


def test_flag_the_version_lacks_is_a_finding_not_a_silent_drop():
    cmd = train_command(spec(train__generation_batch_size=32), "3.4")
    assert "--generation_batch_size" not in cmd.argv
    assert [f.id for f in cmd.findings] == ["VERSION-FLAG-UNSUPPORTED"]
    assert "3.4" in cmd.findings[0].message and cmd.findings[0].fields == ("train.generation_batch_size",)
    assert not train_command(spec(train__generation_batch_size=32), "3.5").findings
    s = spec(train__importance_sampling_level="sequence")
    old = train_command(s, "3.6")
    assert [f.id for f in old.findings] == ["VERSION-FLAG-UNSUPPORTED"]
    fixed = with_changes(s, old.findings[0].apply)  # the one-click fix: back to the default, nothing to say
    assert not train_command(fixed, "3.6").findings and "--importance_sampling_level" not in train_command(fixed,
                                                                                                         "3.6").argv


def test_only_set_fields_are_rendered_and_unset_ones_mean_ms_swifts_default():
    argv = train_command(spec()).argv
    assert argv == ["rlhf", "--rlhf_type", "grpo", "--model", "Qwen/Qwen2.5-7B-Instruct", "--tuner_type", "lora",
                    "--num_generations", "4", "--reward_funcs", "accuracy", "format", "--dataset",
                    "AI-MO/NuminaMath-TIR#1000", "--use_vllm", "true", "--vllm_mode", "colocate"]
    assert "--logging_steps" in train_command(spec(train__logging_steps=5)).argv  # set, though equal to the default
    # ms-swift held out 1 % for evaluation before 3.6: an unset ratio means that there, a set 0.0 is written
    old = train_command(spec(train__split_dataset_ratio=0.0), "3.5").argv
    assert old[old.index("--split_dataset_ratio") + 1] == "0.0"
    assert "--split_dataset_ratio" not in train_command(spec(), "3.5").argv


def test_grpo_uis_own_flags_are_listed_with_the_reason():
    assert train_command(spec()).added == [("--rlhf_type grpo", "swift rlhf runs DPO unless told otherwise")]
    old = train_command(spec(**{"cluster__nodes": [{"host": "localhost", "gpus": [0, 1, 2, 3]}]}), "3.3")
    flags_, why = old.added[1]
    assert flags_ == "--num_infer_workers 4" and "num_infer_workers" in why


def test_set_ness_survives_yaml_and_with_changes():
    s = with_changes(spec(train__logging_steps=5), {"train.beta": 0.0})
    assert {"logging_steps", "beta", "model"} <= s.train.model_fields_set
    assert "temperature" not in s.train.model_fields_set
    back = spec_from_yaml(spec_to_yaml(s))
    assert back.train.model_fields_set == s.train.model_fields_set and back == s
    assert "logging_steps: 5" in spec_to_yaml(s) and "temperature" not in spec_to_yaml(s)


def test_effective_output_dir_follows_ms_swift():
    assert effective_output_dir(spec()) == "output/Qwen2.5-7B-Instruct"
    assert effective_output_dir(spec(train__output_dir="/data/runs")) == "/data/runs"
    assert model_name("/root/.cache/huggingface/hub/models--Qwen--Qwen2.5-7B/snapshots/abc/") == "Qwen2.5-7B"
    assert model_name("/models/Qwen2___5-7B") == "Qwen2.5-7B"


def test_server_mode_lists_every_rollout_node_and_keeps_colocate_flags_the_user_set():
    s = spec(rollout__vllm_mode="server", rollout__sleep_level=1, **{"cluster__nodes": [
        {"host": "t0", "gpus": [0, 1]}, {"host": "r0", "role": "rollout"}, {"host": "r1", "address": "10.0.0.9",
                                                                           "role": "rollout"}]})
    cmd = train_command(s)
    i = cmd.argv.index("--vllm_server_host")
    assert cmd.argv[i:i + 6] == ["--vllm_server_host", "r0", "10.0.0.9", "--vllm_server_port", "8000", "8000"]
    assert "server mode" in cmd.added[-1][1]
    assert "--sleep_level" in cmd.argv  # ms-swift parses it (and forces it to 0); the rules say so
    assert "SLEEP-LEVEL-IGNORED" in {f.id for f in assess(s).findings}
    assert "VERSION-MULTI-SERVER" in [f.id for f in train_command(s, "3.6").findings]
    given = with_changes(s, {"rollout.vllm_server_host": ["10.1.2.3"], "rollout.vllm_server_port": [8001]})
    argv = train_command(given).argv
    assert argv[argv.index("--vllm_server_host") + 1] == "10.1.2.3" and argv.count("--vllm_server_host") == 1


def test_rollout_command_uses_old_names_before_3_7():
    s = spec(server__vllm_tensor_parallel_size=2, server__vllm_gpu_memory_utilization=0.8)
    assert "--vllm_tensor_parallel_size" in rollout_command(s, "4.6").argv
    old = rollout_command(s, "3.6").argv
    assert "--tensor_parallel_size" in old and "--gpu_memory_utilization" in old


def test_values_that_need_quoting_survive_shell_join():
    s = spec(train__system="It's $HOME `x`\nline2", train__dataset=["a b#10", "-weird"])
    argv = train_command(s).argv
    assert shlex.split(shell_join(argv)) == argv


@pytest.mark.parametrize("changes", [
    {},
    {"train.tuner_type": "full", "train.deepspeed": "zero3", "train.beta": 0.0, "train.lora_rank": 16,
     "rollout.sleep_level": 1, "rollout.offload_model": True, "train.system": "a 'b' \"c\" $d"},
    {"rollout.vllm_mode": "server", "rollout.async_generate": True, "rollout.vllm_server_host": ["h1", "h2"],
     "rollout.vllm_server_port": [8000, 8001], "train.loss_type": "dapo", "train.epsilon_high": 0.28},
    {"rollout.use_vllm": False, "rollout.vllm_mode": None, "train.use_liger_kernel": True},
    {"train.logging_steps": 5, "train.report_to": ["tensorboard", "wandb"], "train.learning_rate": 1e-6,
     "train.save_total_limit": 2, "train.deepspeed": "zero2", "train.dataloader_num_workers": 4,
     "train.num_train_epochs": 1},
])
def test_spec_to_argv_to_import_round_trip(changes):
    s = with_changes(spec(), changes)
    back, findings = import_scripts([("x.sh", shell_join(["swift", *train_command(s).argv]))], s.swift_version)
    assert back.train == s.train and back.rollout == s.rollout
    assert back.train.model_fields_set == s.train.model_fields_set
    assert not [f for f in findings if f.severity != "info"]


def test_import_then_args_on_the_command_line(tmp_path, capsys):
    """`import` reads a config next to the script (the command line may); `args` prints what grpo-ui adds, and why."""
    from grpo_ui.__main__ import main

    (tmp_path / "cfg.yaml").write_text("model: Qwen/Qwen3-8B\ndataset: [d]\nreward_funcs: [format]\n")
    (tmp_path / "run.sh").write_text("NPROC_PER_NODE=2 swift rlhf cfg.yaml --rlhf_type grpo --logging_steps 1\n")
    assert main(["import", str(tmp_path / "run.sh")]) == 0
    (tmp_path / "job.yaml").write_text(capsys.readouterr().out)
    assert main(["args", str(tmp_path / "job.yaml")]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "# grpo-ui adds --rlhf_type grpo: swift rlhf runs DPO unless told otherwise"
    assert shlex.split(out[-1]) == ["swift", "rlhf", "--rlhf_type", "grpo", "--model", "Qwen/Qwen3-8B", "--reward_funcs",
                                    "format", "--dataset", "d", "--logging_steps", "1"]
