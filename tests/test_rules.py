"""Every rule: a spec that triggers it and a near-identical one that does not; the field reports as fixtures."""

from pathlib import Path

import pytest

from grpo_ui.checks.assess import assess
from grpo_ui.checks.rules import RULES, validate
from grpo_ui.importer import import_scripts
from grpo_ui.spec.model import JobSpec
from grpo_ui.spec.paths import with_changes
from grpo_ui.spec.yaml_io import load_spec
from tests.test_megatron_rules import MEGATRON_CASES

BASE = {"train.model": "Qwen/Qwen2.5-7B-Instruct", "train.dataset": ["d"], "train.reward_funcs": ["accuracy"],
        "train.num_generations": 4, "train.dataloader_num_workers": 4, "rollout.use_vllm": True,
        "rollout.vllm_mode": "colocate", "rollout.vllm_gpu_memory_utilization": 0.5,
        "cluster.nodes": [{"host": "gpu-a", "gpus": [0, 1, 2, 3], "gpu_model": "A100 80GB"}]}
TWO_NODES = [{"host": "gpu-a", "gpus": [0, 1, 2, 3]}, {"host": "gpu-b", "gpus": [0, 1, 2, 3]}]
SERVER = {"rollout.vllm_mode": "server", "cluster.nodes": [{"host": "gpu-a", "gpus": [0, 1, 2, 3]},
                                                           {"host": "roll-a", "role": "rollout", "gpus": [0]}]}

