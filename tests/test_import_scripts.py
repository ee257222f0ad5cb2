"""Importing a launch script never invents a value: what bash -n or ms-swift's parser would refuse is refused (naming
the line and the flag) or kept as a partial draft that says what is missing, an imported draft is named after its
script and model, a refused paste says why where the user pasted, and text keeps its line breaks through the form,
YAML, the scripts and ms-swift's parser (issue 26). The browser's side is tests/test_browser_story.py."""

import shlex
import subprocess

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from streamlit.testing.v1 import AppTest

from grpo_ui.__main__ import main
from grpo_ui.checks import rules
from grpo_ui.importer import PASTED, ImportRefused, import_scripts, import_uploads
from grpo_ui.jobs.drafts import latest_spec
from grpo_ui.jobs.store import Store
from grpo_ui.launch.render import render, write_bundle
from grpo_ui.spec.swift_cli import TRAIN_FLAGS, stands_alone
from grpo_ui.spec.yaml_io import spec_from_yaml as load_spec_text
from grpo_ui.spec.yaml_io import spec_to_yaml
from tests.pages import APP
from tests.swift_oracle import CORPUS, make_stubs, probe, run_script
from tests.test_example_findings import EXAMPLES

UNCLOSED = """CUDA_VISIBLE_DEVICES=0 \\
swift rlhf \\
    --rlhf_type grpo \\
    --model Qwen/Qwen2.5-7B-Instruct \\
    --system 'You are a careful math tutor. Think step by step. \\
    --reward_funcs accuracy format \\
    --dataset AI-MO/NuminaMath-TIR#1000 \\
    --num_generations 8
"""


def ids(findings) -> set[str]:
    return {f.id for f in findings}


# --- 1. Import refuses what it cannot read ----------------------------------------------------------------------

def test_a_flag_without_its_value_is_refused_naming_line_and_flag_never_true():
    script = "#!/bin/bash\nswift rlhf --rlhf_type grpo --dataset d --reward_funcs format \\\n    --model\n"
    with pytest.raises(ImportRefused) as refused:
        import_scripts([("grpo.sh", script)])
    (f,) = refused.value.findings
    assert f.id == "IMPORT-NO-VALUE" and f.fields == ("train.model",)
    assert "grpo.sh line 3" in f.message and "--model" in f.message and "true" not in f.message.split(":", 1)[0]
    spec, findings = import_scripts([("grpo.sh", script)], keep_partial=True)
    assert spec.train.model is None and "train.model" in spec.import_errors  # nothing invented, the draft says so
    assert "IMPORT-PARTIAL" in ids(rules.validate(spec))


def test_a_flag_followed_by_another_flag_has_no_value_either():
    with pytest.raises(ImportRefused, match="--dataset is given no value"):
        import_scripts([("a.sh", "swift rlhf --rlhf_type grpo --model m --dataset --reward_funcs format\n")])


def test_a_switch_may_stand_alone_as_ms_swifts_parser_allows():
    spec, findings = import_scripts([("a.sh", "swift rlhf --rlhf_type grpo --model m --dataset d --reward_funcs f "
                                              "--external_plugins p.py --use_vllm --log_completions\n")])
    assert spec.rollout.use_vllm is True and spec.train.log_completions is True and not spec.import_errors


def test_an_unclosed_quote_is_refused_at_its_line_and_flag_and_lists_what_it_swallowed():
    with pytest.raises(ImportRefused) as refused:
        import_scripts([("grpo_math.sh", UNCLOSED)])
    (f,) = refused.value.findings
    assert f.id == "IMPORT-SHELL-SYNTAX" and f.fields == ("train.system",)
    assert "grpo_math.sh line 5, --system" in f.message and "never closes" in f.message
    assert "--reward_funcs, --dataset, --num_generations" in f.message


def test_a_kept_partial_import_says_what_is_missing_and_offers_no_fix_that_hides_it():
    spec, _ = import_scripts([("grpo_math.sh", UNCLOSED)], keep_partial=True)
    assert spec.train.system is None and set(spec.import_errors) == {
        "train.system", "train.reward_funcs", "train.dataset", "train.num_generations"}
    found = rules.validate(spec)
    knock_on = [f for f in found if f.id in ("REWARD-MISSING", "SPEC-DATASET-MISSING")]
    assert knock_on and all(not f.apply and "restore the value from the script" in f.fix for f in knock_on)
    partial = [f for f in found if f.id == "IMPORT-PARTIAL"]
    assert len(partial) == 4 and all(f.severity == "error" for f in partial)


