"""swift_cli: argv per ms-swift dialect, and launch-script import with findings for unknown/renamed/removed flags."""

import shlex

import pytest

from grpo_ui.shell import join as shell_join
from grpo_ui.spec import JobSpec, spec_to_yaml, with_changes
from grpo_ui.swift_cli import dialect_of, import_scripts, parse_script, rollout_command, train_command

BASE = {"train.model": "Qwen/Qwen2.5-7B-Instruct", "train.dataset": ["AI-MO/NuminaMath-TIR#1000"],
        "train.reward_funcs": ["accuracy", "format"], "train.num_generations": 4}


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


def test_a_default_that_ms_swift_changed_is_written_for_older_targets():
    """ms-swift held out 1 % of the data for evaluation before 3.6 (split_dataset_ratio 0.01); our 0 must be said."""
    old = train_command(spec(), "3.5").argv
    assert old[old.index("--split_dataset_ratio") + 1] == "0.0"
    assert "--split_dataset_ratio" not in train_command(spec(), "3.6").argv
    assert "--split_dataset_ratio" not in train_command(spec(train__split_dataset_ratio=0.01), "3.5").argv


def test_server_mode_lists_every_rollout_node_and_hides_colocate_flags():
    s = spec(rollout__vllm_mode="server", rollout__sleep_level=1, **{"cluster__nodes": [
        {"host": "t0", "gpus": [0, 1]}, {"host": "r0", "role": "rollout"}, {"host": "r1", "address": "10.0.0.9",
                                                                           "role": "rollout"}]})
    argv = train_command(s).argv
    i = argv.index("--vllm_server_host")
    assert argv[i:i + 6] == ["--vllm_server_host", "r0", "10.0.0.9", "--vllm_server_port", "8000", "8000"]
    assert "--sleep_level" not in argv and "--vllm_gpu_memory_utilization" not in argv
    old = train_command(s, "3.6")
    assert "VERSION-MULTI-SERVER" in [f.id for f in old.findings]


def test_rollout_command_uses_old_names_before_3_7():
    s = spec(server__vllm_tensor_parallel_size=2, server__vllm_gpu_memory_utilization=0.8)
    assert "--vllm_tensor_parallel_size" in rollout_command(s, "4.6").argv
    old = rollout_command(s, "3.6").argv
    assert "--tensor_parallel_size" in old and "--gpu_memory_utilization" in old


def test_values_that_need_quoting_survive_shell_join():
    s = spec(train__system="It's $HOME `x`\nline2", train__dataset=["a b#10", "-weird"])
    argv = train_command(s).argv
    assert shlex.split(shell_join(argv)) == argv


OLD_SCRIPT = r"""#!/bin/bash
# ms-swift 3.2 era, two GPUs of four for vLLM
export CUDA_VISIBLE_DEVICES=0,1,2,3
WANDB_API_KEY=abc NPROC_PER_NODE=4 \
nohup swift rlhf \
    --rlhf_type grpo \
    --model Qwen/Qwen2.5-7B \
    --train_type lora \
    --use_vllm true \
    --vllm_device auto \
    --num_infer_workers 2 \
    --gc_collect_after_offload true \
    --tensor_parallel_size 2 \
    --reward_funcs accuracy format \
    --dataset 'AI-MO/NuminaMath-TIR#1000' \
    --num_generations 8 \
    --system "You are a 'math' tutor" \
    --my_custom_flag 3 > train.log 2>&1 &
"""


def test_import_3_2_script_for_4_6_names_every_renamed_and_removed_flag():
    s, findings = import_scripts([("old.sh", OLD_SCRIPT)], "4.6")
    by_id = {}
    for f in findings:
        by_id.setdefault(f.id, []).append(f.message)
    removed = " ".join(by_id["IMPORT-REMOVED-FLAG"])
    for flag in ("--vllm_device", "--num_infer_workers", "--gc_collect_after_offload"):
        assert flag in removed
    renamed = " ".join(by_id["IMPORT-RENAMED-FLAG"])
    assert "--train_type" in renamed and "--tensor_parallel_size" in renamed
    assert "--my_custom_flag" in " ".join(by_id["IMPORT-UNKNOWN-FLAG"])
    assert s.extra_args == ["--my_custom_flag", "3"]
    assert s.train.system == "You are a 'math' tutor"
    assert s.train.dataset == ["AI-MO/NuminaMath-TIR#1000"]
    assert s.rollout.vllm_tensor_parallel_size == 2 and s.rollout.vllm_mode == "colocate"
    assert s.cluster.nodes[0].gpus == [0, 1, 2, 3]
    assert s.secret_env == ["WANDB_API_KEY"] and "abc" not in spec_to_yaml(s)


