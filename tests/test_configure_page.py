"""The Configure page (Streamlit's AppTest, the rendered scripts, the chart's figure): what its verdicts hold back
and release (downloads, the launch, an override's reason), the form's cells, findings beside their fields, the step
indicator, the model picker and config.json, make-it-fit cards and the memory chart. Each test keeps a defect a new
user met fixed (issue 18, and the review findings after it)."""

import json
from xml.etree import ElementTree

import pytest
from streamlit.testing.v1 import AppTest

from grpo_ui.checks.assess import assess
from grpo_ui.importer import import_scripts
from grpo_ui.jobs.drafts import latest_spec
from grpo_ui.jobs.service import Jobs, LaunchError
from grpo_ui.jobs.store import Store
from grpo_ui.launch.plan import make_plan
from grpo_ui.launch.render import render
from grpo_ui.memory.estimate import estimate_spec
from grpo_ui.spec import form
from grpo_ui.spec.paths import with_changes
from grpo_ui.spec.presets import presets
from grpo_ui.spec.resolve import resolve
from grpo_ui.spec.yaml_io import spec_to_yaml
from tests.pages import ROOT, card_changes, downloads_disabled, draft_of, field, open_app, texts
from tests.test_example_findings import EXAMPLES
from views.memory_chart import memory_chart, series

FIRST, FULL, ROLLOUT = presets().values()


def test_two_tabs_do_not_overwrite_each_others_draft(home):
    a = open_app()
    b = open_app({"draft": draft_of(a)})
    field(a, "train.num_generations").set_value("16").run()
    field(b, "train.max_completion_length").set_value("999").run()
    saved = Store().drafts()
    assert len(saved) == 1 and "num_generations: 16" in saved[0].spec_yaml and "999" not in saved[0].spec_yaml \
        and "changed in another tab" in texts(b)


def test_an_oom_verdict_holds_every_download(home):
    at = open_app()
    field(at, "train.lora_rank").set_value("256").run()
    field(at, "rollout.vllm_gpu_memory_utilization").set_value("0.9").run()
    assert at.metric[0].value == "OOM" and downloads_disabled(at) == [True, True]


def test_an_oom_verdict_holds_the_launch_until_a_reason_is_given(home):
    oom = with_changes(FIRST, {"train.lora_rank": 256, "rollout.vllm_gpu_memory_utilization": 0.9})
    (home / "draft.yaml").write_text(spec_to_yaml(oom))
    import streamlit as st
    st.cache_resource.clear()
    at = AppTest.from_file(str(ROOT / "views/launch.py"), default_timeout=60).run()
    launch = next(b for b in at.button if b.label == "Launch")
    held = launch.proto.disabled and any("MEMORY-OOM" in e.value for e in at.error)
    next(t for t in at.text_input if t.label.startswith("Override")).set_value("it fits on this card").run()
    assert held and not next(b for b in at.button if b.label == "Launch").proto.disabled


def test_an_override_reason_releases_the_downloads(home):
    at = open_app()
    field(at, "rollout.vllm_gpu_memory_utilization").set_value("0.9").run()
    field(at, "train.lora_rank").set_value("256").run()
    draft = draft_of(at)
    at.text_input(key=f"override:{draft}").set_value("measured on this card: it fits").run()
    assert downloads_disabled(at) == [False, False]


@pytest.mark.parametrize("path,text", [("train.num_generations", "abc"), ("train.learning_rate", "-1e-5")])
def test_a_form_that_does_not_parse_shows_no_verdict_and_exports_nothing(home, path, text):
    at = open_app()
    assert at.metric[0].value == "FITS"
    field(at, path).set_value(text).run()
    assert "Verdict" not in [m.label for m in at.metric] and downloads_disabled(at) == [True, True]


def test_make_it_fit_cards_show_the_change_and_the_resulting_peak(home):
    at = open_app()
    field(at, "train.lora_rank").set_value("256").run()
    field(at, "rollout.vllm_gpu_memory_utilization").set_value("0.9").run()
    cards = [m.value for m in at.markdown if m.value.startswith("**") and " GiB** · " in m.value]
    changes = card_changes(at)
    assert cards and len(changes) == len(cards) and changes[0] == "- rollout.vllm_gpu_memory_utilization → 0.7"