# id: (changes that trigger it, changes to the same spec that don't)
CASES = {
    "IMPORT-UNRESOLVED": ({"unresolved": {"train.model": "$MODEL"}}, {"unresolved": {}}),
    "SPEC-MODEL-MISSING": ({"train.model": ""}, {"train.model": "m"}),
    "MODEL-BARE-NAME": ({"train.model": "Qwen3-8B"}, {"train.model": "Qwen/Qwen3-8B"}),
    "SPEC-DATASET-MISSING": ({"train.dataset": []}, {"train.dataset": ["x"]}),
    "TRUNCATION-STRATEGY": ({"train.truncation_strategy": "right"}, {"train.truncation_strategy": "delete"}),
    "REF-MODEL-LORA": ({"train.ref_model": "r"}, {"train.ref_model": "r", "train.tuner_type": "full"}),
    "SOFT-OVERLONG-CACHE": ({"train.reward_funcs": ["soft_overlong"], "train.soft_max_length": 100,
                             "train.soft_cache_length": 100},
                            {"train.reward_funcs": ["soft_overlong"], "train.soft_max_length": 100,
                             "train.soft_cache_length": 50}),
    "WARMUP-BOTH": ({"train.warmup_ratio": 0.1, "train.warmup_steps": 5}, {"train.warmup_ratio": 0.1}),
    "VLLM-MODE-WITHOUT-VLLM": ({"rollout.use_vllm": False}, {"rollout.use_vllm": False, "rollout.vllm_mode": None}),
    "VLLM-MODE-REQUIRED": ({"rollout.vllm_mode": None}, {"rollout.vllm_mode": "colocate"}),
    "VLLM-SERVER-NO-HOST": ({"rollout.vllm_mode": "server"}, {"rollout.vllm_mode": "server",
                                                              "rollout.vllm_server_host": ["h"],
                                                              "cluster.external_rollout": True}),
    "ASYNC-NEEDS-SERVER": ({"rollout.async_generate": True}, {**SERVER, "rollout.async_generate": True}),
    "ASYNC-MULTI-TURN": ({**SERVER, "rollout.async_generate": True, "train.multi_turn_scheduler": "s"},
                         {**SERVER, "train.multi_turn_scheduler": "s"}),
    "TRAINER-GPU-COUNT": ({"cluster.nodes": [TWO_NODES[0], {"host": "gpu-b", "gpus": [0, 1]}]},
                          {"cluster.nodes": TWO_NODES}),
    "VLLM-SERVER-PORTS": ({"rollout.vllm_mode": "server", "rollout.vllm_server_host": ["a", "b"],
                           "rollout.vllm_server_port": [8000, 8001, 8002]},
                          {"rollout.vllm_mode": "server", "rollout.vllm_server_host": ["a", "b"],
                           "rollout.vllm_server_port": [8000, 8001]}),
    "VLLM-SERVER-MAX-LEN": ({**SERVER, "rollout.vllm_max_model_len": 4096}, {**SERVER,
                                                                             "server.vllm_max_model_len": 4096}),
    "VLLM-TP-WITHOUT-VLLM": ({"rollout.use_vllm": False, "rollout.vllm_mode": None,
                              "rollout.vllm_tensor_parallel_size": 2},
                             {"rollout.use_vllm": False, "rollout.vllm_mode": None}),
    "VLLM-TP-WORLD": ({"rollout.vllm_tensor_parallel_size": 3}, {"rollout.vllm_tensor_parallel_size": 2}),
    "FSDP-DEEPSPEED": ({"train.fsdp": "fsdp2", "train.deepspeed": "zero2"}, {"train.fsdp": "fsdp2"}),
    "GRPO-GEN-BATCH-DIV": ({"train.generation_batch_size": 6}, {"train.generation_batch_size": 8}),
    "GRPO-GEN-BATCH-MISMATCH": ({"train.generation_batch_size": 12, "train.steps_per_generation": 2},
                                {"train.generation_batch_size": 8, "train.steps_per_generation": 2}),
    "GRPO-STEPS-PER-GEN": ({"train.steps_per_generation": 0}, {"train.steps_per_generation": 1}),
    "GRPO-BATCH-DIV": ({"train.num_generations": 3}, {"train.num_generations": 2}),
    "PATH-RELATIVE-NO-WORKDIR": ({"train.model": "./models/qwen"},
                                 {"train.model": "./models/qwen", "cluster.workdir": "/data/work"}),
    "ROLLOUT-SERVER-OUTSIDE": ({"rollout.vllm_mode": "server", "rollout.vllm_server_host": ["127.0.0.1"]},
                               {"rollout.vllm_mode": "server", "rollout.vllm_server_host": ["127.0.0.1"],
                                "cluster.external_rollout": True}),
    "CREDENTIAL-UNDECLARED": ({"train.report_to": ["wandb"]}, {"train.report_to": ["wandb"],
                                                               "secret_env": ["WANDB_API_KEY"]}),
    "IMPORT-PARTIAL": ({"import_errors": {"train.model": "line 3: --model has no value"}}, {"import_errors": {}}),
    "GRPO-EVAL-BATCH-DIV": ({"train.split_dataset_ratio": 0.05, "train.num_generations": 8},
                            {"train.split_dataset_ratio": 0.05, "train.num_generations": 8,
                             "train.per_device_eval_batch_size": 2}),
    "GRPO-NUM-GEN-MIN": ({"train.num_generations": 1}, {"train.num_generations": 2}),
    "REWARD-MISSING": ({"train.reward_funcs": []}, {"train.reward_funcs": [], "train.reward_model": ["rm"]}),
    "REWARD-UNKNOWN": ({"train.reward_funcs": ["my_reward"]}, {"train.reward_funcs": ["my_reward"],
                                                               "train.external_plugins": ["plugin.py"]}),
    "REWARD-WEIGHTS-COUNT": ({"train.reward_weights": [1.0, 2.0]}, {"train.reward_weights": [1.0]}),
    "REWARD-PLUGIN-COUNT": ({"train.reward_model": ["a", "b"], "train.reward_model_plugin": ["p"]},
                            {"train.reward_model": ["a"], "train.reward_model_plugin": ["p"]}),
    "LOSS-REAL-SCALE": ({"train.loss_type": "real", "train.scale_rewards": "group"},
                        {"train.loss_type": "real", "train.scale_rewards": "none"}),
    "LIGER-INCOMPATIBLE": ({"train.use_liger_kernel": True, "train.padding_free": True, "train.attn_impl":
                            "flash_attn"}, {"train.use_liger_kernel": True}),
    "PADDING-FREE-ATTN": ({"train.padding_free": True}, {"train.padding_free": True,
                                                         "train.attn_impl": "flash_attn"}),
    "VLLM-LORA": ({"rollout.vllm_enable_lora": True, "train.tuner_type": "full"}, {"rollout.vllm_enable_lora": True}),
    "SLEEP-LEVEL-IGNORED": ({**SERVER, "rollout.sleep_level": 1}, {"rollout.sleep_level": 1}),
    "SLEEP-LEVEL-GAS": ({"swift_version": "3.3", "rollout.sleep_level": 1, "train.gradient_accumulation_steps": 2},
                        {"swift_version": "3.4", "rollout.sleep_level": 1, "train.gradient_accumulation_steps": 2}),
    "OFFLOAD-IGNORED": ({**SERVER, "rollout.offload_model": True}, {"rollout.offload_model": True}),
    "VERSION-GEN-AND-STEPS": ({"swift_version": "4.2", "train.generation_batch_size": 8,
                               "train.steps_per_generation": 2},
                              {"swift_version": "4.4", "train.generation_batch_size": 8,
                               "train.steps_per_generation": 2}),
    "ROLLOUT-GPUS": ({**SERVER, "server.vllm_tensor_parallel_size": 2}, SERVER),
    "CLUSTER-NO-TRAINER": ({"cluster.nodes": [{"host": "r", "role": "rollout"}]}, {"cluster.nodes": [{"host": "r"}]}),
    "CLUSTER-ROLLOUT-UNUSED": ({"cluster.nodes": SERVER["cluster.nodes"]}, SERVER),
    "CLUSTER-GPU-OVERLAP": ({"cluster.nodes": [{"host": "a", "gpus": [0, 1]}, {"host": "a", "gpus": [1],
                                                                                "role": "rollout"}],
                             "rollout.vllm_mode": "server"},
                            {"cluster.nodes": [{"host": "a", "gpus": [0, 1]}, {"host": "a", "gpus": [2],
                                                                                "role": "rollout"}],
                             "rollout.vllm_mode": "server"}),
    "MASTER-LOOPBACK": ({"cluster.nodes": TWO_NODES, "cluster.master_addr": "127.0.0.1"},
                        {"cluster.nodes": TWO_NODES, "cluster.master_addr": "10.0.0.1"}),
    "ADDRESS-PLACEHOLDER": ({"cluster.nodes": TWO_NODES, "cluster.master_addr": "xxx.xxx.xxx.xxx"},
                            {"cluster.nodes": TWO_NODES, "cluster.master_addr": "10.0.0.1"}),
    "PORT-CLASH": ({**SERVER, "server.port": 29500}, {**SERVER, "server.port": 8000}),
    "SEED-ZERO3-KL0": ({"train.deepspeed": "zero3", "train.gradient_accumulation_steps": 8},
                       {"train.deepspeed": "zero2", "train.gradient_accumulation_steps": 8}),
    "SEED-OFFLOAD-STALL": ({"train.model": "Qwen/Qwen2.5-32B-Instruct", "rollout.offload_model": True},
                           {"train.model": "Qwen/Qwen2.5-32B-Instruct"}),
    "SEED-VLLM-UTIL-LOW": ({"train.model": "Qwen/Qwen2.5-32B-Instruct", "rollout.vllm_gpu_memory_utilization": 0.6},
                           {"train.model": "Qwen/Qwen2.5-32B-Instruct", "rollout.vllm_gpu_memory_utilization": 0.6,
                            "rollout.vllm_tensor_parallel_size": 2}),
    "SEED-OFFLOAD-SMALL": ({"train.deepspeed": "zero3_offload"}, {"train.deepspeed": "zero3"}),
    "SEED-DATALOADER-WORKERS": ({"train.dataloader_num_workers": 1, "train.model": "Qwen/Qwen2.5-VL-7B-Instruct"},
                                {"train.dataloader_num_workers": 8, "train.model": "Qwen/Qwen2.5-VL-7B-Instruct"}),
    "SEED-TP-SPANS-NODE": ({"rollout.vllm_tensor_parallel_size": 4, "rollout.offload_model": True},
                           {"rollout.vllm_tensor_parallel_size": 2, "rollout.offload_model": True}),
    "SEED-NODE-DIFFER": ({"cluster.nodes": [TWO_NODES[0], {**TWO_NODES[1], "python_env": "/opt/other"}],
                          "cluster.master_addr": "10.0.0.1"},
                         {"cluster.nodes": TWO_NODES, "cluster.master_addr": "10.0.0.1"}),
    "SEED-REF-MODEL": ({"train.tuner_type": "full"}, {"train.tuner_type": "full", "train.beta": 0.0}),
    "ENV-SECRET-MOVED": ({"env": {"HF_TOKEN": "hf_x"}}, {"env": {"HF_HOME": "/cache"}, "secret_env": ["HF_TOKEN"]}),
    "VERSION-FLAG-UNSUPPORTED": ({"swift_version": "3.9", "train.advantage_estimator": "rloo"},
                                 {"swift_version": "3.10", "train.advantage_estimator": "rloo"}),
    "VERSION-MULTI-SERVER": ({"swift_version": "3.6", "rollout.vllm_mode": "server",
                              "rollout.vllm_server_host": ["a", "b"], "rollout.vllm_server_port": [1, 2]},
                             {"swift_version": "3.7", "rollout.vllm_mode": "server",
                              "rollout.vllm_server_host": ["a", "b"], "rollout.vllm_server_port": [1, 2]}),
}


