"""The Configure page's logic through Streamlit's AppTest: widget → findings and estimate, errors block export,
import fills the form, fixes apply in one click, the draft survives a restart."""

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from grpo_ui.findings import SEVERITY_ICON
from grpo_ui.spec import ARGS_BY_PATH
from grpo_ui.ui_state import load_draft

APP = str(Path(__file__).parent.parent / "app.py")
OLD_SCRIPT = """NPROC_PER_NODE=4 CUDA_VISIBLE_DEVICES=0,1,2,3 swift rlhf --rlhf_type grpo --model Qwen/Qwen2.5-7B-Instruct \\
  --train_type lora --use_vllm true --vllm_mode colocate --vllm_gpu_memory_utilization 0.4 --dataset my.jsonl \\
  --reward_funcs accuracy --num_generations 6 --per_device_train_batch_size 2"""


@pytest.fixture
def app(tmp_path, monkeypatch):
    monkeypatch.setenv("GRPO_UI_HOME", str(tmp_path))
    return AppTest.from_file(APP, default_timeout=60).run()


def field(at, path):
    """The text field for a spec path, after choosing its section (only that section's fields are drawn)."""
    at.button_group(key="section").set_value(ARGS_BY_PATH[path].group).run()
    return at.text_input(key=f"f:{path}")


def labels(at):
    return [e.label for e in at.expander]


def zip_button(at):
    return next(b for b in at.get("download_button") if "zip" in b.proto.label)


def test_starts_from_a_preset_that_validates_and_fits(app):
    assert not app.exception
    assert [m.value for m in app.metric][0] == "FITS"
    assert not any(label.startswith(SEVERITY_ICON["error"]) for label in labels(app))
    assert not zip_button(app).proto.disabled


def test_invalid_batch_shows_error_next_to_field_and_blocks_export(app):
    field(app, "train.num_generations").set_value("7").run()
    assert any(label.startswith(SEVERITY_ICON["error"] + " GRPO-BATCH-DIV") for label in labels(app))
    beside = [m.value for m in app.markdown if "GRPO-BATCH-DIV" in m.value]
    assert beside and "num_generations (7)" in beside[0]
    assert zip_button(app).proto.disabled
    field(app, "train.num_generations").set_value("8").run()
    assert not any("GRPO-BATCH-DIV" in label for label in labels(app))
    assert not zip_button(app).proto.disabled


def test_a_value_survives_its_section_being_hidden(app):
    field(app, "train.num_generations").set_value("16").run()
    field(app, "train.lora_rank").run()  # another section drawn: num_generations' widget is gone
    assert not any(t.key == "f:train.num_generations" for t in app.text_input)
    assert load_draft().train.num_generations == 16  # the spec the page built (saved as the draft) still has it
    assert field(app, "train.num_generations").value == "16"


def test_bad_text_names_the_field(app):
    field(app, "train.lora_rank").set_value("sixteen").run()
    assert any("train.lora_rank" in e.value for e in app.error)


def test_estimate_follows_the_form_and_fit_advice_applies(app):
    before = app.metric[1].value
    field(app, "train.lora_rank").set_value("256").run()  # adapters + their states: resident in both phases
    assert app.metric[1].value != before
    field(app, "rollout.vllm_gpu_memory_utilization").set_value("0.9").run()
    assert app.metric[0].value == "OOM"
    fit = [b for b in app.button if b.label.startswith("Make it fit")]
    assert fit
    fit[0].click().run()
    assert app.metric[0].value in ("FITS", "TIGHT")


def test_import_fills_the_form_and_reports_renamed_flags(app):
    app.text_area(key="import_text").set_value(OLD_SCRIPT).run()
    next(b for b in app.button if b.label == "Import").click().run()
    assert field(app, "train.dataset").value == "my.jsonl"
    assert field(app, "train.num_generations").value == "6"
    assert any("--train_type" in c.value for c in app.caption)