BROKEN = {  # bash -n refuses each of these: the importer must too
    "single quote": UNCLOSED,
    "double quote": 'swift rlhf --rlhf_type grpo --model m \\\n  --system "You are\n  --dataset d\n',
    "ansi-c quote": "swift rlhf --rlhf_type grpo --model m --system $'abc\n--dataset d\n",
    "quote later": 'swift rlhf --rlhf_type grpo --system "a" --model "b\nexport X=1\n',
    "backquote": "swift rlhf --rlhf_type grpo --dataset d --model `x\n",
    "stray paren": "swift rlhf --rlhf_type grpo --model m --dataset d --x ) --y 1\n",
    "open brace": "swift rlhf --rlhf_type grpo --dataset d --model ${M\n",
    "if without fi": "if true; then\nswift rlhf --rlhf_type grpo --model m --dataset d\n",
    "function without }": "run() {\nswift rlhf --rlhf_type grpo --model m --dataset d\n",
}


def bash_refuses(text: str) -> bool:
    return subprocess.run(["bash", "-n"], input=text, text=True, capture_output=True).returncode != 0


@pytest.mark.parametrize("name", list(BROKEN))
def test_what_bash_cannot_parse_is_refused_like_bash_does(name):
    assert bash_refuses(BROKEN[name])
    with pytest.raises(ImportRefused) as refused:
        import_scripts([("s.sh", BROKEN[name])])
    assert all(f.id == "IMPORT-SHELL-SYNTAX" and "s.sh line " in f.message for f in refused.value.findings)


def test_every_corpus_script_parses_for_bash_and_for_the_importer():
    """The other side of the oracle: nothing bash accepts is refused."""
    scripts = sorted(CORPUS.rglob("*.sh"))
    assert len(scripts) >= 45
    for path in scripts:
        assert not bash_refuses(path.read_text()), path
    for case in sorted(CORPUS.iterdir()):
        members = sorted(case.iterdir()) if case.is_dir() else [case]
        version = "3.12" if case.name.startswith("v3") else "4.6"
        import_scripts([(p.name, p.read_bytes()) for p in members if p.suffix == ".sh"], version,
                       {p.name: p.read_bytes() for p in members if p.suffix != ".sh"})


VALUED = sorted(n for n, d in TRAIN_FLAGS.items() if not stands_alone(d) and d.section == "train")


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.sampled_from(VALUED), st.sampled_from(["", "7", "x y", "0.5", "a#b"])), max_size=8))
def test_never_a_value_the_script_did_not_contain(flags):
    """Whatever flags a script gives with or without values, a kept partial import sets a field only from a flag that
    had one, and a field whose flag had none is listed as missing."""
    script = "swift rlhf --rlhf_type grpo " + " ".join(f"--{n} {v}".strip() for n, v in flags) + "\n"
    try:
        spec, _ = import_scripts([("p.sh", script)], keep_partial=True)
    except ImportRefused:
        return
    given_values = {}
    for name, value in flags:
        given_values[name] = value  # the last occurrence wins, as in argparse
    for name, value in given_values.items():
        decl = TRAIN_FLAGS[name]
        is_set = decl.name in spec.train.model_fields_set
        if not value:
            assert not is_set and decl.path in spec.import_errors, (name, script)
        elif is_set:
            shown = getattr(spec.train, decl.name)
            assert str(shown).lower() != "true" or value == "true", (name, shown)


def test_the_command_line_writes_no_yaml_for_a_refused_script(tmp_path, capsys):
    (tmp_path / "grpo_math.sh").write_text(UNCLOSED)
    assert main(["import", str(tmp_path / "grpo_math.sh")]) == 1
    out, err = capsys.readouterr()
    assert out == "" and "line 5, --system" in err and "--keep-partial" in err
    assert main(["import", str(tmp_path / "grpo_math.sh"), "--keep-partial"]) == 1
    out, _ = capsys.readouterr()
    assert "import_errors:" in out and "train.system" in out


# --- 4. Imported drafts are named after the script and its model ------------------------------------------------

def test_an_imported_draft_is_named_after_its_script_and_model():
    script = "swift rlhf --rlhf_type grpo --model Qwen/Qwen2.5-7B-Instruct --dataset d --reward_funcs format\n"
    assert import_scripts([("examples/grpo_7b.sh", script)])[0].name == "grpo_7b-Qwen2.5-7B-Instruct"
    assert import_uploads({PASTED: script.encode()})[0].name == "Qwen2.5-7B-Instruct"


# --- 1 (the page). The refusal is shown where the user pasted and at the top; a kept partial draft says so ---------

def configure(tmp_path, monkeypatch):
    monkeypatch.setenv("GRPO_UI_HOME", str(tmp_path))
    import streamlit
    streamlit.cache_resource.clear()
    return AppTest.from_file(str(APP), default_timeout=60).run()


def paste(at, script: str):
    at.text_area(key="import_text").set_value(script).run()
    next(b for b in at.button if b.label == "Import").click().run()
    return at


