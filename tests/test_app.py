"""The Configure page's logic through Streamlit's AppTest: widget → findings and estimate, errors block export,
import fills the form, fixes apply in one click, a pasted config.json stands in for an unknown model, the draft
survives a restart; every page renders over a stored job (Monitor and History with its memory estimate vs peaks)."""

import json
import re
import time
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from grpo_ui.core.findings import SEVERITY_ICON
from grpo_ui.jobs.drafts import latest_spec as load_draft
from grpo_ui.jobs.memory_loop import record_peaks
from grpo_ui.jobs.store import MemoryAtLaunch, Store
from grpo_ui.memory.estimate import estimate_spec
from grpo_ui.spec.model import ARGS, ARGS_BY_PATH

APP = str(Path(__file__).parent.parent / "app.py")
EVERY_SETTING = Path(__file__).parent / "fixtures" / "every_setting.yaml"
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


def test_the_form_sets_only_what_the_user_changes(app):
    """Untouched fields stay unset (ms-swift's default applies, nothing is rendered for them); a changed one is set;
    typing the starting text back undoes the change. A field the loaded spec had set stays set."""
    field(app, "train.temperature").run()  # drawn, not changed
    assert "temperature" not in load_draft().train.model_fields_set
    field(app, "train.temperature").set_value("0.9").run()  # its default, typed over: unchanged text, still unset
    assert "temperature" not in load_draft().train.model_fields_set
    field(app, "train.temperature").set_value("1.0").run()
    assert load_draft().train.temperature == 1.0 and "temperature" in load_draft().train.model_fields_set
    field(app, "train.temperature").set_value("0.9").run()  # back to where it started: unset again
    assert "temperature" not in load_draft().train.model_fields_set
    field(app, "train.logging_steps").set_value("5").run()  # the preset sets 1; 5 is ms-swift's default, still set
    assert load_draft().train.logging_steps == 5 and "logging_steps" in load_draft().train.model_fields_set


def test_an_unresolved_imported_value_is_shown_and_replaced_by_what_the_user_types(app):
    app.text_area(key="import_text").set_value(OLD_SCRIPT.replace("Qwen/Qwen2.5-7B-Instruct", "$MODEL")).run()
    next(b for b in app.button if b.label == "Import").click().run()
    assert field(app, "train.model").value == "$MODEL"
    assert any(label.startswith(SEVERITY_ICON["error"] + " IMPORT-UNRESOLVED") for label in labels(app))
    field(app, "train.model").set_value("Qwen/Qwen2.5-7B-Instruct").run()
    assert not load_draft().unresolved and load_draft().train.model == "Qwen/Qwen2.5-7B-Instruct"
    assert not any("IMPORT-UNRESOLVED" in label for label in labels(app))


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


def test_the_step_time_follows_the_form_and_make_it_faster_applies(app):
    """The time panel predicts from the form (the preset on 4 × RTX 4090); a shorter expected completion shortens the
    step; a Make it faster card applies its change, and the step it promised is what the page then shows."""
    from grpo_ui.timing.predict import predict_spec
    from grpo_ui.timing.report import duration

    def shown(at):
        return next(m.value for m in at.metric if m.label == "Per step")

    assert shown(app) == duration(predict_spec(load_draft()).step_s)
    per_step = next(m for m in app.metric if m.label == "Per step")  # the range said as what it is
    assert predict_spec(load_draft()).range_meaning in per_step.help and "completion length" in per_step.help
    assert any(c.value.startswith("Assumes prompts of 256 tokens") for c in app.caption)
    guess = "The completion length is the guess the step time depends on most"
    assert any(c.value.startswith(guess) and "estimate.completion_tokens" in c.value for c in app.caption)
    before = predict_spec(load_draft()).step_s
    app.text_input(key="f:estimate.completion_tokens").set_value("120").run()
    assert load_draft().estimate.completion_tokens == 120 and predict_spec(load_draft()).step_s < before
    assert not any(c.value.startswith(guess) for c in app.caption)  # given: no guess, the narrower range
    promised = next(m.value for m in app.markdown if "per step (−" in m.value)
    [b for b in app.button if b.label == "Make it faster: apply"][0].click().run()
    assert not app.exception
    assert promised.startswith(f"**{shown(app)}**")
    assert not any(label.startswith(SEVERITY_ICON["error"]) for label in labels(app))


