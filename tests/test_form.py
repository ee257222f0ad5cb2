"""The form's field handling (grpo_ui.spec.form) without Streamlit: every declared field has a widget and survives being
written as form text and read back; the node table keeps every node setting, sets only what a cell changes, and
names the cell a bad value is in. (The page itself: tests/test_app.py.)"""

from pathlib import Path

import pytest

from grpo_ui.spec import form
from grpo_ui.spec.model import ARGS, SETTINGS, JobSpec
from grpo_ui.spec.paths import with_changes
from grpo_ui.spec.yaml_io import load_spec
from tests.test_swift_acceptance import sample_values

EVERY_SETTING = Path(__file__).parent / "fixtures" / "every_setting.yaml"


def test_the_fixture_sets_every_setting_to_something_else_than_its_default():
    """So the round trips below (and tests/test_app.py's) cover every declared setting, new ones included."""
    spec = load_spec(EVERY_SETTING)
    for d in SETTINGS:
        owners = spec.cluster.nodes if d.per_node else [d.owner(spec)]
        assert any(getattr(o, d.name) != d.default and d.name in o.model_fields_set for o in owners), d.path


def test_form_fields_are_every_declared_field():
    paths = {d.path for d in form.FORM_FIELDS} | {d.path for d in form.NODE_FIELDS}
    assert paths == {d.path for d in ARGS} | {d.path for d in SETTINGS}
    assert {d.section for d in form.NODE_FIELDS} == {"node"}


def setting_values():
    spec = load_spec(EVERY_SETTING)
    for d in SETTINGS:
        yield d, getattr(d.owner(spec, 0), d.name)


@pytest.mark.parametrize("decl,value", [*((d, v) for d in ARGS for v in sample_values(d)), *setting_values()],
                         ids=lambda x: getattr(x, "path", None))
def test_every_value_survives_its_widget(decl, value):
    kind = form.widget_kind(decl)
    if kind == "checkbox":
        assert isinstance(value, bool)
    elif kind == "select":
        assert value in form.choices(decl, [value])
    else:
        assert form.from_text(decl, form.to_text(decl, value)) == value


def test_text_forms_of_lists_and_mappings():
    decls = {d.path: d for d in SETTINGS}
    gpus, env, node_env, lines = (decls["cluster.nodes[i].gpus"], decls["env"], decls["cluster.nodes[i].env"],
                                  decls["slurm.extra_sbatch"])
    assert form.to_text(gpus, [0, 1, 2]) == "0,1,2" and form.from_text(gpus, " 0, 1,2 ") == [0, 1, 2]
    assert form.to_text(env, {"A": "1", "B": "x y"}) == "A=1\nB=x y"
    assert form.to_text(node_env, {"A": "1", "B": "x y"}) == "A=1 'B=x y'"
    assert form.from_text(node_env, "A=1 'B=x y' C=") == {"A": "1", "B": "x y", "C": ""}
    assert form.from_text(lines, "--exclusive\n\n --mem=0 \n") == ["--exclusive", "--mem=0"]
    with pytest.raises(ValueError, match="NAME=value"):
        form.from_text(node_env, "A=1 B")
    with pytest.raises(ValueError):
        form.from_text(gpus, "0,x")
    with pytest.raises(ValueError, match="required"):
        form.from_text(decls["cluster.nodes[i].host"], " ")


def test_the_node_table_round_trip_keeps_every_node_setting():
    spec = load_spec(EVERY_SETTING)
    errors = {}
    assert form.nodes_from_rows(spec, form.node_rows(spec), errors) == [
        n.model_dump(exclude_unset=True) for n in spec.cluster.nodes]
    assert not errors
    assert {*form.node_rows(spec)[0]} == {d.name for d in form.NODE_FIELDS} | {form.ROW}


def test_node_table_edits_set_what_changed_and_name_bad_cells():
    spec = with_changes(JobSpec(), {"cluster.nodes": [{"host": "gpu-a", "gpus": [0, 1], "identity_file": "~/k"}]})
    rows = form.node_rows(spec)
    rows[0].update(env="NCCL_DEBUG=INFO", port=2200.0, workdir="/w", gpu_memory_gib=48)  # numbers come back as float
    rows.append({"host": "gpu-b", "gpus": "0,1", "role": "rollout", "port": float("nan"), form.ROW: None})
    rows.append({"host": "", "gpus": "7", form.ROW: None})  # no host: not a node yet
    errors = {}
    nodes = form.nodes_from_rows(spec, rows, errors)
    assert not errors
    assert nodes == [{"host": "gpu-a", "gpus": [0, 1], "identity_file": "~/k", "env": {"NCCL_DEBUG": "INFO"},
                      "port": 2200.0, "workdir": "/w", "gpu_memory_gib": 48},
                     {"host": "gpu-b", "gpus": [0, 1], "role": "rollout"}]
    rows[0]["gpus"], rows[1]["env"] = "0,one", "JUST_A_NAME"
    form.nodes_from_rows(spec, rows, errors)
    assert set(errors) == {"cluster.nodes[0].gpus", "cluster.nodes[1].env"}


def test_build_spec_sets_what_the_form_changed_and_reports_bad_values():
    base = load_spec(EVERY_SETTING)
    values = {d.path: form.form_value(d, base) for d in form.FORM_FIELDS}
    same, errors = form.build_spec(base, values, form.node_rows(base))
    assert not errors and same.model_dump(exclude_unset=True) == base.model_dump(exclude_unset=True)
    values |= {"slurm.time_limit": "2h", "cluster.master_port": "x", "env": "A=1\nHF_TOKEN=s"}
    _, errors = form.build_spec(base, values, form.node_rows(base))
    assert "cluster.master_port" in errors and "slurm.time_limit" in errors
    values |= {"slurm.time_limit": "", "cluster.master_port": "29700"}
    changed, errors = form.build_spec(base, values, form.node_rows(base))
    assert not errors and changed.slurm.time_limit is None and changed.cluster.master_port == 29700
    assert changed.env == {"A": "1"} and "HF_TOKEN" in changed.secret_env  # a token typed in env moves out