def drawn(svg_text: str) -> ElementTree.Element:
    """A chart as the browser gets it (SVG), parsed."""
    return ElementTree.fromstring(svg_text)


def test_the_memory_chart_has_one_colour_per_term_and_its_legend_and_capacity_clear_of_the_bars():
    report = estimate_spec(ROLLOUT)
    chart = drawn(memory_chart(report))
    colours = [s.colour for s in series(report)]
    assert len(set(colours)) == len(colours) > 8
    bars = [r for r in chart.iter("rect") if r.find("title") is not None and r.find("title").text.endswith(" GiB")]
    bottom = max(float(r.get("y")) + float(r.get("height")) for r in bars)
    legend = chart.find("g")  # below the bars, naming every term
    assert float(legend.get("transform").split()[1].rstrip(")")) > bottom
    assert {s.name for s in series(report)} <= {t.text for t in legend.iter("text")}
    (cap,) = [line for line in chart.iter("line") if line.get("stroke") == "red"]  # the capacity: a line, not a bar
    assert cap.get("stroke-dasharray") and "dashed red line" in chart.find("text").text


def test_an_unknown_model_points_to_a_config_json_that_can_be_uploaded(home):
    at = open_app()
    field(at, "train.model").set_value("acme/house-model-7b").run()
    uploader = next(u for u in at.get("file_uploader") if u.proto.label == "config.json")
    assert ".json" in list(uploader.proto.type) and "Model unknown: give its config.json" in texts(at)


def test_the_first_step_says_what_is_missing_and_links_to_it(home):
    data = FIRST.model_dump(exclude_unset=True)
    for node in data["cluster"]["nodes"]:
        node.pop("gpu_model", None)
    (home / "draft.yaml").write_text(spec_to_yaml(type(FIRST).model_validate(data)))
    at = open_app()
    step = next(m.value for m in at.markdown if "No GPU model chosen" in m.value)
    assert "](#model)" in step and at.selectbox(key="pick_gpu:None").label == "GPU model (every node)"


def test_a_new_node_row_with_empty_gpus_is_an_error_not_gpu_0():
    rows = form.node_rows(FIRST) + [{"host": "gpu-b", "gpus": "", form.ROW: None}]
    _, errors = form.build_spec(FIRST, {}, rows)
    assert "cluster.nodes[1].gpus" in errors


def test_empty_number_cells_are_empty_not_none():
    port = next(d for d in form.NODE_FIELDS if d.name == "port")
    no_gpu_model = with_changes(FIRST, {"cluster.nodes[0].gpu_model": None})
    assert form.column_kind(port) == "text" and form.node_rows(no_gpu_model)[0] | {form.ROW: ""} == dict.fromkeys(form.node_rows(no_gpu_model)[0], "") | {"host": "localhost", "gpus": "0,1,2,3", "role": "trainer"}


def test_a_bad_hosts_error_is_marked_on_its_row(home):
    from grpo_ui.backends.preflight.status import ConnectionTest, connection_of
    at = AppTest.from_file(str(ROOT / "views/cluster.py"), default_timeout=60)
    at.session_state["host_tests"] = {"localhost": ConnectionTest(False, "cannot connect to localhost:22: refused",
                                                                  connection_of(FIRST.cluster.nodes[0]))}
    at.run()
    row = next(d for d in at.dataframe if "status" in d.value.columns).value.to_dict("records")[0]
    assert row["status"] == "✗ cannot connect to localhost:22: refused"


def test_a_finding_is_shown_once_with_all_its_fields(home):
    (home / "draft.yaml").write_text(spec_to_yaml(with_changes(ROLLOUT, {"train.num_generations": 7})))
    at = open_app()
    field(at, "train.num_generations")  # the section of its fields: drawn beside them too
    shown = [e.label for e in at.expander if "GRPO-BATCH-DIV" in e.label]
    in_full = [m.value for m in at.markdown if "**GRPO-BATCH-DIV**:" in m.value]
    assert len(shown) == 1 and len(in_full) == 1