def ids(changes) -> set[str]:
    return {f.id for f in assess(with_changes(JobSpec(), {**BASE, **changes})).findings}


def test_base_spec_is_clean():
    assert ids({}) == set()


def test_every_rule_has_a_case():
    """swift rlhf's here, megatron rlhf's in tests/test_megatron_rules.py."""
    assert set(CASES) | set(MEGATRON_CASES) == set(RULES)


@pytest.mark.parametrize("rule_id", sorted(CASES))
def test_rule_fires_and_stays_silent(rule_id):
    trigger, quiet = CASES[rule_id]
    assert rule_id in ids(trigger)
    assert rule_id not in ids(quiet)


def test_every_finding_is_complete_and_its_fix_applies():
    for rule_id, (trigger, _) in CASES.items():
        spec = with_changes(JobSpec(), {**BASE, **trigger})
        for f in (f for f in assess(spec).findings if f.id == rule_id):
            assert f.message and f.fix and f.fields and f.severity in ("error", "warning", "info")
            if f.apply:
                with_changes(spec, f.apply)  # a one-click fix is always a valid spec


def test_batch_error_lists_the_nearest_valid_values_of_each_knob():
    spec = with_changes(JobSpec(), {**BASE, "train.num_generations": 6, "train.gradient_accumulation_steps": 4})
    (f,) = [f for f in validate(spec) if f.id == "GRPO-BATCH-DIV"]
    assert "= 16 is not divisible by num_generations (6)" in f.message
    assert "train.num_generations: [4, 8, 2, 16]" in f.fix
    assert "train.gradient_accumulation_steps: [3, 6, 9]" in f.fix
    assert "train.per_device_train_batch_size: [3, 6]" in f.fix
    assert "GPUs in total: [12, 24]" in f.fix
    fixed = with_changes(spec, f.apply)
    assert "GRPO-BATCH-DIV" not in {x.id for x in validate(fixed)}