def test_slurm_fields_appear_with_the_slurm_backend_and_bad_ones_are_named(app):
    assert not any(t.key == "cl:slurm.partition" for t in app.text_input)
    app.selectbox(key="cl:backend").set_value("slurm").run()
    app.text_input(key="cl:slurm.partition").set_value("gpu").run()
    app.text_input(key="cl:slurm.time_limit").set_value("2h").run()
    assert any("slurm.time_limit" in m.value and "not a Slurm time limit" in m.value for m in app.markdown)
    app.text_input(key="cl:slurm.time_limit").set_value("1-02:00:00").run()
    app.text_area(key="cl:slurm.extra_sbatch").set_value("--exclusive\n--mem=0").run()
    draft = load_draft()
    assert (draft.cluster.backend, draft.slurm.partition, draft.slurm.time_limit) == ("slurm", "gpu", "1-02:00:00")
    assert draft.slurm.extra_sbatch == ["--exclusive", "--mem=0"]
    assert any(label.startswith(SEVERITY_ICON["info"] + " SLURM-NODE-HOSTS") for label in labels(app))


def test_draft_survives_an_app_restart(tmp_path, monkeypatch):
    monkeypatch.setenv("GRPO_UI_HOME", str(tmp_path))
    at = AppTest.from_file(APP, default_timeout=60).run()
    field(at, "train.model").set_value("Qwen/Qwen3-8B").run()
    again = AppTest.from_file(APP, default_timeout=60).run()
    assert field(again, "train.model").value == "Qwen/Qwen3-8B"


def test_every_page_renders_with_a_job_in_the_store(tmp_path, monkeypatch):
    """Cluster, Launch, Monitor and History load over a store that holds a finished job with metrics and alerts."""
    from grpo_ui.spec import spec_to_yaml
    from grpo_ui.store import Store
    from grpo_ui.ui_state import presets

    monkeypatch.setenv("GRPO_UI_HOME", str(tmp_path))
    monkeypatch.setenv("GRPO_UI_DB", str(tmp_path / "db.sqlite"))
    store = Store()
    spec = next(iter(presets().values()))
    store.create_job("job-a", spec.name, spec_to_yaml(spec), "succeeded")
    store.add_node("job-a", 0, "localhost", "trainer", 0, "node_0.sh", str(tmp_path / "runs/job-a"))
    store.add_metrics("job-a", 1, {"reward": 0.5, "kl": 0.0, "max_steps": 2})
    store.add_metrics("job-a", 2, {"reward": 0.7, "kl": 0.01, "max_steps": 2})
    store.add_log_lines("job-a", 0, ["Train: 50%", "Traceback (most recent call last):", "ValueError: x"])
    store.upsert_alert("job-a", "NO-LEARNING-SIGNAL", "error", "No learning signal: x", "reward_std [0]", "fix it")
    store.set_gpu_processes("job-a", {"host": "localhost", "ts": 1.0, "processes": [
        {"gpu_index": 0, "gpu_uuid": "GPU-a", "pid": 4242, "used_mib": 61234.0}]})
    for page, expect in (("cluster", "Preflight"), ("launch", "Launch"), ("monitor", "Alerts (1)"),
                         ("history", "Compare two runs")):
        at = AppTest.from_file(str(Path(APP).parent / "pages" / f"{page}.py"), default_timeout=60).run()
        assert not at.exception, (page, at.exception)
        texts = [h.value for h in at.subheader] + [t.value for t in at.title] + [b.label for b in at.button]
        assert any(expect in t for t in texts), (page, texts)
        if page == "monitor":  # which process of which node holds how much on each GPU
            procs = next(d.value for d in at.dataframe if "pid" in d.value.columns)
            assert procs.to_dict("records")[0] | {"listed": None} == {
                "node": "node 0 · localhost", "GPU": 0, "pid": 4242, "GPU memory (MiB)": 61234.0, "listed": None}