def test_the_dataloader_advisory_only_for_vision_models():
    from grpo_ui.checks.assess import assess
    text_model = {f.id for f in assess(with_changes(FIRST, {"train.dataloader_num_workers": 0})).findings}
    vision = {f.id for f in assess(with_changes(FIRST, {"train.model": "Qwen/Qwen2.5-VL-7B-Instruct",
                                                       "train.dataloader_num_workers": 0})).findings}
    assert "SEED-DATALOADER-WORKERS" not in text_model and "SEED-DATALOADER-WORKERS" in vision


def test_the_swift_command_has_one_flag_per_line():
    script = render(ROLLOUT, "j").files["node_0.sh"]
    command = script[script.index("swift rlhf"):].split("\ncode=$?")[0].splitlines()
    assert len(command) > 10 and all(line.startswith("    --") and line.endswith(" \\") for line in command[1:-1])


def test_a_model_picked_from_the_catalogue_is_a_hub_id_ms_swift_can_download(home):
    """Review finding: picking 'Qwen3-8B · 8.2 B params' wrote --model Qwen3-8B, which is neither a path nor a Hub
    id. The picker offers the catalogue's checkpoints as Hub ids."""
    at = open_app()
    picker = next(s for s in at.selectbox if s.key and s.key.startswith("pick_model:"))
    assert "Qwen/Qwen3-8B · 8.2 B params" in picker.options and "Qwen3-8B · 8.2 B params" not in picker.options
    picker.select("Qwen/Qwen3-8B").run()
    assert not at.exception and latest_spec().train.model == "Qwen/Qwen3-8B"


def test_a_pasted_config_json_survives_a_reload_and_reaches_the_launch_plan(home):
    from tests.test_app import QWEN25_7B_CONFIG
    at = open_app()
    field(at, "train.model").set_value("acme/house-model-7b").run()
    at.text_area(key="config_json_text").set_value(QWEN25_7B_CONFIG).run()
    next(b for b in at.button if b.label == "Use this config.json").click().run()
    reloaded = open_app({"draft": draft_of(at)})  # a new session: nothing of the old one's state
    import streamlit as st
    st.cache_resource.clear()
    launch = AppTest.from_file(str(ROOT / "views/launch.py"), default_timeout=60)
    launch.query_params["draft"] = draft_of(at)
    shown = texts(launch.run())
    assert "Verdict" in [m.label for m in reloaded.metric] and "hidden_size: 3584" in Store().drafts()[0].spec_yaml \
        and "Memory estimate kept with the job" in shown and "No memory estimate" not in shown


def test_an_override_reason_given_on_configure_is_there_on_launch(home):
    at = open_app()
    field(at, "train.num_generations").set_value("7").run()
    draft = draft_of(at)
    at.text_input(key=f"override:{draft}").set_value("measured: it runs").run()
    at.switch_page("views/cluster.py").run()  # a page without the field: Streamlit drops the widget's state
    at.switch_page("views/launch.py").run()
    reason = at.text_input(key=f"launch_override:{draft}")
    launch = next(b for b in at.button if b.label == "Launch")
    assert reason.value == "measured: it runs" and not launch.proto.disabled


def step(at, title: str) -> str:
    return next(m.value for m in at.markdown if f". {title}](#" in m.value)


def test_a_node_cell_that_does_not_parse_counts_against_the_cluster_step(home):
    at = open_app()
    at.session_state["nodes"] = {"edited_rows": {"0": {"gpus": "x,y"}}, "added_rows": [], "deleted_rows": []}
    at.run()
    assert "do not parse" in step(at, "Cluster") and "done" in step(at, "Training settings")


