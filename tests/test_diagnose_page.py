"""The Diagnose page's logic through Streamlit's AppTest: a pasted excerpt (a real one from the corpus) and a job's
stored node logs give the doctor's report — the first error, findings with their evidence and fix — the same report
as the `doctor` command. In a real browser with uploads: tests/test_browser_diagnose.py."""

from pathlib import Path

from streamlit.testing.v1 import AppTest

from grpo_ui.doctor.diagnose import report
from grpo_ui.doctor.logfiles import from_texts

ROOT = Path(__file__).parent.parent
PAGE = str(ROOT / "views" / "diagnose.py")
WATCHDOG = next((ROOT / "tests/data/doctor_corpus").glob("014_*.log")).read_text()


def test_a_pasted_excerpt_gets_the_doctors_report(tmp_path, monkeypatch):
    monkeypatch.setenv("GRPO_UI_DB", str(tmp_path / "db.sqlite"))
    at = AppTest.from_file(PAGE, default_timeout=60).run()
    assert at.button(key="diagnose_run").disabled  # nothing to diagnose yet
    at.text_area(key="diagnose_paste").input(WATCHDOG).run()
    at.button(key="diagnose_run").click().run()
    assert not at.exception
    expected = report(from_texts({"pasted log": WATCHDOG}))
    assert [e.value for e in at.error] == [expected.headline]
    assert expected.headline.startswith("first error: pasted log, rank 7: NCCL collective timed out — ")
    assert any("**NCCL-TIMEOUT**" in m.value for m in at.markdown)
    assert any("OpType=ALLTOALL" in c.value.splitlines()[0] for c in at.code)
    assert any("Run state: **failed**" in c.value for c in at.caption)


def test_a_jobs_node_logs_from_the_store(tmp_path, store_with_job):
    store, _ = store_with_job("failed")
    store.set_job("job-a", error="node 0 (localhost, rank 0) failed first: exit code 1")
    store.add_node("job-a", 0, "localhost", "trainer", 0, "node_0.sh", str(tmp_path / "runs/job-a"))
    store.add_log_lines("job-a", 0, ["[INFO:swift] Start time of running main: 2026-11-24 10:00:00",
                                     "[rank0]: Traceback (most recent call last):",
                                     '[rank0]:   File "/opt/venv/lib/python3.11/site-packages/torch/optim/adamw.py", '
                                     'line 220, in step',
                                     "[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"])
    import streamlit as st
    st.cache_resource.clear()  # the page's store is cached per process: open this test's store
    at = AppTest.from_file(PAGE, default_timeout=60).run()
    at.radio(key="diagnose_source").set_value("A job's node logs").run()
    at.button(key="diagnose_run").click().run()
    assert not at.exception
    assert at.error[0].value.startswith("first error: node 0 (localhost), rank 0: Out of GPU memory — ")
    fixes = [m.value for m in at.markdown if m.value.startswith("**Fix:**")]
    assert any("relaunch from History" in f for f in fixes)  # a job grpo-ui launched: its advice says so
