"""Importing Megatron GRPO launch material (issue 29, item 4): megatron rlhf scripts (one per node too), a Ray config
with the script that runs it or alone, become faithful drafts; what cannot be held is named; a YAML that is neither a
grpo-ui job nor an ms-swift config says so in one line.

Faithful means: bash runs the original script and grpo-ui's rendering of its import, each with a recording `megatron`
on PATH, and the two runs say the same (every flag with its value, the launch environment); for a Ray config, each
role reads the same arguments from the original and the rendered config (ms-swift merges the top level and the
role's group). tests/test_megatron_oracle.py has ms-swift's own parser read both sides. The material is this
project's own, in the styles of ms-swift's examples (tests/data/megatron/README.md).
"""

from pathlib import Path

import pytest
import yaml

from grpo_ui.checks.assess import assess
from grpo_ui.importer import import_scripts, import_uploads
from grpo_ui.launch.render import RAY_CONFIG, render, write_bundle
from grpo_ui.spec.errors import SpecError
from grpo_ui.spec.paths import with_changes
from tests import swift_oracle

DATA = Path(__file__).parent / "data" / "megatron"
SCRIPT_CASES = {"dense_colocate": ["dense_colocate.sh"], "dense_server": ["dense_server/train.sh",
                                                                          "dense_server/rollout.sh"],
                "moe_full": ["moe_full.sh"], "moe_lora": ["moe_lora.sh"],
                "multi_node": ["multi_node/node0.sh", "multi_node/node1.sh"]}
RAY_CASES = {"ray_colocate": ("ray_colocate/run_colocate.sh", "ray_colocate/grpo_colocate.yaml"),
             "ray_separate": ("ray_separate/run_separate.sh", "ray_separate/grpo_separate.yaml")}


def uploads(*names: str) -> dict[str, bytes]:
    return {Path(n).name: (DATA / n).read_bytes() for n in names}


def by_node(run) -> tuple:
    return run.kind, run.env.get("NODE_RANK", "0")


def flag_map(argv: list[str]) -> dict[str, tuple[str, ...]]:
    """argv as ms-swift's parser groups it: each flag with its values (a bare boolean flag means true)."""
    out: dict[str, list[str]] = {}
    key = None
    for token in argv:
        if token.startswith("--"):
            key = token[2:]
            out[key] = []
        else:
            out[key].append(token)
    return {k: tuple(_number(x) for x in v) or ("true",) for k, v in out.items()}


def _number(token: str):
    """A token as the typed parser reads a number (1e-6 and 1e-06 are one value); other tokens as they are."""
    try:
        return float(token)
    except ValueError:
        return token


@pytest.mark.parametrize("case", sorted(SCRIPT_CASES))
def test_a_megatron_script_imports_without_errors_and_renders_what_bash_ran(case, tmp_path):
    names = SCRIPT_CASES[case]
    spec, findings = import_uploads(uploads(*names))
    assert spec.engine == "megatron"
    assert not [f.message for f in findings if f.severity == "error"]
    assert not [f.message for f in assess(spec).findings if f.severity == "error"]
    stubs = swift_oracle.make_stubs(tmp_path / "stubs")
    for n in names:
        (tmp_path / Path(n).name).write_bytes((DATA / n).read_bytes())
    recorded = [r for n in names for r in swift_oracle.run_script(tmp_path / Path(n).name, tmp_path, stubs)]
    spec = with_changes(spec, {"cluster.run_root": str(tmp_path / "runs")})
    bundle = render(spec, "job")
    out = tmp_path / "rendered"
    write_bundle(bundle, out)
    rendered = [r for name in sorted(bundle.files) if name.endswith(".sh")
                for r in swift_oracle.run_rendered(out / name, tmp_path, stubs)]
    recorded, rendered = sorted(recorded, key=by_node), sorted(rendered, key=by_node)
    assert [(r.program, r.kind) for r in recorded] == [(r.program, r.kind) for r in rendered]
    for a, b in zip(recorded, rendered, strict=True):
        assert flag_map(a.argv) == flag_map(b.argv), (case, a.kind)
        assert not swift_oracle.env_differences(a.env, b.env), swift_oracle.env_differences(a.env, b.env)