def test_the_scripts_and_launch_steps_say_what_the_downloads_and_the_link_do(home):
    at = open_app()
    field(at, "train.num_generations").set_value("7").run()
    blocked = [step(at, "Scripts"), step(at, "Launch")], downloads_disabled(at)
    at.text_input(key=f"override:{draft_of(at)}").set_value("measured: it runs").run()
    released = [step(at, "Scripts"), step(at, "Launch")], downloads_disabled(at)
    assert all("blocked" in s for s in blocked[0]) and blocked[1] == [True, True]
    scripts, launch = released[0]  # launch also waits for the hosts to be checked (issue 26)
    assert "ready" in scripts and "after step 2" in launch and released[1] == [False, False]


def test_a_catalogue_model_asks_for_no_config_json_when_a_field_does_not_parse(home):
    at = open_app()
    field(at, "train.num_generations").set_value("abc").run()
    assert not [u for u in at.get("file_uploader") if u.proto.label == "config.json"]


def test_the_chart_marks_torchs_cache_reclaimable_and_the_page_names_the_nvidia_smi_figure(home):
    report = estimate_spec(FULL)
    (home / "draft.yaml").write_text(spec_to_yaml(FULL))
    chart = drawn(memory_chart(report))
    patterns = {p.get("id") for p in chart.iter("pattern")}
    for s in series(report):  # a reclaimable term hatched and lighter, every other one plain
        fills = {(r.get("fill"), r.get("opacity")) for r in chart.iter("rect")
                 if r.find("title") is not None and f": {s.name} " in r.find("title").text}
        assert fills and s.hatched == s.name.endswith(" (reclaimable)")
        assert fills == ({(f"url(#{s.pattern_id})", "0.5")} if s.hatched else {(s.colour, None)})
        assert s.pattern_id in patterns or not s.hatched
    assert any(s.hatched for s in series(report))
    trainer = report.trainer
    assert f"nvidia-smi will show about {trainer.expected_gib:.1f} GiB" in texts(open_app())


def test_a_row_added_to_the_node_table_starts_blank_with_the_first_nodes_choices(home):
    """Review finding: every cell of a row added in the table showed "None". Text cells now start empty, a setting
    that may be unset offers an empty choice, and role and GPU model start as the first node's."""
    at = open_app()
    columns = json.loads(next(d.proto.columns for d in at.dataframe if "identity_file" in d.proto.columns))
    assert {name: c["default"] for name, c in columns.items() if c.get("type_config", {}).get("type") == "text"} == \
        dict.fromkeys(("host", "user", "port", "identity_file", "address", "gpus", "gpu_memory_gib", "python_env",
                       "workdir", "env"), "")
    assert columns["role"]["default"] == "trainer" and "" not in columns["role"]["type_config"]["options"]
    assert columns["gpu_model"]["default"] == FIRST.cluster.nodes[0].gpu_model
    assert columns["gpu_model"]["type_config"]["options"][0] == ""


# Issue 24: two copies of one ms-swift fact that disagreed, and make-it-fit cards whose claims were false.

IMPORTED_ENV = ("export TOKENIZERS_PARALLELISM=false HF_TOKEN=hf_x IMAGE_MAX_TOKEN_NUM=1024\n"
                "swift rlhf --rlhf_type grpo --model Qwen/Qwen2.5-7B-Instruct --dataset d --reward_funcs accuracy\n")


def test_an_imported_tokenizers_setting_stays_a_setting_and_the_launch_asks_only_for_the_token(tmp_path):
    """The importer took any name containing TOKEN or KEY for a secret: TOKENIZERS_PARALLELISM lost its value and the
    launch demanded one. The importer now asks the spec's own rule (spec.names.is_secret_name)."""
    spec, findings = import_scripts([("run.sh", IMPORTED_ENV)])
    assert spec.secret_env == ["HF_TOKEN"] and [f.id for f in findings if f.id == "IMPORT-SECRET"] == ["IMPORT-SECRET"]
    assert spec.env == {"TOKENIZERS_PARALLELISM": "false", "IMAGE_MAX_TOKEN_NUM": "1024"}
    script = render(spec, "j").files["node_0.sh"]
    assert "export TOKENIZERS_PARALLELISM=false\n" in script and "hf_x" not in script
    with pytest.raises(LaunchError, match=r"secret value\(s\) missing for HF_TOKEN:"):
        Jobs(Store(tmp_path / "db.sqlite")).launch(make_plan(spec, "j"), override="a test: nothing starts")


