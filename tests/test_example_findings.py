"""What would fail on the nodes is a finding with a fix before launch, on ms-swift's own example scripts
(tests/data/ms_swift_examples): a rollout server nobody starts, paths only the script's directory has, a tracker's
or a gated model's missing key; every finding the import corpus leads to can be acted on (issue 26)."""

import re
from pathlib import Path

import pytest

from grpo_ui.checks.assess import assess
from grpo_ui.checks.rules.credentials import credentials_needed
from grpo_ui.importer import import_scripts
from grpo_ui.launch.render import render
from grpo_ui.spec.files import job_files
from grpo_ui.spec.form import FIELDS_BY_PATH
from grpo_ui.spec.paths import with_changes
from grpo_ui.spec.presets import presets
from tests.swift_oracle import cases

# --- 3. Run-time failures are findings with fixes before launch --------------------------------------------------

EXAMPLES = Path(__file__).parent / "data" / "ms_swift_examples"


def check(spec):
    return assess(spec).findings


def example(name: str):
    return import_scripts([(name, (EXAMPLES / name).read_bytes())])[0]


def test_a_rollout_server_the_script_starts_by_hand_is_a_finding_until_the_user_says_where_it_runs():
    """external_server_7b.sh ships its swift rollout as a comment: imported as shipped, nothing would start it."""
    spec = example("external_server_7b.sh")
    assert not spec.rollout_nodes() and spec.rollout.vllm_server_host == ["127.0.0.1"]
    (f,) = [f for f in check(spec) if f.id == "ROLLOUT-SERVER-OUTSIDE"]
    assert f.severity == "error" and "127.0.0.1:8000" in f.message and "exit 3" in f.message
    assert f.apply == {"cluster.external_rollout": True}
    marked = with_changes(spec, f.apply)
    assert "ROLLOUT-SERVER-OUTSIDE" not in {x.id for x in check(marked)}
    readme = render(marked, "j").files["README.txt"]
    assert "curl http://127.0.0.1:8000/health/" in readme and "exit 3" in readme
    served = with_changes(spec, {"rollout.vllm_server_host": None, "cluster.nodes": [
        *(n.model_dump(exclude_unset=True) for n in spec.cluster.nodes),
        {"host": "localhost", "role": "rollout", "gpus": [6, 7]}], "server.vllm_data_parallel_size": 2})
    assert "ROLLOUT-SERVER-OUTSIDE" not in {x.id for x in check(served)}  # or it becomes a node of the job


def test_a_placeholder_master_address_is_a_finding_on_its_fields_at_import():
    """The two-node colocate pair as shipped: node 1's MASTER_ADDR=xxx.xxx.xxx.xxx (the example's stand-in for node
    0's IP) becomes node 0's host and the master; the import's checks say so on those fields, not an SSH test later
    (issue 32, first-hour defect 4). Real addresses, host names and aliases are not stand-ins."""
    pair = sorted((EXAMPLES / "two_node_colocate").iterdir())
    spec, _ = import_scripts([(p.name, p.read_bytes()) for p in pair])
    assert spec.cluster.nodes[0].host == spec.cluster.master_addr == "xxx.xxx.xxx.xxx"
    (f,) = [f for f in check(spec) if f.id == "ADDRESS-PLACEHOLDER"]
    assert f.severity == "error" and set(f.fields) == {"cluster.nodes[0].host", "cluster.master_addr"}
    assert "cluster.nodes[0].host is xxx.xxx.xxx.xxx" in f.message and "clear cluster.master_addr" in f.fix
    nodes = [{**n.model_dump(exclude_unset=True), "host": h} for n, h in zip(spec.cluster.nodes, ("gpu-a", "gpu-b"),
                                                                            strict=True)]
    fixed = with_changes(spec, {"cluster.nodes": nodes, "cluster.master_addr": None})
    assert "ADDRESS-PLACEHOLDER" not in {x.id for x in check(fixed)}
    only_master = with_changes(fixed, {"cluster.master_addr": "10.0.x.x"})
    (f,) = [f for f in check(only_master) if f.id == "ADDRESS-PLACEHOLDER"]
    assert f.fields == ("cluster.master_addr",) and f.apply == {"cluster.master_addr": None}
    for real in ("10.0.0.11", "gpu-a", "node1", "xeon-box", "2001:db8::1"):
        assert "ADDRESS-PLACEHOLDER" not in {x.id for x in check(with_changes(fixed, {"cluster.master_addr": real}))}
    for stand_in in ("XXX.XXX.XXX.XXX", "your-master-ip"):
        assert "ADDRESS-PLACEHOLDER" in {x.id for x in check(with_changes(fixed, {"cluster.master_addr": stand_in}))}