def test_a_cpu_host_gets_no_step_time_and_says_why(tmp_path, monkeypatch):
    monkeypatch.setenv("GRPO_UI_HOME", str(tmp_path))
    (tmp_path / "draft.yaml").write_text(
        "name: cpu\ntrain: {model: Qwen/Qwen2.5-0.5B-Instruct, dataset: [d.jsonl], reward_funcs: [format]}\n"
        "cluster: {nodes: [{host: localhost, gpus: [0], gpu_memory_gib: 16}]}\n")
    at = AppTest.from_file(APP, default_timeout=60).run()
    assert not at.exception
    assert any(i.value.startswith("no step time: the trainer nodes' GPU model is not set") for i in at.info)
    assert not [m for m in at.metric if m.label == "Per step"]
    assert "f:estimate.completion_tokens" in widget_keys(at)  # what the user expects can still be set


def test_import_fills_the_form_and_reports_renamed_flags(app):
    app.text_area(key="import_text").set_value(OLD_SCRIPT).run()
    next(b for b in app.button if b.label == "Import").click().run()
    assert field(app, "train.dataset").value == "my.jsonl"
    assert field(app, "train.num_generations").value == "6"
    assert any("--train_type" in c.value for c in app.caption)


QWEN25_7B_CONFIG = ('{"architectures": ["Qwen2ForCausalLM"], "hidden_size": 3584, "intermediate_size": 18944, '
                    '"num_attention_heads": 28, "num_hidden_layers": 28, "num_key_value_heads": 4, '
                    '"vocab_size": 152064, "tie_word_embeddings": false}')


def test_an_unknown_model_is_estimated_from_a_pasted_config_json(app):
    field(app, "train.model").set_value("acme/house-model-7b").run()
    assert "Verdict" not in [m.label for m in app.metric]
    assert any("unknown architecture for 'acme/house-model-7b'" in i.value for i in app.info)
    use = next(b for b in app.button if b.label == "Use this config.json")
    app.text_area(key="config_json_text").set_value("{not json").run()
    next(b for b in app.button if b.label == "Use this config.json").click().run()
    assert any("not valid JSON" in e.value for e in app.error) and use
    app.text_area(key="config_json_text").set_value(QWEN25_7B_CONFIG).run()
    next(b for b in app.button if b.label == "Use this config.json").click().run()
    assert "Verdict" in [m.label for m in app.metric]
    assert not any("MEMORY-UNKNOWN-MODEL" in label for label in labels(app))


def test_slurm_fields_appear_with_the_slurm_backend_and_bad_ones_are_named(app):
    assert not any(t.key == "f:slurm.partition" for t in app.text_input)
    app.selectbox(key="f:cluster.backend").set_value("slurm").run()
    app.text_input(key="f:slurm.partition").set_value("gpu").run()
    app.text_input(key="f:slurm.time_limit").set_value("2h").run()
    assert any("slurm.time_limit" in m.value and "not a Slurm time limit" in m.value for m in app.markdown)
    app.text_input(key="f:slurm.time_limit").set_value("1-02:00:00").run()
    app.text_area(key="f:slurm.extra_sbatch").set_value("--exclusive\n--mem=0").run()
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


