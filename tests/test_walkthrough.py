"""A new user's first hour, end to end in a real browser (Debian's Chromium at 1440 × 900) against two
network-namespace sshd hosts and the tiny CPU ms-swift job: paste a script whose quote never closes (refused, no
draft), import one of ms-swift's example scripts as shipped and act on every finding it leads to (a rollout server
it starts by hand, a tracker's key), then import a launch script written like ms-swift's examples for the tiny
model, pick a GPU model, add two hosts from ~/.ssh/config, fix the findings with the offered fixes, launch, watch
metrics and logs arrive, stop, open History. Every step asserts on what the user sees. Screenshots go to
build/screenshots/walkthrough-*.png (`make screenshots` copies them for the README)."""

import re
from pathlib import Path

import pytest
from playwright.sync_api import expect

from tests.hosts import stop_active_jobs
from tests.test_browser import ARGS, CHROMIUM, SHOTS, serve
from tests.test_no_surprises import UNCLOSED
from tests.tiny_job import ASSETS, CPU_ENV, SWIFT_VENV

pytestmark = pytest.mark.slow
EXAMPLE = Path(__file__).parent / "data" / "ms_swift_examples" / "external_server_7b.sh"
expect.set_options(timeout=90_000)  # a loaded 2-core machine can take this long to rerun a page


def launch_script(max_steps: int) -> str:
    """One node's launch script in the style of ms-swift's examples/train/grpo scripts, for the tiny model; its
    batch size (3) is not a multiple of num_generations (2): the first finding the user fixes."""
    env = " ".join(f"{k}={v}" for k, v in CPU_ENV.items() if k != "TOKENIZERS_PARALLELISM")  # a secret-like name
    env += " GLOO_SOCKET_IFNAME=eth0"
    flags = {"rlhf_type": "grpo", "model": ASSETS / "model", "model_type": "qwen2", "template": "qwen",
             "dataset": ASSETS / "data.jsonl", "reward_funcs": "format", "tuner_type": "lora", "lora_rank": 4,
             "torch_dtype": "float32", "num_generations": 2, "per_device_train_batch_size": 3,
             "max_steps": max_steps, "max_completion_length": 16, "logging_steps": 1, "save_steps": 1000,
             "dataloader_num_workers": 0, "report_to": "none", "ddp_backend": "gloo"}
    lines = "".join(f" \\\n    --{k} {v}" for k, v in flags.items())
    return (f"#!/bin/bash\n# GRPO with LoRA on one node\nsource {SWIFT_VENV}/bin/activate\nexport {env}\n"
            f"CUDA_VISIBLE_DEVICES=0 \\\nNPROC_PER_NODE=1 \\\nswift rlhf{lines}\n")


@pytest.fixture
def hosts(ssh_env):
    """Two new hosts in ~/.ssh/config (the session's earlier tests may have added others)."""
    added = ssh_env.add(2)
    for h in added:
        ssh_env.name_iface(h, "eth0")  # as on a real cluster: the script's GLOO_SOCKET_IFNAME=eth0 fits both
    return added


@pytest.fixture
def app(ssh_env, hosts, tmp_path):
    yield from serve(tmp_path, "127.0.0.1", GRPO_UI_SSH_CONFIG=str(ssh_env.ssh_config),
                     GRPO_UI_KNOWN_HOSTS=str(ssh_env.known_hosts))
    stop_active_jobs(tmp_path / "db.sqlite")


@pytest.fixture
def page():
    from playwright.sync_api import sync_playwright
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        pg = browser.new_page(viewport={"width": 1440, "height": 900})
        pg.set_default_timeout(90000)
        yield pg
        browser.close()


def shot(page, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"walkthrough-{name}.png"))


def nav(page, name: str) -> None:
    page.get_by_test_id("stSidebarUserContent").get_by_role("link", name=name).click()


def settled(page) -> None:
    """The app finished its rerun (its status widget gone)."""
    page.wait_for_timeout(600)
    page.wait_for_function("!document.querySelector('[data-testid=stStatusWidget]')")


def choose(page, label: str, text: str) -> None:
    """Type into a selectbox and pick the first option that matches."""
    page.get_by_role("combobox", name=label).click()
    page.keyboard.type(text)
    page.get_by_role("option").filter(has_text=text).first.click()
    settled(page)


def body(page) -> str:
    return page.locator("body").inner_text()


def paste_import(page, text: str) -> None:
    script = page.get_by_test_id("stSidebarUserContent").get_by_label("…or paste it")
    script.fill(text)
    script.press("Control+Enter")  # a text area's value is sent on Ctrl+Enter (or on leaving it)
    importing = page.get_by_role("button", name="Import", exact=True)
    expect(importing).to_be_enabled()
    importing.click()


def finding(page, finding_id: str):
    return page.get_by_test_id("stExpander").filter(has_text=finding_id)