def test_the_multi_node_pair_is_two_trainer_nodes_with_the_same_arguments():
    spec, findings = import_uploads(uploads(*SCRIPT_CASES["multi_node"]))
    assert [n.role for n in spec.cluster.nodes] == ["trainer", "trainer"] and spec.cluster.master_addr == "10.1.0.1"
    assert spec.train.tensor_model_parallel_size == 4 and spec.train.sequence_parallel
    assert not [f for f in findings if f.id in ("NODE-ARGS-DIFFER", "NODE-ENV-DIFFER")]


def test_unmodelled_megatron_flags_are_kept_verbatim_and_named():
    spec, findings = import_uploads(uploads("dense_colocate.sh"))
    assert spec.extra_args == ["--cross_entropy_loss_fusion", "true"]
    assert any(f.id == "IMPORT-UNKNOWN-FLAG" and "--cross_entropy_loss_fusion" in f.message for f in findings)


def _argv_value(value) -> tuple:
    """A config value as ms-swift's Ray driver passes it on (driver_utils.py _dict_to_argv: booleans lower-case, lists
    item by item, the rest str()), numbers compared as numbers."""
    items = value if isinstance(value, list) else [value]
    return tuple(_number(str(v).lower() if isinstance(v, bool) else str(v)) for v in items)


def role_args(config: dict) -> dict[str, dict[str, str]]:
    """What each role of ms-swift's Ray mode reads: {**shared, **group} without the Ray-only keys (driver_utils.py
    merge_group_dict), values as ms-swift turns them into argv (str), for the trainers every key, for the vLLM
    replicas the model, the vLLM arguments and the LoRA switch a shared tuner_type lora turns on; and the
    placement."""
    shared = {k: v for k, v in config.items() if k not in ("train", "rollout", "teacher", "colocate_groups",
                                                           "sleep_level", "nnodes")}

    def merged(group):
        cfg = {**shared, **(config.get(group) or {})}
        cfg.pop("gpus", None)
        return {k: _argv_value(v) for k, v in cfg.items()}

    rollout = merged("rollout")
    replica = {k: v for k, v in rollout.items() if k == "model" or k.startswith("vllm_")}
    replica.setdefault("vllm_enable_lora", ("true",) if rollout.get("tuner_type") == ("lora",) else ("false",))
    placement = {"colocate": bool(config.get("colocate_groups")), "sleep_level": config.get("sleep_level", 1),
                 "nnodes": config.get("nnodes", 1), "train": config["train"]["gpus"],
                 "rollout": config["rollout"]["gpus"]}
    return {"train": merged("train"), "replica": replica, "placement": placement}


@pytest.mark.parametrize("case", sorted(RAY_CASES))
def test_a_ray_config_and_its_script_import_and_render_the_same_roles(case):
    script, config_name = RAY_CASES[case]
    spec, findings = import_uploads(uploads(script, config_name))
    assert spec.engine == "megatron" and spec.train.use_ray
    assert not [f.message for f in findings if f.severity == "error"]
    # Ray mode is launched by the Ray backend; every other finding would be a real problem with the job
    assert {f.id for f in assess(spec).findings if f.severity == "error"} == {"RAY-BACKEND"}
    original = yaml.safe_load((DATA / config_name).read_text())
    rendered = yaml.safe_load(render(spec, "job").files[RAY_CONFIG])
    want, got = role_args(original), role_args(rendered)
    assert got["placement"] == want["placement"] | (
        {"sleep_level": 0} if not want["placement"]["colocate"] else {})  # separate runs at 0 whatever it says
    assert got["replica"] == want["replica"]
    # The trainers in Ray mode parse the vLLM arguments but do not use them (the hybrid weight sync reads the rollout
    # group's, pipeline.py _build_rollout_config_for_workers): they are the replicas', compared above.
    trainer = {k: v for k, v in want["train"].items() if not k.startswith("vllm_")}
    assert {k: v for k, v in got["train"].items() if not k.startswith("vllm_")} == {
        **trainer, **({"global_batch_size": got["train"]["global_batch_size"]} if "global_batch_size" not in trainer
                      else {})}