def test_every_page_renders_with_a_job_in_the_store(tmp_path, store_with_job):
    """Cluster, Launch, Monitor and History load over a store that holds a finished job with metrics and alerts."""
    store, spec = store_with_job("succeeded")
    store.add_node("job-a", 0, "localhost", "trainer", 0, "node_0.sh", str(tmp_path / "runs/job-a"))
    store.set_meta("job-a", "drained", "1")  # its last lines were fetched when it ended
    store.add_metrics("job-a", 1, {"reward": 0.5, "kl": 0.0, "max_steps": 2})
    store.add_metrics("job-a", 2, {"reward": 0.7, "kl": 0.01, "max_steps": 2})
    store.add_log_lines("job-a", 0, ["Train: 50%", "Traceback (most recent call last):", "ValueError: x"])
    store.upsert_alert("job-a", "NO-LEARNING-SIGNAL", "error", "No learning signal: x", "reward_std [0]", "fix it")
    store.set_gpu_processes("job-a", {"host": "localhost", "ts": 1.0, "processes": [
        {"gpu_index": 0, "gpu_uuid": "GPU-a", "pid": 4242, "used_mib": 61234.0}]})
    host = spec.trainer_nodes()[0].host
    store.set_memory_estimate("job-a", MemoryAtLaunch(estimate_spec(spec).to_dict()))
    store.add_gpu_samples("job-a", [{"host": host, "gpu_index": 0, "ts": 1.0, "mem_used": 61234.0}])
    store.add_metrics("job-a", 2, {"memory(GiB)": 65.09})
    record_peaks(store, "job-a", spec)  # as the watcher's last pass over the job did: the pages only read them
    import streamlit as st
    st.cache_resource.clear()  # the app's jobs service is cached per process: open this test's store
    for page, expect in (("cluster", "Preflight"), ("launch", "Launch"), ("monitor", "Alerts (1)"),
                         ("history", "Compare two runs")):
        at = AppTest.from_file(str(Path(APP).parent / "views" / f"{page}.py"), default_timeout=60).run()
        assert not at.exception, (page, at.exception)
        texts = [h.value for h in at.subheader] + [t.value for t in at.title] + [b.label for b in at.button]
        assert any(expect in t for t in texts), (page, texts)
        if page in ("monitor", "history"):  # the estimate at launch next to each GPU's measured peak
            gpu0 = next(d.value for d in at.table if "estimated peak GiB" in d.value.columns).to_dict("records")[0]
            assert (gpu0["host"], gpu0["rank"], gpu0["nvidia-smi peak GiB"], gpu0["memory(GiB) logged"]) == (
                host, 0, f"{61234 / 1024:.1f}", "65.1") and float(gpu0["estimated peak GiB"]) > 0  # GiB as read
        if page == "history":
            runs = next(d.value for d in at.dataframe if "measured GiB" in d.value.columns).to_dict("records")[0]
            assert runs["measured GiB"] == 65.1 and runs["estimate GiB"] > 0
            assert runs["alerts"] == "NO-LEARNING-SIGNAL"  # which alert, not a bare count (issue 26)
        if page == "monitor":  # which process of which node holds how much on each GPU
            procs = next(d.value for d in at.dataframe if "pid" in d.value.columns)
            assert procs.to_dict("records")[0] | {"listed": None} == {
                "node": "node 0 · localhost", "GPU": 0, "pid": 4242, "GPU memory (MiB)": 61234.0, "listed": None}


def test_monitor_draws_the_extra_curves_and_the_ranks_stacks(tmp_path, monkeypatch):
    """Throughput, time per step by phase and memory per GPU per step from stored metrics and GPU samples; the stacks
    py-spy dumped (a real dump of the reward_slowing capture) as a phase per rank."""
    from grpo_ui.jobs.follow import STACKS, STACKS_AT
    from grpo_ui.jobs.store import Store
    from grpo_ui.spec.presets import presets
    from grpo_ui.spec.yaml_io import spec_to_yaml

    monkeypatch.setenv("GRPO_UI_HOME", str(tmp_path))
    monkeypatch.setenv("GRPO_UI_DB", str(tmp_path / "db.sqlite"))
    store = Store()
    store.create_job("job-b", "b", spec_to_yaml(next(iter(presets().values()))), "succeeded")
    t0 = time.time() - 100
    store.set_job("job-b", started=t0)
    for step in (1, 2, 3):
        store.add_metrics("job-b", step, {"step_time": 2.0 * step, "elapsed_time_s": 3.0 * step, "seconds_per_step": 3.0,
                                          "completions/mean_length": 16.0, "max_steps": 3}, ts=t0 + 3 * step)
        store.add_gpu_samples("job-b", [{"host": "h0", "gpu_index": 0, "ts": t0 + 3 * step - 1,
                                         "mem_used": 1000.0 * step}])
    store.set_meta("job-b", STACKS, (Path(APP).parent / "tests/data/captured/reward_slowing.pyspy").read_text())
    store.set_meta("job-b", STACKS_AT, "100")
    import streamlit as st
    st.cache_resource.clear()  # the app's jobs service is cached per process: open this test's store
    at = AppTest.from_file(str(Path(APP).parent / "views/monitor.py"), default_timeout=60).run()
    assert not at.exception, at.exception
    stacks = next(d.value for d in at.dataframe if "phase" in d.value.columns)
    assert set(stacks["phase"]) == {"reward"}
    figure = next(json.loads(c.proto.spec) for c in at.get("plotly_chart") if "throughput" in c.proto.spec)
    titles = {a["text"] for a in figure["layout"]["annotations"]}
    assert titles == {"rollout throughput", "time per step (s)", "memory per rank"}
    assert "h0/GPU 0 (MiB)" in {d["name"] for d in figure["data"]}