def refused_then_example(page) -> None:
    """A script bash would refuse makes no draft; ms-swift's external-server example imported as shipped ends with
    every finding acted on from the page."""
    paste_import(page, UNCLOSED)
    sidebar, main = page.get_by_test_id("stSidebarUserContent"), page.get_by_test_id("stMain")
    expect(sidebar.get_by_text(re.compile("line 5, --system: the ' that opens its value never closes"))).to_be_visible()
    expect(main.get_by_text("Import refused: no draft was made.")).to_be_visible()
    shot(page, "1b-import-refused")
    main.get_by_role("button", name="Dismiss").click()
    expect(main.get_by_text("Import refused: no draft was made.")).to_have_count(0)
    paste_import(page, EXAMPLE.read_text())
    for shown in ("ROLLOUT-SERVER-OUTSIDE", "CREDENTIAL-UNDECLARED"):
        expect(finding(page, shown)).to_be_visible()
    finding(page, "CREDENTIAL-UNDECLARED").locator("summary").click()  # open the warning to show its fix
    expect(finding(page, "CREDENTIAL-UNDECLARED").get_by_role("button", name="Apply fix")).to_be_visible()
    page.get_by_text("GPU memory per device").scroll_into_view_if_needed()
    shot(page, "1c-runtime-checks")
    for acted in ("ROLLOUT-SERVER-OUTSIDE", "CREDENTIAL-UNDECLARED"):
        fix = finding(page, acted).get_by_role("button", name="Apply fix")
        if not fix.is_visible():  # a warning's details start folded
            finding(page, acted).locator("summary").click()
        fix.click()
        expect(finding(page, acted)).to_have_count(0)
    expect(page.get_by_role("button", name="Download node scripts (zip)")).to_be_enabled()  # no error is left
    findings = page.get_by_test_id("stExpander").filter(has_text=re.compile(r"\b[A-Z]{2,}(-[A-Z0-9]+)+ — "))
    assert findings.count()  # SEED-REF-MODEL: the advice on the example's beta with full tuning
    for left in findings.all():  # and what is left can be acted on in one click
        assert left.get_by_role("button", name="Apply fix", include_hidden=True).count(), left.inner_text()


def test_the_first_hour(app, hosts, page, tmp_path):
    page.goto(app)
    page.get_by_text("1. Model and GPUs").first.wait_for()
    shot(page, "1-start")
    refused_then_example(page)
    # import the launch script
    paste_import(page, launch_script(max_steps=300))
    page.get_by_text("activates the Python environment").wait_for()
    settled(page)
    assert "No GPU model chosen" in body(page)  # the step indicator says what is missing
    choose(page, "GPU model (every node)", "NVIDIA A100-SXM4-80GB")
    page.wait_for_function("!document.body.innerText.includes('No GPU model chosen')")
    # the finding and its fix: export and launch held until then
    page.get_by_text("GRPO-BATCH-DIV").first.wait_for()
    assert page.get_by_role("button", name="Download node scripts (zip)").is_disabled()
    assert page.get_by_role("button", name="Download job YAML").is_disabled()
    shot(page, "2-findings")
    page.get_by_role("button", name="Apply fix").first.click()
    page.wait_for_function("!document.body.innerText.includes('GRPO-BATCH-DIV')")
    settled(page)
    assert page.get_by_role("button", name="Download node scripts (zip)").is_enabled()
    runs = page.get_by_label("run_root", exact=True)
    runs.fill(str(tmp_path / "runs"))
    runs.press("Enter")
    settled(page)
    shot(page, "3-configure")
    # two hosts from ~/.ssh/config; localhost out
    nav(page, "Cluster")
    page.get_by_text("Add a host from ~/.ssh/config").wait_for()
    for alias in (h.name for h in hosts):
        choose(page, "Add a host from ~/.ssh/config", alias)
        page.get_by_role("button", name="Add", exact=True).click()
        page.get_by_text(f"{alias} (trainer)").wait_for()
        settled(page)
    page.get_by_role("button", name="Remove").first.click()  # localhost, the imported script's node
    page.wait_for_function("!document.body.innerText.includes('runs locally, no SSH')")
    settled(page)
    for test in range(2):
        page.get_by_role("button", name="Test").nth(test).click()
        settled(page)
    page.wait_for_function("[...document.querySelectorAll('[role=gridcell]')].filter("
                           "c => c.textContent === '✓ reached').length === 2")  # the status column, one per host
    assert not [c for c in page.locator("[role=gridcell]").all_text_contents() if "✗" in c]
    shot(page, "4-cluster")
    # launch: two trainer nodes, every flag on its own line
    nav(page, "Launch")
    page.get_by_role("button", name="Launch", exact=True).wait_for()
    assert "2 trainer node(s)" in body(page) and page.get_by_role("button", name="Launch", exact=True).is_enabled()
    assert re.search(r"\n\s*--torch_dtype float32 \\", page.get_by_test_id("stCode").last.inner_text())
    shot(page, "5-launch")
    page.get_by_role("button", name="Launch", exact=True).click()
    page.get_by_role("link", name=re.compile("^Watch ")).click()
    # metrics and logs arrive
    page.get_by_text("Training metrics").wait_for()
    page.wait_for_function("/Step\\s+\\d+ \\/ 300/.test(document.body.innerText)", timeout=240000)
    page.wait_for_function("document.body.innerText.includes('Train:')", timeout=60000)  # node 0's log, live
    assert page.locator(".js-plotly-plot").count() >= 1
    shot(page, "6-monitor")
    page.get_by_role("button", name="Stop this job on every node").click()
    page.get_by_text("Stopped: ").wait_for(timeout=120000)
    page.wait_for_function("document.body.innerText.includes('stopped')", timeout=60000)
    # History: the run, and why there is nothing to compare yet
    nav(page, "History")
    page.get_by_text("Compare two runs").wait_for()
    page.get_by_text("Only one run so far").wait_for()  # drawn after the heading: wait for it too
    assert "stopped" in body(page)
    shot(page, "7-history")