def cards_on_page() -> list[str]:
    """The changes of each make-it-fit card Configure shows for the draft."""
    return card_changes(open_app())


def new_errors(spec, changes) -> set[str]:
    def errors(job):
        return {f.id for f in assess(job).findings if f.severity == "error" and not f.id.startswith("MEMORY-")}
    return errors(with_changes(spec, changes)) - errors(spec)


def test_make_it_fit_never_offers_liger_where_the_rules_forbid_it(home):
    """Make-it-fit knew three of the seven things Liger cannot run with: on the full-tuning preset on A10 GPUs with
    log_entropy it offered use_liger_kernel, whose card raised LIGER-INCOMPATIBLE. Every card is now checked by the
    rules on the job it produces."""
    job = with_changes(FULL, {"cluster.nodes[0].gpu_model": "NVIDIA A10", "train.log_entropy": True})
    (home / "draft.yaml").write_text(spec_to_yaml(job))
    a = assess(job)
    assert a.verdict == "oom" and a.suggestions
    cards = cards_on_page()
    assert len(cards) == len(a.suggestions) and not any("use_liger_kernel" in c for c in cards)
    assert all(new_errors(job, s.changes) == set() for s in a.suggestions)


def test_a_same_batch_card_keeps_the_batch_and_brings_back_no_error(home):
    """With num_generations 7, GRPO-BATCH-DIV's fix made the micro-batch 7; a card then offered "micro-batch 3 with 4
    accumulation steps (same batch)", 7 × 2 = 14 → 3 × 4 = 12, and GRPO-BATCH-DIV came back. What a card says about
    the batch is now computed on the job it produces, and a card that raises an error is not offered."""
    job = with_changes(ROLLOUT, {"train.num_generations": 7})
    div = next(f for f in assess(job).findings if f.id == "GRPO-BATCH-DIV")
    job = with_changes(job, div.apply)
    assert job.train.per_device_train_batch_size == 7
    a = assess(job)
    batch_cards = [s for s in a.suggestions if "train.per_device_train_batch_size" in s.changes]
    assert batch_cards and all("(same batch)" in s.why for s in batch_cards)
    for s in a.suggestions:
        before, after = resolve(job), resolve(with_changes(job, s.changes))
        t0, t1 = before.spec.train, after.spec.train
        assert after.generation_batch == before.generation_batch
        assert (t1.per_device_train_batch_size * after.grad_accum == t0.per_device_train_batch_size * before.grad_accum)
        assert new_errors(job, s.changes) == set()


# Issue 32: the first hour, tried as a new user would (ms-swift's example scripts as shipped; test_walkthrough and
# test_browser_firsthour for what is seen in the browser).

def imported(name: str, **changes):
    spec = import_scripts([(name, (EXAMPLES / name).read_bytes())])[0]
    return with_changes(spec, changes)


def test_make_it_faster_says_what_its_cards_lead_to(home):
    """The first preset fits; one of its faster cards leads to TIGHT, under a heading that said each option 'still
    fits' (defect 7). The heading now says each stays within the card and what TIGHT means."""
    a = assess(FIRST)
    assert a.verdict == "fits" and "tight" in {f.verdict for f in a.faster}
    heading = next(m.value for m in open_app().markdown if m.value.startswith("**Make it faster**"))
    assert "still fits" not in heading
    assert "stays within the card (TIGHT: not with the estimate's error margin)" in heading