DRAFT = """# my notes: this comment would vanish if the page re-saved the draft
name: keep-me
swift_version: '4.6'
train:
  model: Qwen/Qwen2.5-7B-Instruct
  dataset: [d.jsonl]
  reward_funcs: [format]
  num_generations: 4
cluster:
  nodes:
  - {host: gpu-a, gpus: [0, 1, 2, 3], identity_file: ~/.ssh/team_key, workdir: /data/work, env: {NCCL_DEBUG: INFO}}
  - {host: gpu-b, gpus: [0, 1, 2, 3], identity_file: ~/.ssh/team_key, workdir: /data/work, env: {NCCL_DEBUG: INFO}}
"""


def test_opening_configure_saves_nothing_and_an_edit_keeps_the_node_fields_it_does_not_show(tmp_path, monkeypatch):
    monkeypatch.setenv("GRPO_UI_HOME", str(tmp_path))
    tmp_path.chmod(0o755)  # a data directory others can list: tightened
    (tmp_path / "draft.yaml").write_text(DRAFT)
    at = AppTest.from_file(APP, default_timeout=60).run()
    assert not at.exception and Store().drafts()[0].spec_yaml == DRAFT  # migrated as it was, opened, not re-saved
    assert (tmp_path / "draft.yaml.migrated").read_text() == DRAFT and not (tmp_path / "draft.yaml").exists()
    field(at, "train.num_generations").set_value("8").run()
    saved = load_draft()
    assert saved.train.num_generations == 8
    assert [(n.identity_file, n.workdir, n.env) for n in saved.cluster.nodes] == [
        ("~/.ssh/team_key", "/data/work", {"NCCL_DEBUG": "INFO"})] * 2
    assert oct((tmp_path / "grpo-ui.db").stat().st_mode & 0o777) == "0o600" and oct(tmp_path.stat().st_mode & 0o777) \
        == "0o700"


def test_a_draft_that_no_longer_loads_is_kept_aside_and_the_user_told(tmp_path, monkeypatch):
    monkeypatch.setenv("GRPO_UI_HOME", str(tmp_path))
    (tmp_path / "draft.yaml").write_text(DRAFT + "from_a_newer_version: 1\n")
    at = AppTest.from_file(APP, default_timeout=60).run()
    kept = list(tmp_path.glob("draft-unreadable-*.yaml"))
    assert len(kept) == 1 and kept[0].read_text() == DRAFT + "from_a_newer_version: 1\n"
    notice = at.warning[0].value
    assert str(kept[0]) in notice and "from_a_newer_version" in notice


def widget_keys(at) -> set[str]:
    return {w.key for kind in ("text_input", "text_area", "checkbox", "selectbox") for w in at.get(kind) if w.key}


