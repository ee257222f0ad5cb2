"""The doctor on what users paste: the real excerpts of tests/data/doctor_corpus/ (public issues of ms-swift, TRL,
open-r1, verl, vLLM, DeepSpeed, OpenRLHF; sources in its manifest.yaml), judged strictly by bench/doctor_corpus.py:
the finding of the excerpt's kind must point at the line the manifest names (and the rank, where it names one).
The per-file table is printed (pytest -s, or on failure)."""

from pathlib import Path

import pytest

from bench.doctor_corpus import CORPUS, KIND_FINDINGS, ROUNDS, evaluate, load, report, rounds, score, table


@pytest.fixture(scope="module")
def results():
    found = evaluate()
    print("\n" + table(found))
    for key, part in rounds(found).items():
        print(report(part, ROUNDS[key]))
    return found


def test_the_manifest_names_real_lines_of_its_files():
    entries = load()
    assert {e["file"] for e in entries} == {p.name for p in Path(CORPUS).glob("*.log")}
    for e in entries:
        assert e["kind"] == "healthy" or e["kind"] in KIND_FINDINGS, e["file"]
        text = (CORPUS / e["file"]).read_text()
        assert e["kind"] == "healthy" or any(e["evidence"] in line for line in text.splitlines()), e["file"]


def fitted(results):
    """The corpus and every fresh round: each was scored unseen once (the corpus README keeps those figures), then
    looked at and fixed against — round 3 and round 5 together, after round 5's unseen score (issue 32)."""
    return [r for r in results if r.entry.get("fresh") in ROUNDS]


def test_every_excerpt_belongs_to_the_corpus_or_a_fresh_round():
    assert {e.get("fresh") for e in load()} <= set(ROUNDS)


def test_at_least_90_percent_of_the_failing_excerpts_fixed_against_are_diagnosed(results):
    hit, failing, _, _ = score(fitted(results))
    misses = [r.entry["file"] for r in fitted(results) if not r.ok and not r.healthy]
    assert failing >= 121 and hit >= 0.9 * failing, misses  # with rounds 3 (9) and 5 (20), issue 32


def test_no_error_or_warning_on_a_healthy_log(results):
    _, _, alarms, healthy = score(fitted(results))
    assert healthy >= 19 and alarms == 0, [(r.entry["file"], [a.id for a in r.alerts]) for r in fitted(results)
                                          if r.healthy and not r.ok]


def test_an_excerpt_never_says_running_and_a_failure_at_its_end_says_failed(results):
    """On the corpus and round 1. Round 2's states were not part of its fixes: its 075 holds ms-swift's 'Start
    connecting to vLLM server', a run's start, so the doctor reads it as a run's log whose trainer is still retrying
    (running), where the manifest says unknown."""
    assert all(r.state in ("unknown", "failed") for r in results if r.entry.get("fresh") in (None, "round 1"))
    by_file = {r.entry["file"]: r.state for r in results}
    assert by_file["001_training-oom_msswift.log"] == "failed"           # ends in an uncaught OOM
    assert by_file["030_max-model-len_trl.log"] == "unknown"             # vLLM warnings, no end
    assert by_file["041_healthy_trl.log"] == "unknown"                   # training lines, no run start
