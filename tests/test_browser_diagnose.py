"""The Diagnose page in a real browser (Debian's Chromium, Playwright), behind the password like every page of an
exposed app: paste an excerpt from a public issue, upload two nodes' logs, paste a healthy log; each time the page
shows what the `doctor` command says of the same text (the first error, the findings with evidence and fix).
Each action waits for the run it causes (tests/browser.py); what the page shows is checked with Playwright's
auto-waiting ``expect``."""

import pytest
from playwright.sync_api import expect

from grpo_ui.doctor.diagnose import report
from grpo_ui.doctor.logfiles import from_texts, snapshot
from tests.browser import PASSWORD, ROOT, act, body_text, click, fill, open_page, shot, sign_in

pytestmark = pytest.mark.slow
CORPUS = ROOT / "tests/data/doctor_corpus"
GPU_LOGS = ROOT / "tests/data/gpu_logs"


def diagnose(page):
    button = page.get_by_role("button", name="Diagnose")
    expect(button).to_be_enabled()
    click(page, button)


def test_diagnose_pasted_and_uploaded_logs_in_the_browser(exposed_app, page):
    open_page(page, exposed_app + "/diagnose")
    expect(page.get_by_role("button", name="Sign in")).to_be_visible()
    assert "Logs from" not in body_text(page)  # nothing of the page before the password
    sign_in(page, PASSWORD)
    expect(page.get_by_text("Logs from")).to_be_visible()

    excerpt = next(CORPUS.glob("024_*.log")).read_text()  # a reward function's TypeError under a traceback
    fill(page, page.get_by_label("Log text"), excerpt, send="Control+Enter")
    diagnose(page)
    headline = report(from_texts({"pasted log": excerpt})).headline
    expect(page.get_by_text(headline)).to_be_visible()
    assert headline.startswith("first error: pasted log, rank 2: A reward function raised an exception")
    expect(page.get_by_text("REWARD-FUNC-FAILED")).to_be_visible()
    expect(page.get_by_text("Run state: failed")).to_be_visible()
    shot(page, "diagnose")

    click(page, page.get_by_text("Upload files"))
    nodes = [GPU_LOGS / "multinode_node0.log", GPU_LOGS / "multinode_node1.log"]
    dropzone = page.get_by_test_id("stFileUploaderDropzoneInput")
    act(page, lambda: dropzone.set_input_files([str(p) for p in nodes]))
    expect(page.get_by_text("multinode_node1.log").first).to_be_visible()
    diagnose(page)
    headline = report(snapshot(nodes)).headline
    assert headline.startswith("first error: multinode_node1.log, rank 12: Out of GPU memory")
    expect(page.get_by_text(headline)).to_be_visible()
    expect(page.get_by_text("After it: multinode_node0.log, rank 3: NCCL collective timed out")).to_be_visible()

    click(page, page.get_by_text("Paste", exact=True))
    fill(page, page.get_by_label("Log text"), next(CORPUS.glob("041_*.log")).read_text(),  # healthy TRL steps
         send="Control+Enter")
    diagnose(page)
    expect(page.get_by_text("No findings: nothing in these logs")).to_be_visible()
    expect(page.get_by_text("Run state: unknown")).to_be_visible()