def test_divisibility_follows_each_versions_own_batch():
    changes = {"train.num_generations": 8, "train.gradient_accumulation_steps": 2}
    assert "GRPO-BATCH-DIV" not in ids(changes)  # ≥ 3.5: 4 GPUs × 1 × 2 steps = 8 completions per rollout
    assert "GRPO-BATCH-DIV" not in ids({**changes, "swift_version": "3.4"})  # 3.4 also multiplies by GAS: 8
    assert "GRPO-BATCH-DIV" in ids({**changes, "swift_version": "3.3"})  # before 3.4: 4 × 1 = 4
    spec = with_changes(JobSpec(), {**BASE, "train.num_generations": 8, "train.gradient_accumulation_steps": 3,
                                    "swift_version": "3.4"})
    (f,) = [f for f in validate(spec) if f.id == "GRPO-BATCH-DIV"]
    assert "per_device × world × gradient_accumulation_steps = 12" in f.message
    assert "train.gradient_accumulation_steps: [2, 4, 6]" in f.fix


def test_evaluation_follows_save_strategy_and_needs_an_eval_set():
    uneven = {"train.split_dataset_ratio": 0.05, "train.num_generations": 8, "train.per_device_eval_batch_size": 1}
    assert "GRPO-EVAL-BATCH-DIV" in ids(uneven)
    assert "GRPO-EVAL-BATCH-DIV" not in ids({**uneven, "train.save_strategy": "no"})  # eval_strategy ← save_strategy
    assert "GRPO-EVAL-BATCH-DIV" in ids({**uneven, "train.save_strategy": "no", "train.eval_strategy": "steps"})
    assert "GRPO-EVAL-BATCH-DIV" not in ids({**uneven, "train.split_dataset_ratio": 0.0})  # no eval set