def test_relative_files_of_an_example_need_the_directory_it_was_run_from():
    spec = example("plugin_reward.sh")
    (f,) = [f for f in check(spec) if f.id == "PATH-RELATIVE-NO-WORKDIR"]
    assert {"cluster.workdir", "train.external_plugins", "train.system"} <= set(f.fields)
    assert "examples/train/grpo/plugin/plugin.py" in f.message and "examples/train/grpo/prompt.txt" in f.message
    assert [(j.field, j.value) for j in job_files(spec)] == [
        ("train.external_plugins", "examples/train/grpo/plugin/plugin.py"),
        ("train.system", "examples/train/grpo/prompt.txt")]  # the Hub model and dataset are no files
    placed = with_changes(spec, {"cluster.workdir": "/opt/ms-swift"})
    assert "PATH-RELATIVE-NO-WORKDIR" not in {x.id for x in check(placed)}
    assert job_files(placed)[0].on_node("/opt/ms-swift") == ("/opt/ms-swift/examples/train/grpo/plugin/plugin.py",)


@pytest.mark.parametrize("report_to,name", [(["tensorboard", "wandb"], "WANDB_API_KEY"),
                                            (["swanlab"], "SWANLAB_API_KEY")])
def test_a_trackers_key_is_asked_for_and_named_in_the_secrets_template(report_to, name):
    spec = with_changes(example("external_server_7b.sh"), {"train.report_to": report_to,
                                                           "cluster.external_rollout": True})
    assert f"# {name}=" in render(spec, "j").files["secrets.env.example"]  # not "no secrets declared"
    (f,) = [f for f in check(spec) if f.id == "CREDENTIAL-UNDECLARED"]
    declared = with_changes(spec, f.apply)
    assert declared.secret_env == [name] and "CREDENTIAL-UNDECLARED" not in {x.id for x in check(declared)}
    assert render(declared, "j").files["secrets.env.example"] == f"{name}=\n"


def test_a_gated_model_from_hugging_face_needs_a_token():
    gated = with_changes(example("plugin_reward.sh"), {"train.model": "meta-llama/Llama-3.1-8B-Instruct",
                                                       "env": {"USE_HF": "1"}})
    assert [c.env for c, _ in credentials_needed(gated)] == ["HF_TOKEN"]
    assert credentials_needed(with_changes(gated, {"env": {}})) == []  # ModelScope (ms-swift's default) serves it


def test_the_bundle_readme_numbers_its_steps_in_order():
    """It once read 1, 2, 4, 5 when the job had no rollout nodes."""
    for spec in (*presets().values(), with_changes(example("external_server_7b.sh"), {"cluster.external_rollout": True}),
                 with_changes(example("plugin_reward.sh"), {"cluster.workdir": "/opt/ms-swift"})):
        readme = render(spec, "j").files["README.txt"]
        numbers = [int(n) for n in re.findall(r"^(\d+)\. ", readme, re.M)]
        assert numbers == list(range(1, len(numbers) + 1)), (spec.name, numbers)


def actionable(f) -> bool:
    """The user can act on it from the page: a one-click fix, or a field the form shows (the node table's too)."""
    return bool(f.apply) or any(re.sub(r"\[\d+\]$", "", p) in FIELDS_BY_PATH or p.startswith("cluster.nodes")
                                for p in f.fields)


@pytest.mark.parametrize("name", ["external_server_7b.sh", "plugin_reward.sh"])
def test_an_example_imported_as_shipped_ends_with_no_finding_the_user_cannot_act_on(name):
    """Apply each one-click fix, fill in each field a finding names (the working directory the example was run
    from), and nothing is left that blocks the launch; on the way every finding was actionable."""
    spec, seen = example(name), []
    for _ in range(10):
        found = check(spec)
        seen += found
        todo = next((f for f in found if f.severity in ("error", "warning") and f.apply), None)
        if todo is not None:
            spec = with_changes(spec, todo.apply)
        elif any(f.id == "PATH-RELATIVE-NO-WORKDIR" for f in found):
            spec = with_changes(spec, {"cluster.workdir": "/opt/ms-swift"})
        else:
            break
    assert all(actionable(f) for f in seen), [f.id for f in seen if not actionable(f)]
    assert not [f.id for f in check(spec) if f.severity == "error"]


def test_every_finding_of_the_import_corpus_can_be_acted_on():
    for case in cases():
        spec, _ = import_scripts([(p.name, p.read_bytes()) for p in case.scripts], case.version,
                                 {p.name: p.read_bytes() for p in case.files})
        assert all(actionable(f) for f in check(spec)), (case.name, [f.id for f in check(spec) if not actionable(f)])
