"""The import corpus (tests/import_corpus/, scripts written in the styles of ms-swift's examples, docs and issues):
every script's real meaning — bash runs it with recording stubs, ms-swift parses what it ran — equals the meaning of
grpo-ui's rendering of its import, field by field and env included, for ms-swift 4.6 and 3.12.

Also: every declared default is ms-swift's own, in both versions (an unset field must mean what ms-swift assumes).
"""

import pytest

from grpo_ui.spec.model import ARGS
from grpo_ui.spec.swift_cli import stands_alone
from tests import swift_oracle


@pytest.fixture(scope="module")
def corpus(tmp_path_factory, swift_python, swift3_python):
    return swift_oracle.evaluate(tmp_path_factory.mktemp("corpus"))


@pytest.mark.slow
def test_corpus_covers_the_layouts_and_dialects(corpus):
    assert len(corpus) >= 40
    names = " ".join(r.case.name for r in corpus)
    for kind in ("v3-", "v4-", "server", "node", "yaml", "config", "torchrun", "vl", "plugin", "lora"):
        assert kind in names, kind


@pytest.mark.slow
def test_every_script_means_the_same_after_import_and_render(corpus):
    bad = {r.case.name: r.differences for r in corpus if r.differences}
    assert not bad, bad


@pytest.mark.slow
def test_corpus_imports_without_errors(corpus):
    errors = {r.case.name: [f.message for f in r.findings if f.severity == "error"] for r in corpus}
    assert not {k: v for k, v in errors.items() if v}


@pytest.mark.slow
@pytest.mark.parametrize("major", [4, 3])
def test_declared_defaults_are_ms_swifts(major, swift_python, swift3_python):
    report = swift_oracle.probe(swift_oracle.venv_python(major), [], defaults=("rlhf", "rollout"))
    version = report["version"]
    wrong = []
    for d in (d for d in ARGS if "swift" in d.engines):
        if not d.accepted_in(version):
            continue
        theirs = report["defaults"]["rollout" if d.section == "server" else "rlhf"].get(d.flag_for(version))
        if theirs != d.swift_default(version):
            wrong.append((d.path, d.swift_default(version), theirs))
    assert version.startswith(str(major)) and not wrong, wrong


@pytest.mark.slow
@pytest.mark.parametrize("major", [4, 3])
def test_the_flags_that_stand_without_a_value_are_ms_swifts(major, swift_python, swift3_python):
    """The importer refuses a flag given no value unless ms-swift's parser lets it stand alone (issue 26: `--model`
    with nothing after it once became model: "true")."""
    report = swift_oracle.probe(swift_oracle.venv_python(major), [], standalone=("rlhf", "rollout"))
    version = report["version"]
    theirs = {k: set(v) for k, v in report["standalone"].items()}
    wrong = [(d.path, stands_alone(d)) for d in ARGS if "swift" in d.engines and d.accepted_in(version)
             and stands_alone(d) != (d.flag_for(version) in theirs["rollout" if d.section == "server" else "rlhf"])]
    assert version.startswith(str(major)) and len(theirs["rlhf"]) > 50 and not wrong, wrong


@pytest.mark.slow
def test_the_oracle_sees_a_difference(tmp_path, swift_python):
    """A rendering that drops a flag is caught: the comparison is not vacuous."""
    stubs = swift_oracle.make_stubs(tmp_path / "stubs")
    script = tmp_path / "a.sh"
    script.write_text("NPROC_PER_NODE=2 swift rlhf --rlhf_type grpo --model m --logging_steps 1 &\n")
    (run,) = swift_oracle.run_script(script, tmp_path, stubs)
    assert run.env == {"NPROC_PER_NODE": "2"} and run.argv[-2:] == ["--logging_steps", "1"]
    parsed = swift_oracle.probe(swift_python, [{"kind": "rlhf", "argv": run.argv, "cwd": str(tmp_path)},
                                               {"kind": "rlhf", "argv": run.argv[:-2], "cwd": str(tmp_path)}])
    a, b = parsed["results"]
    assert a["ns"]["logging_steps"] == 1 and b["ns"]["logging_steps"] == 5