def test_num_generations_eval_needs_3_12():
    assert "VERSION-FLAG-UNSUPPORTED" in ids({"train.num_generations_eval": 4, "swift_version": "3.11"})
    assert "VERSION-FLAG-UNSUPPORTED" not in ids({"train.num_generations_eval": 4, "swift_version": "3.12"})


SEEDS = Path(__file__).parent / "fixtures" / "seeds"


@pytest.mark.parametrize("name,expected", [
    ("000_32b_hang.yaml", {"SEED-OFFLOAD-STALL", "CLUSTER-GPU-OVERLAP"}),
    ("001_zero3_kl0.yaml", {"SEED-ZERO3-KL0"}),
    ("002_gpu_idle.yaml", {"SEED-OFFLOAD-SMALL", "SEED-DATALOADER-WORKERS"}),
    ("003_multi_node_hang.yaml", {"MASTER-LOOPBACK", "SEED-NODE-DIFFER"}),
    ("004_qwen2_7b_24gb.yaml", {"MEMORY-OOM"}),
])
def test_field_report_situations_yield_their_advisory(name, expected):
    found = {f.id for f in assess(load_spec(SEEDS / name)).findings}
    assert expected <= found, found


# Advisories on the field reports' own scripts (issue 13: each miss seen on a script, now said or no longer wrong).
REPORT_000 = """# field report 000: 32B full, zero3_offload, vLLM TP 8 with 8 workers on the 8 training GPUs, async
CUDA_VISIBLE_DEVICES=0,1,2,3,4,5,6,7 NPROC_PER_NODE=8 swift rlhf --rlhf_type grpo \\
  --model Qwen/Qwen2.5-32B-Instruct --train_type full --deepspeed zero3_offload --dataset d --reward_funcs accuracy \\
  --use_vllm true --vllm_gpu_memory_utilization 0.5 --vllm_max_model_len 2048 --tensor_parallel_size 8 \\
  --num_infer_workers 8 --async_generate true --offload_model true --move_model_batches 16 --num_generations 8
"""


def script_findings(text: str, version: str) -> dict[str, list]:
    spec, _ = import_scripts([("run.sh", text)], version)
    out = {}
    for f in assess(spec).findings:
        out.setdefault(f.id, []).append(f)
    return out