def test_no_make_it_faster_cards_say_why(home):
    """grpo_7b.sh imported as shipped has an error open (its rollout server outside the job): no faster cards, and
    nothing said why (defect 8). Now the page says the search waits for the job to pass; once it passes, the cards."""
    spec = imported("external_server_7b.sh", **{"cluster.nodes[0].gpu_model": "NVIDIA H100 80GB HBM3"})
    (home / "draft.yaml").write_text(spec_to_yaml(spec))
    at = open_app()
    assert assess(spec).time is not None and not card_changes(at)
    assert any(c.value.startswith("Make it faster is searched once the job passes") and "ROLLOUT-SERVER-OUTSIDE"
               in c.value for c in at.caption)
    passing = with_changes(spec, {"cluster.external_rollout": True, "secret_env": ["WANDB_API_KEY"]})
    assert not assess(passing).errors and assess(passing).faster


def test_no_nvidia_smi_figure_without_a_gpu_model(home):
    """qlora.sh imported as shipped names no GPU: the page said nvidia-smi would show twice the peak (torch's cache
    bounded by no card; 138.9 GiB for a larger job, more than any card has: defect 9). Without a card the cache is
    not estimated and nothing is said of nvidia-smi; with one, the figure is within the card."""
    spec = import_scripts([("qlora.sh", (ROOT / "tests/import_corpus/v4-30-qlora.sh").read_bytes())])[0]
    (home / "draft.yaml").write_text(spec_to_yaml(spec))
    report = estimate_spec(spec)
    assert report.trainer.capacity_gib is None and report.trainer.expected_gib == report.trainer.peak_gib
    assert not [s for s in series(report) if s.hatched] and not list(drawn(memory_chart(report)).iter("pattern"))
    shown = texts(open_app())
    assert "nvidia-smi will show" not in shown and "is bounded by the card" in shown
    on_a10 = estimate_spec(with_changes(spec, {"cluster.nodes[0].gpu_model": "NVIDIA A10"})).trainer
    assert on_a10.peak_gib < on_a10.expected_gib <= on_a10.capacity_gib


def test_the_form_draws_only_the_arguments_its_ms_swift_version_takes(home):
    """num_infer_workers (ms-swift 3.2–3.4) was on the 4.6 form (defect 11). A 3.4 draft draws it; switched to 4.6 in
    the form, it is gone; a 4.6 draft that sets it draws it, so it can be cleared (VERSION-FLAG-UNSUPPORTED says
    why)."""
    def rollout_fields(at) -> set[str]:
        at.button_group(key="section").set_value("rollout").run()
        return {t.key for t in at.text_input} | {s.key for s in at.selectbox}
    (home / "draft.yaml").write_text(spec_to_yaml(with_changes(FIRST, {"swift_version": "3.4"})))
    at = open_app()
    assert "f:rollout.num_infer_workers" in rollout_fields(at)
    at.selectbox(key="f:swift_version").set_value("4.6").run()
    assert "f:rollout.num_infer_workers" not in rollout_fields(at)
    set_anyway = with_changes(FIRST, {"rollout.num_infer_workers": 2})
    assert form.on_form(form.FIELDS_BY_PATH["rollout.num_infer_workers"], set_anyway, "4.6", "swift")
    assert not form.on_form(form.FIELDS_BY_PATH["rollout.num_infer_workers"], FIRST, "4.6", "swift")


def test_beta_0_is_offered_in_one_click_only_while_memory_may_be_short():
    """grpo_7b.sh on H100s fits with 26 GiB to spare on the trainer GPU, yet SEED-REF-MODEL offered beta 0 — dropping
    the KL term — as a one-click fix (defect 11). It now says the room and applies nothing; on A100-40GB, out of
    memory, the change is offered."""
    roomy = imported("external_server_7b.sh", **{"cluster.nodes[0].gpu_model": "NVIDIA H100 80GB HBM3"})
    (f,) = [f for f in assess(roomy).findings if f.id == "SEED-REF-MODEL"]
    assert f.apply == {} and "26 GiB to spare" in f.message and f.fix.startswith("Nothing to change while it fits")
    short = with_changes(roomy, {"cluster.nodes[0].gpu_model": "NVIDIA A100-SXM4-40GB"})
    assert assess(short).verdict in ("tight", "oom")
    (f,) = [f for f in assess(short).findings if f.id == "SEED-REF-MODEL"]
    assert f.apply == {"train.beta": 0.0}