def test_a_refused_paste_makes_no_draft_and_says_why_beside_the_paste_box_and_on_the_page(tmp_path, monkeypatch):
    at = paste(configure(tmp_path, monkeypatch), UNCLOSED)
    assert len(Store().drafts()) == 1  # the preset the page opened with: no draft from the refused script
    in_sidebar = [e.value for e in at.sidebar.error]
    on_page = [e.value for e in at.main.error]
    assert any("line 5, --system" in e for e in in_sidebar)
    assert any(e.startswith("**Import refused: no draft was made.**") and "line 5, --system" in e for e in on_page)
    next(b for b in at.button if b.label == "Keep what could be read as a draft").click().run()
    kept = latest_spec()
    assert kept.name == "Qwen2.5-7B-Instruct" and "train.system" in kept.import_errors
    banner = next(e.value for e in at.main.error if "partial import" in e.value)
    assert "`train.system`" in banner and "`train.dataset`" in banner
    assert not [b for b in at.button if b.label == "Apply fix" and b.key in ("fix:REWARD-MISSING",
                                                                          "fix:SPEC-DATASET-MISSING")]
    assert next(d for d in at.download_button).proto.disabled  # held until every field is filled in


def test_each_import_replaces_what_the_last_one_said(tmp_path, monkeypatch):
    """A refused paste after a good import left that import's notes beside the refusal; a good one after a YAML
    that does not validate left the YAML's error (issue 32, first-hour defect 1). Each import's outcome now
    replaces the last one's, under the paste box and at the top of the page."""
    at = configure(tmp_path, monkeypatch)
    example = (EXAMPLES / "external_server_7b.sh").read_text()

    def sidebar(at) -> str:
        return "\n".join([e.value for e in at.sidebar.error] + [c.value for c in at.sidebar.caption])

    paste(at, example)
    assert "--train_type is called --tuner_type" in sidebar(at)
    paste(at, UNCLOSED)
    assert "line 5, --system" in sidebar(at) and "--tuner_type" not in sidebar(at)
    paste(at, "name: x\ntrain:\n  num_generations: banana\n")
    assert "num_generations: Input should be a valid int" in sidebar(at) and "line 5, --system" not in sidebar(at)
    assert not [e for e in at.main.error if "Import refused" in e.value]
    paste(at, UNCLOSED)
    assert [e for e in at.main.error if "Import refused" in e.value] and "banana" not in sidebar(at)
    next(b for b in at.button if b.label == "Dismiss").click().run()
    assert not [e for e in at.main.error if "Import refused" in e.value] and "line 5" not in sidebar(at)
    paste(at, UNCLOSED)
    paste(at, example)
    assert "--train_type is called --tuner_type" in sidebar(at) and "line 5" not in sidebar(at)
    assert not [e for e in at.main.error if "Import refused" in e.value]


# --- 2. Text fields keep what they hold: edit → YAML → render → ms-swift's parser --------------------------------

PROMPT = ("You are a careful math tutor.\nThink step by step.\n\nPut the final answer in \\boxed{}.\n"
          "Never guess a value.")


@pytest.mark.slow
def test_a_multi_line_system_prompt_survives_an_edit_and_reaches_ms_swift_intact(tmp_path, monkeypatch,
                                                                                 swift_python):
    script = ("swift rlhf --rlhf_type grpo --model Qwen/Qwen2.5-7B-Instruct --dataset AI-MO/NuminaMath-TIR#1000 "
              f"--reward_funcs accuracy --system {shlex.quote(PROMPT)}\n")
    at = paste(configure(tmp_path, monkeypatch), script)
    assert latest_spec().train.system == PROMPT
    at.button_group(key="section").set_value("model").run()
    box = at.text_area(key="f:train.system")  # a multi-line box: a one-line input drops the line breaks
    assert box.value == PROMPT
    edited = PROMPT.replace("careful", "very careful")
    box.set_value(edited).run()
    spec = latest_spec()
    assert spec.train.system == edited and load_spec_text(spec_to_yaml(spec)).train.system == edited
    bundle = render(spec, "prompt")
    write_bundle(bundle, tmp_path / "bundle")
    stubs = make_stubs(tmp_path / "stubs")
    (run,) = run_script(tmp_path / "bundle" / "node_0.sh", tmp_path, stubs)
    parsed = probe(swift_python, [{"kind": run.kind, "argv": run.argv, "cwd": str(tmp_path), "env": {}},
                                  {"kind": "rlhf", "argv": [str(tmp_path / "bundle" / "swift_0.yaml")],
                                   "cwd": str(tmp_path), "env": {}}])
    assert [r["ns"]["system"] for r in parsed["results"]] == [edited, edited]