def test_report_000_script_says_what_the_report_saw():
    found = script_findings(REPORT_000, "3.4")
    assert "0.5" in found["SEED-VLLM-UTIL-LOW"][0].message and "32B" in found["SEED-VLLM-UTIL-LOW"][0].message
    assert "TP 8 with num_infer_workers 8" in found["SEED-TP-SPANS-NODE"][0].message
    assert "A 32B model" in found["SEED-OFFLOAD-STALL"][0].message  # its name's size, not the 33B counted


def test_async_advisory_before_3_5_does_not_name_vllm_mode():
    (f,) = script_findings(REPORT_000, "3.4")["ASYNC-NEEDS-SERVER"]
    assert "vllm_mode" not in f.message + f.fix and "rollout.vllm_mode" not in f.fields
    assert "num_infer_workers" in f.message
    spare = REPORT_000.replace("--num_infer_workers 8", "--num_infer_workers 2").replace("NPROC_PER_NODE=8",
                                                                                       "NPROC_PER_NODE=6")
    assert "ASYNC-NEEDS-SERVER" not in script_findings(spare, "3.4")  # vLLM on the last 2 GPUs, training on 6
    assert "vllm_mode" in script_findings(REPORT_000, "4.6")["ASYNC-NEEDS-SERVER"][0].message


def test_dataloader_advisory_only_for_vision_models():
    text = "swift rlhf --rlhf_type grpo --model Qwen/Qwen2.5-7B-Instruct --dataset d --reward_funcs accuracy\n"
    assert "SEED-DATALOADER-WORKERS" not in script_findings(text, "4.6")
    vl = script_findings(text.replace("Qwen2.5-7B", "Qwen2.5-VL-3B"), "4.6")["SEED-DATALOADER-WORKERS"][0]
    assert "vision-language" in vl.message and "3.75" not in vl.message


def test_sizes_read_as_people_write_them():
    text = ("swift rlhf --rlhf_type grpo --model Qwen/Qwen2.5-VL-3B-Instruct --dataset d --reward_funcs accuracy "
            "--use_vllm true --vllm_mode colocate --offload_model true\n")
    (f,) = script_findings(text, "4.6")["SEED-OFFLOAD-SMALL"]
    assert "a 3B model" in f.message and "3.75" not in f.message


def test_one_group_port_for_two_servers_is_an_error_as_in_ms_swift():
    """ms-swift 4.6's VLLMClient takes the parsed list as is and raises unless it has one port per server."""
    two = {"rollout.vllm_mode": "server", "rollout.vllm_server_host": ["a", "b"],
           "rollout.vllm_server_port": [8000, 8001]}
    def ports_findings(groups):
        spec = with_changes(JobSpec(), {**BASE, **two, "rollout.vllm_server_group_port": groups})
        return [f for f in assess(spec).findings if f.id == "VLLM-SERVER-PORTS"]

    one = ports_findings([6000])
    assert one and one[0].fields == ("rollout.vllm_server_group_port",)
    assert not ports_findings([6000, 6001])


def test_each_rule_cites_a_line_of_ms_swift_46_that_exists(swift_python):
    """A rule's source is a file and line of ms-swift 4.6.0 (the venv the suite's oracle uses), a field report, an
    issue or grpo-ui's own launch/import: never a section of a document that is not in the repository."""
    import re
    import subprocess
    where = subprocess.run([str(swift_python), "-c", "import importlib.util; print(importlib.util.find_spec('swift')"
                            ".submodule_search_locations[0])"], capture_output=True, text=True, check=True).stdout
    package = Path(where.strip()).parent
    assert "__version__ = '4.6.0'" in (package / "swift/version.py").read_text()
    cited = [(rule, path, int(line)) for rule, (_, source) in RULES.items()
             for path, line in re.findall(r"(swift/[\w/]+\.py):(\d+)", source)]
    assert len(cited) > 30
    for rule, path, line in cited:
        lines = (package / path).read_text().splitlines()
        assert line <= len(lines) and lines[line - 1].strip(), (rule, path, line)
    assert not [rule for rule, (_, source) in RULES.items() if re.search(r"§|\b[VR]\d+\b|reference", source)]