def node_script(rank: int, nproc: int = 4, extra: str = "") -> str:
    return (f"export NNODES=2 NODE_RANK={rank} MASTER_ADDR=10.1.1.1 MASTER_PORT=29500 NPROC_PER_NODE={nproc}\n"
            f"export CUDA_VISIBLE_DEVICES={','.join(map(str, range(nproc)))}\n"
            "swift rlhf --rlhf_type grpo --model m --dataset d --reward_funcs format --use_vllm true "
            f"--vllm_mode colocate{extra}\n")


def test_import_several_node_scripts_builds_the_cluster_and_flags_disagreements():
    s, findings = import_scripts([("n1.sh", node_script(1)), ("n0.sh", node_script(0))])
    assert [n.host for n in s.cluster.nodes] == ["10.1.1.1", "node1"]
    assert s.world_size() == 8 and s.cluster.master_addr == "10.1.1.1"
    assert not [f for f in findings if f.severity == "error"]
    _, bad = import_scripts([("n0.sh", node_script(0)), ("n1.sh", node_script(1, 2, " --num_generations 4"))])
    msgs = " ".join(f.message for f in bad if f.severity == "error")
    assert "--num_generations" in msgs and "NPROC_PER_NODE" in msgs


def test_import_positional_yaml_with_env_block(tmp_path):
    (tmp_path / "grpo.yaml").write_text(
        "ENV: {NPROC_PER_NODE: 2, CUDA_VISIBLE_DEVICES: '0,1'}\nrlhf_type: grpo\nmodel: Qwen/Qwen3-8B\n"
        "reward_funcs: [accuracy, format]\nuse_vllm: true\nvllm_mode: colocate\ndataset: [d1]\nnum_generations: 8\n")
    s, findings = import_scripts([("run.sh", "swift rlhf grpo.yaml --num_generations 16 2>&1 | tee log\n")],
                                 base_dir=tmp_path)
    assert s.train.model == "Qwen/Qwen3-8B" and s.train.reward_funcs == ["accuracy", "format"]
    assert s.train.num_generations == 16  # the CLI flag overrides the file
    assert s.cluster.nodes[0].gpus == [0, 1]
    assert not findings


def test_import_config_flag_form_of_3_10(tmp_path):
    (tmp_path / "c.yaml").write_text("model: m\ndataset: [d]\nreward_funcs: [format]\n")
    s, findings = import_scripts([("r.sh", "swift rlhf --config c.yaml --rlhf_type grpo")], "4.6", tmp_path)
    assert s.train.model == "m"


def test_import_reports_non_grpo_and_missing_command():
    _, f = import_scripts([("dpo.sh", "swift rlhf --rlhf_type dpo --model m")])
    assert "IMPORT-NOT-GRPO" in [x.id for x in f]
    cmds, f = parse_script("echo hello\n", "x.sh")
    assert not cmds and f[0].id == "IMPORT-NO-COMMAND"


def test_import_rollout_script_fills_the_server_section():
    roll = "CUDA_VISIBLE_DEVICES=0,1 swift rollout --model m --vllm_tensor_parallel_size 2 --port 8001\n"
    s, _ = import_scripts([("t.sh", node_script(0) + "\n"), ("r.sh", roll)])
    assert s.server.vllm_tensor_parallel_size == 2 and s.server.port == 8001
    assert [n.role for n in s.cluster.nodes] == ["trainer", "rollout"]


@pytest.mark.parametrize("changes", [
    {},
    {"train.tuner_type": "full", "train.deepspeed": "zero3", "train.beta": 0.0, "train.lora_rank": 16,
     "rollout.sleep_level": 1, "rollout.offload_model": True, "train.system": "a 'b' \"c\" $d"},
    {"rollout.vllm_mode": "server", "rollout.async_generate": True, "rollout.vllm_server_host": ["h1", "h2"],
     "rollout.vllm_server_port": [8000, 8001], "train.loss_type": "dapo", "train.epsilon_high": 0.28},
    {"rollout.use_vllm": False, "rollout.vllm_mode": None, "train.use_liger_kernel": True},
])
def test_spec_to_argv_to_import_round_trip(changes):
    s = with_changes(spec(), changes)
    back, findings = import_scripts([("x.sh", shell_join(["swift", *train_command(s).argv]))], s.swift_version)
    assert back.train == s.train and back.rollout == s.rollout
    assert not [f for f in findings if f.severity != "info"]
