"""The one assessment: a job is validated and estimated once per launch plan and per Configure rerun (an unchanged
spec not at all), and the make-it-fit search runs at most once, only for a job that is out of memory or tight."""

import subprocess
import sys
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from grpo_ui.checks import assess as assess_module
from grpo_ui.checks import fit, rules
from grpo_ui.checks.assess import assess
from grpo_ui.launch.plan import make_plan
from grpo_ui.spec.model import ARGS_BY_PATH
from grpo_ui.spec.paths import with_changes
from grpo_ui.spec.presets import presets

APP = str(Path(__file__).parent.parent / "app.py")
FITS = next(iter(presets().values()))


@pytest.fixture
def calls(monkeypatch):
    """Counts of rules.validate, the job's memory estimate, the make-it-fit search and its candidates' estimates."""
    counted = {"validate": 0, "estimate": 0, "search": 0, "candidate estimates": 0}

    def counting(name, real):
        def wrapper(*args, **kwargs):
            counted[name] += 1
            return real(*args, **kwargs)
        return wrapper
    monkeypatch.setattr(rules, "validate", counting("validate", rules.validate))
    monkeypatch.setattr(assess_module, "estimate_spec", counting("estimate", assess_module.estimate_spec))
    monkeypatch.setattr(assess_module, "suggest", counting("search", assess_module.suggest))
    monkeypatch.setattr(fit, "estimate_spec", counting("candidate estimates", fit.estimate_spec))
    return counted


def out_of_memory():
    """The 7B LoRA preset on 12 GiB cards."""
    return with_changes(FITS, {f"cluster.nodes[{i}].gpu_model": "NVIDIA GeForce RTX 3060"
                               for i in range(len(FITS.cluster.nodes))})


def test_a_plan_of_a_job_that_fits_validates_and_estimates_once(calls):
    plan = make_plan(FITS, "counted")
    assert calls == {"validate": 1, "estimate": 1, "search": 0, "candidate estimates": 0}
    assert plan.assessment.verdict == "fits" and plan.estimate["verdict"] == "fits"


def test_a_job_out_of_memory_searches_make_it_fit_once(calls):
    a = assess(out_of_memory())
    assert a.verdict == "oom" and a.suggestions and any(f.id == "MEMORY-OOM" for f in a.findings)
    assert calls["validate"] == 1 and calls["estimate"] == 1 and calls["search"] == 1
    assert calls["candidate estimates"] > 1  # the search itself estimates each candidate change
    plan = make_plan(out_of_memory(), "oom")
    assert plan.assessment.suggestions == a.suggestions and calls["search"] == 2 and calls["validate"] == 2


def test_a_configure_rerun_assesses_a_changed_spec_once_and_an_unchanged_one_not_at_all(calls, tmp_path,
                                                                                          monkeypatch):
    monkeypatch.setenv("GRPO_UI_HOME", str(tmp_path))
    at = AppTest.from_file(APP, default_timeout=60).run()
    assert not at.exception
    at.button_group(key="section").set_value(ARGS_BY_PATH["train.learning_rate"].group).run()
    calls.update(dict.fromkeys(calls, 0))
    at.text_input(key="f:train.learning_rate").set_value("3.3e-7").run()  # a spec no test assessed before
    assert [m.value for m in at.metric][0] == "FITS"
    assert calls == {"validate": 1, "estimate": 1, "search": 0, "candidate estimates": 0}
    at.run()  # nothing changed
    assert calls == {"validate": 1, "estimate": 1, "search": 0, "candidate estimates": 0}


@pytest.mark.parametrize("version, why", [("banana", "not an ms-swift version: 'banana'"),
                                          ("2.5", "ms-swift 2.5 is older than 3.2")])
def test_validate_for_a_version_that_is_not_one_says_so(tmp_path, version, why):
    job = tmp_path / "job.yaml"
    job.write_text("name: x\ntrain: {model: Qwen/Qwen2.5-7B-Instruct}\n")
    done = subprocess.run([sys.executable, "-m", "grpo_ui", "validate", str(job), "--swift", version],
                          capture_output=True, text=True, cwd=Path(APP).parent, timeout=120)
    said = done.stdout + done.stderr
    assert done.returncode == 2 and "swift_version" in said and why in said and "error id" not in said, said
