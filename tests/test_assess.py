"""The one assessment: a job is validated and estimated once per launch plan and per Configure rerun (an unchanged
spec not at all), and the make-it-fit search runs at most once, only for a job that is out of memory or tight; its
candidates are estimated once each, and validated once each, only those that fit, until enough pass. The
make-it-faster search runs once per assessment, checking each of its candidate changes once."""

import subprocess
import sys
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from grpo_ui.checks import assess as assess_module
from grpo_ui.checks import faster, fit, rules
from grpo_ui.checks.assess import assess
from grpo_ui.launch.plan import make_plan
from grpo_ui.spec.model import ARGS_BY_PATH
from grpo_ui.spec.paths import with_changes
from grpo_ui.spec.presets import presets

APP = str(Path(__file__).parent.parent / "app.py")
FITS = next(iter(presets().values()))


@pytest.fixture
def calls(monkeypatch):
    """Counts of rules.validate (the job's), the job's memory estimate, the make-it-fit search, its candidates'
    estimates (and how many of those fit), its candidates' validations, and the make-it-faster search's candidate
    checks."""
    counted = {"validate": 0, "estimate": 0, "search": 0, "candidate estimates": 0, "candidates that fit": 0,
               "candidate validations": 0, "faster candidates": 0}

    def counting(name, real):
        def wrapper(*args, **kwargs):
            counted[name] += 1
            return real(*args, **kwargs)
        return wrapper
    monkeypatch.setattr(rules, "validate", counting("validate", rules.validate))
    monkeypatch.setattr(assess_module, "estimate_spec", counting("estimate", assess_module.estimate_spec))
    monkeypatch.setattr(assess_module, "suggest", counting("search", assess_module.suggest))
    def estimating(*args, **kwargs):
        counted["candidate estimates"] += 1
        report = real_estimate(*args, **kwargs)
        counted["candidates that fit"] += report.verdict in ("fits", "tight")
        return report
    real_estimate = fit.estimate_spec
    monkeypatch.setattr(fit, "estimate_spec", estimating)
    monkeypatch.setattr(fit, "validate", counting("candidate validations", fit.validate))
    monkeypatch.setattr(faster, "validate", counting("faster candidates", faster.validate))
    return counted


def without_faster(counted: dict) -> dict:
    return {k: v for k, v in counted.items() if k != "faster candidates"}


def out_of_memory():
    """The 7B LoRA preset on 12 GiB cards."""
    return with_changes(FITS, {f"cluster.nodes[{i}].gpu_model": "NVIDIA GeForce RTX 3060"
                               for i in range(len(FITS.cluster.nodes))})


def test_a_plan_of_a_job_that_fits_validates_and_estimates_once(calls):
    plan = make_plan(FITS, "counted")
    assert without_faster(calls) == {"validate": 1, "estimate": 1, "search": 0, "candidate estimates": 0,
                                     "candidates that fit": 0, "candidate validations": 0}
    assert 0 < calls["faster candidates"] <= len(faster._candidates(plan.resolved))
    assert plan.assessment.verdict == "fits" and plan.estimate["verdict"] == "fits"


def test_a_job_out_of_memory_searches_make_it_fit_once(calls):
    a = assess(out_of_memory())
    assert a.verdict == "oom" and a.suggestions and any(f.id == "MEMORY-OOM" for f in a.findings)
    assert calls["validate"] == 1 and calls["estimate"] == 1 and calls["search"] == 1
    assert calls["candidate estimates"] > 1  # the search itself estimates each candidate change
    # each card offered was validated on the job it produces; only candidates that fit are, and not all of them
    assert len(a.suggestions) <= calls["candidate validations"] <= calls["candidates that fit"]
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
    once = {"validate": 1, "estimate": 1, "search": 0, "candidate estimates": 0, "candidates that fit": 0,
            "candidate validations": 0}
    assert without_faster(calls) == once
    searched = calls["faster candidates"]
    assert searched > 0
    at.run()  # nothing changed
    assert without_faster(calls) == once and calls["faster candidates"] == searched


@pytest.mark.parametrize("version, why", [("banana", "not an ms-swift version: 'banana'"),
                                          ("2.5", "ms-swift 2.5 is older than 3.2")])
def test_validate_for_a_version_that_is_not_one_says_so(tmp_path, version, why):
    job = tmp_path / "job.yaml"
    job.write_text("name: x\ntrain: {model: Qwen/Qwen2.5-7B-Instruct}\n")
    done = subprocess.run([sys.executable, "-m", "grpo_ui", "validate", str(job), "--swift", version],
                          capture_output=True, text=True, cwd=Path(APP).parent, timeout=120)
    said = done.stdout + done.stderr
    assert done.returncode == 2 and "swift_version" in said and why in said and "error id" not in said, said


def test_the_oom_fix_says_the_verdict_its_change_leads_to():
    """The 24 GB preset with LoRA rank 256 and vLLM at 0.9 is out of memory; its cheapest change (vLLM at 0.7) leads to
    TIGHT, which the fix said was 'the cheapest change that fits' (issue 32, first-hour defect 7). Now the words say
    TIGHT, name the cheapest change that does fit, and the one-click change leads where the words say."""
    oom = with_changes(FITS, {"train.lora_rank": 256, "rollout.vllm_gpu_memory_utilization": 0.9})
    (f,) = [f for f in assess(oom).findings if f.id == "MEMORY-OOM"]
    after = assess(with_changes(oom, f.apply)).verdict
    assert after == "tight" and "that fits: vLLM reserves 70%" not in f.fix
    assert f.fix.startswith("Cheapest change out of OOM: vLLM reserves 70% of the GPU (it leads to TIGHT")
    assert "the cheapest that fits: vLLM reserves 60% of the GPU" in f.fix
    fitting = next(s for s in assess(oom).suggestions if s.verdict == "fits")
    assert assess(with_changes(oom, fitting.changes)).verdict == "fits"
