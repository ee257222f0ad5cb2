"""The Diagnose page in a real browser (Debian's Chromium, Playwright), behind the password like every page of an
exposed app: paste an excerpt from a public issue, upload two nodes' logs, paste a healthy log; each time the page
shows what the `doctor` command says of the same text (the first error, the findings with evidence and fix).
Waits only for the page's own content (Playwright's auto-waiting ``expect``), never for time."""

from pathlib import Path

import pytest
from playwright.sync_api import expect

from grpo_ui.doctor.diagnose import report
from grpo_ui.doctor.logfiles import from_texts, snapshot
from tests.test_browser import CHROMIUM, PASSWORD, serve, shot, sign_in
from tests.test_browser import page as page  # noqa: F401 - the Chromium page fixture

pytestmark = pytest.mark.slow
ROOT = Path(__file__).parent.parent
CORPUS = ROOT / "tests/data/doctor_corpus"
GPU_LOGS = ROOT / "tests/data/gpu_logs"
WAIT = 90000  # ms: a loaded machine can take this long to start a page; expect returns as soon as it is there


@pytest.fixture
def exposed_app(tmp_path):
    if not Path(CHROMIUM).exists():
        pytest.fail("Debian chromium missing: `make test` installs it")
    yield from serve(tmp_path, "0.0.0.0", GRPO_UI_PASSWORD=PASSWORD)


def diagnose(page):
    button = page.get_by_role("button", name="Diagnose")
    expect(button).to_be_enabled(timeout=WAIT)
    button.click()


def test_diagnose_pasted_and_uploaded_logs_in_the_browser(exposed_app, page):
    page.goto(exposed_app + "/diagnose")
    expect(page.get_by_role("button", name="Sign in")).to_be_visible(timeout=WAIT)
    assert "Logs from" not in page.locator("body").inner_text()  # nothing of the page before the password
    sign_in(page, PASSWORD)
    expect(page.get_by_text("Logs from")).to_be_visible(timeout=WAIT)

    excerpt = next(CORPUS.glob("024_*.log")).read_text()  # a reward function's TypeError under a traceback
    box = page.get_by_label("Log text")
    box.fill(excerpt)
    box.press("Control+Enter")
    diagnose(page)
    headline = report(from_texts({"pasted log": excerpt})).headline
    expect(page.get_by_text(headline)).to_be_visible(timeout=WAIT)
    assert headline.startswith("first error: pasted log, rank 2: A reward function raised an exception")
    expect(page.get_by_text("REWARD-FUNC-FAILED")).to_be_visible()
    expect(page.get_by_text("Run state: failed")).to_be_visible()
    shot(page, "diagnose")

    page.get_by_text("Upload files").click()
    nodes = [GPU_LOGS / "multinode_node0.log", GPU_LOGS / "multinode_node1.log"]
    page.get_by_test_id("stFileUploaderDropzoneInput").set_input_files([str(p) for p in nodes])
    expect(page.get_by_text("multinode_node1.log").first).to_be_visible(timeout=WAIT)
    diagnose(page)
    headline = report(snapshot(nodes)).headline
    assert headline.startswith("first error: multinode_node1.log, rank 12: Out of GPU memory")
    expect(page.get_by_text(headline)).to_be_visible(timeout=WAIT)
    expect(page.get_by_text("After it: multinode_node0.log, rank 3: NCCL collective timed out")).to_be_visible()

    page.get_by_text("Paste", exact=True).click()
    box = page.get_by_label("Log text")
    box.fill(next(CORPUS.glob("041_*.log")).read_text())  # healthy TRL steps
    box.press("Control+Enter")
    diagnose(page)
    expect(page.get_by_text("No findings: nothing in these logs")).to_be_visible(timeout=WAIT)
    expect(page.get_by_text("Run state: unknown")).to_be_visible()