def test_every_declared_field_is_on_the_form(tmp_path, monkeypatch):
    """Each ms-swift argument its version takes in its section, the job settings in the sidebar, the cluster, Slurm
    and Ray settings of the chosen backend (and only those) below the node table, every node setting as a column of
    it, and the estimate's settings in the step-time panel."""
    from grpo_ui.spec.form import FORM_FIELDS, NODE_FIELDS, ROW, on_form
    from grpo_ui.spec.yaml_io import load_spec

    monkeypatch.setenv("GRPO_UI_HOME", str(tmp_path))
    (tmp_path / "draft.yaml").write_text(EVERY_SETTING.read_text())  # backend slurm
    at = AppTest.from_file(APP, default_timeout=60).run()
    seen = set()
    for group in dict.fromkeys(d.group for d in ARGS):
        at.button_group(key="section").set_value(group).run()
        seen |= widget_keys(at)
    assert not at.exception
    settings = [d for d in FORM_FIELDS if d.section in ("job", "cluster", "slurm", "estimate")]
    spec = load_spec(EVERY_SETTING)
    taken = [d for d in FORM_FIELDS if on_form(d, spec, spec.swift_version, spec.engine)]
    assert {f"f:{d.path}" for d in taken if d.applies not in ("ssh", "ray")} <= seen
    assert len(taken) >= len(FORM_FIELDS) - 1  # num_infer_workers: ms-swift 3.2–3.4 only
    assert not {f"f:{d.path}" for d in settings if d.applies in ("ssh", "ray")} & seen
    for backend in ("ssh", "ray"):
        at.selectbox(key="f:cluster.backend").set_value(backend).run()
        shown = widget_keys(at)
        assert {f"f:{d.path}" for d in settings if d.applies in (None, backend)} <= shown
        assert not {f"f:{d.path}" for d in settings if d.applies not in (None, backend)} & shown
    table = next(d for d in at.dataframe if d.key == "nodes")
    assert list(table.value.columns) == [d.name for d in NODE_FIELDS] + [ROW]


def test_a_form_round_trip_keeps_every_field_and_table_edits_land(tmp_path, monkeypatch):
    """Every setting (node identity_file, workdir, env, gpu_memory_gib, Slurm, job env and extra arguments …) comes
    back unchanged when another field is edited, hidden or not (master_addr is an SSH setting: hidden on Slurm); a
    cell edited in the node table changes that field only."""
    from grpo_ui.spec.paths import with_changes
    from grpo_ui.spec.yaml_io import load_spec

    monkeypatch.setenv("GRPO_UI_HOME", str(tmp_path))
    (tmp_path / "draft.yaml").write_text(EVERY_SETTING.read_text())
    at = AppTest.from_file(APP, default_timeout=60).run()
    field(at, "train.num_generations").set_value("8").run()
    expected = with_changes(load_spec(EVERY_SETTING), {"train.num_generations": 8})
    assert load_draft().model_dump(exclude_unset=True) == expected.model_dump(exclude_unset=True)
    at.session_state["nodes"] = {"edited_rows": {"1": {"env": "A=1", "gpu_memory_gib": 40.0, "workdir": "/w",
                                                       "identity_file": "~/.ssh/other"}},
                                 "added_rows": [], "deleted_rows": []}
    at.run()
    expected = with_changes(expected, {"cluster.nodes[1].env": {"A": "1"}, "cluster.nodes[1].gpu_memory_gib": 40.0,
                                       "cluster.nodes[1].workdir": "/w", "cluster.nodes[1].identity_file": "~/.ssh/other"})
    assert load_draft().model_dump(exclude_unset=True) == expected.model_dump(exclude_unset=True)


def test_every_run_ends_with_the_marker_the_browser_waits_for(tmp_path, monkeypatch):
    """views/runs.py: a finished run draws the session's next run count, on every page, also where a page ends early
    (Monitor and History without jobs); the Monitor's live fragments mark their runs under their own names."""
    import streamlit as st

    monkeypatch.setenv("GRPO_UI_HOME", str(tmp_path))
    monkeypatch.setenv("GRPO_UI_DB", str(tmp_path / "db.sqlite"))
    st.cache_resource.clear()  # the app's jobs service is cached per process: open this test's empty store

    def markers(at):
        return [m for h in at.html for m in re.findall(r'data-part="(\w+)" data-run="(\d+)"', h.value)]

    at = AppTest.from_file(APP, default_timeout=60).run()
    seen = [markers(at)]
    for page in ("monitor", "history", "cluster", "launch", "configure"):
        at.switch_page(f"views/{page}.py").run()
        assert not at.exception, page
        seen.append(markers(at))
    assert seen == [[("page", str(n))] for n in range(1, 7)]
    Store().create_job("job-a", "a", (EVERY_SETTING).read_text(), "succeeded")
    at.switch_page("views/monitor.py").run()
    assert [part for part, _ in markers(at)] == ["live", "logs", "page"]