def test_the_ray_placement_becomes_the_cluster():
    colocated, _ = import_uploads(uploads(*RAY_CASES["ray_colocate"]))
    assert [(n.role, n.gpus) for n in colocated.cluster.nodes] == [("trainer", [0, 1, 2, 3])]
    separate, _ = import_uploads(uploads(*RAY_CASES["ray_separate"]))
    assert [(n.role, n.gpus) for n in separate.cluster.nodes] == [("trainer", [0, 1, 2, 3]),
                                                                  ("rollout", [4, 5, 6, 7])]
    assert separate.server.vllm_tensor_parallel_size == 2 and separate.server.vllm_gpu_memory_utilization == 0.85


def test_a_ray_config_alone_is_imported_as_the_command_that_runs_it():
    spec, findings = import_uploads(uploads("ray_colocate/grpo_colocate.yaml"))
    assert spec.train.use_ray and spec.train.tensor_model_parallel_size == 2 and spec.rollout.sleep_level == 1
    assert any(f.id == "IMPORT-CONFIG-ALONE" and "--use_ray true" in f.message for f in findings)


def test_a_flat_megatron_config_alone_runs_megatron_rlhf():
    text = b"rlhf_type: grpo\nmodel: Qwen/Qwen3-8B\ntensor_model_parallel_size: 2\nglobal_batch_size: 64\n"
    spec, findings = import_uploads({"cfg.yaml": text})
    assert spec.engine == "megatron" and spec.train.tensor_model_parallel_size == 2
    assert any(f.id == "IMPORT-CONFIG-ALONE" and "megatron rlhf cfg.yaml" in f.message for f in findings)


def test_a_yaml_that_is_neither_says_which_it_is_not_in_one_line():
    with pytest.raises(SpecError) as e:
        import_uploads(uploads("not_a_job.yaml"))
    assert e.value.problems == [("spec", "neither a grpo-ui job (unknown sections: services) nor an ms-swift config "
                                         "(none of its keys is an ms-swift flag)")]


def test_what_cannot_be_imported_is_named():
    config = (b"rlhf_type: grpo\nmodel: m\ncolocate_groups: [[train, rollout]]\ntrain: {gpus: 4}\n"
              b"rollout: {gpus: 2, vllm_data_parallel_size: 2}\nteacher: {gpus: 2, model: t}\n")
    _, findings = import_uploads({"c.yaml": config, "run.sh": b"megatron rlhf --use_ray true --config c.yaml\n"})
    ids = {f.id: f.message for f in findings}
    assert "train 4, rollout 2" in ids["IMPORT-RAY-PLACEMENT"]  # colocated roles must have equal gpus
    assert "teacher group" in next(f.message for f in findings if f.id == "IMPORT-RAY-UNREAD" and "teacher" in
                                   f.message)
    assert any(f.id == "IMPORT-RAY-UNREAD" and "vllm_data_parallel_size" in f.message for f in findings)


def test_a_script_without_rlhf_type_would_train_dpo():
    _, findings = import_scripts([("run.sh", "NPROC_PER_NODE=2 megatron rlhf --model m --dataset d\n")])
    assert any(f.id == "IMPORT-NOT-GRPO" and "DPO" in f.message for f in findings)


def test_megatron_sft_is_not_a_grpo_job():
    with pytest.raises(SpecError, match="no `swift rlhf` or `megatron rlhf` command"):
        import_scripts([("sft.sh", "NPROC_PER_NODE=4 megatron sft --model m --dataset d\n")])
