"""A new user's first hour, end to end in a real browser (Debian's Chromium at 1440 × 900) against two
network-namespace sshd hosts and the tiny CPU ms-swift job: paste a script whose quote never closes (refused, no
draft), then one of ms-swift's example scripts as shipped (a draft, nothing of the refusal left) and act on every
finding it leads to (a rollout server it starts by hand, a tracker's key), then import a launch script written like
ms-swift's examples for the tiny model, pick a GPU model, add two hosts from ~/.ssh/config, test them and run
preflight, see the example's draft keep its own cluster (never checked, none of the other's results), fix the
findings with the offered fixes, launch, watch metrics and logs arrive, stop, open History. Every step asserts on
what the user sees. Screenshots go to build/screenshots/walkthrough-*.png (`make screenshots` copies them for the
README)."""

import re
from pathlib import Path

import pytest
from playwright.sync_api import expect

from tests.browser import choose, click, fill, nav, new_page, open_page, serve, shot
from tests.hosts import stop_active_jobs
from tests.test_import_scripts import UNCLOSED
from tests.tiny_job import ASSETS, CPU_ENV, SWIFT_VENV

pytestmark = pytest.mark.slow
EXAMPLE = Path(__file__).parent / "data" / "ms_swift_examples" / "external_server_7b.sh"


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
def page(browser):
    return new_page(browser, 1440, 900)


def paste_import(page, text: str) -> None:
    script = page.get_by_test_id("stSidebarUserContent").get_by_label("…or paste it")
    fill(page, script, text, send="Control+Enter")  # a text area's value is sent on Ctrl+Enter (or on leaving it)
    importing = page.get_by_role("button", name="Import", exact=True)
    expect(importing).to_be_enabled()
    click(page, importing)


def finding(page, finding_id: str):
    return page.get_by_test_id("stExpander").filter(has_text=finding_id)


def refused_then_example(page) -> None:
    """A script bash would refuse makes no draft; ms-swift's external-server example pasted next, as shipped, makes
    one, and nothing of the refusal is left beside its note; it ends with every finding acted on from the page."""
    paste_import(page, UNCLOSED)
    sidebar, main = page.get_by_test_id("stSidebarUserContent"), page.get_by_test_id("stMain")
    refusal = sidebar.get_by_text(re.compile("line 5, --system: the ' that opens its value never closes"))
    expect(refusal).to_be_visible()
    expect(main.get_by_text("Import refused: no draft was made.")).to_be_visible()
    shot(page, "walkthrough-1b-import-refused")
    paste_import(page, EXAMPLE.read_text())
    expect(sidebar.get_by_text("--train_type is called --tuner_type", exact=False)).to_be_visible()
    expect(refusal).to_have_count(0)
    expect(main.get_by_text("Import refused: no draft was made.")).to_have_count(0)
    for shown in ("ROLLOUT-SERVER-OUTSIDE", "CREDENTIAL-UNDECLARED"):
        expect(finding(page, shown)).to_be_visible()
    finding(page, "CREDENTIAL-UNDECLARED").locator("summary").click()  # open the warning to show its fix (no rerun)
    expect(finding(page, "CREDENTIAL-UNDECLARED").get_by_role("button", name="Apply fix")).to_be_visible()
    page.get_by_text("GPU memory per device").scroll_into_view_if_needed()
    shot(page, "walkthrough-1c-runtime-checks")
    for acted in ("ROLLOUT-SERVER-OUTSIDE", "CREDENTIAL-UNDECLARED"):
        fix = finding(page, acted).get_by_role("button", name="Apply fix")
        if not fix.is_visible():  # a warning's details start folded
            finding(page, acted).locator("summary").click()
        click(page, fix)
        expect(finding(page, acted)).to_have_count(0)
    expect(page.get_by_role("button", name="Download node scripts (zip)")).to_be_enabled()  # no error is left
    findings = page.get_by_test_id("stExpander").filter(has_text=re.compile(r"\b[A-Z]{2,}(-[A-Z0-9]+)+ — "))
    expect(findings).not_to_have_count(0)  # SEED-REF-MODEL: the advice on the example's beta with full tuning
    for left in findings.all():  # and what is left can be acted on in one click
        expect(left.get_by_role("button", name="Apply fix", include_hidden=True)).not_to_have_count(0)


def other_draft_has_its_own_cluster(page) -> None:
    """The example's draft (its one local node, never checked) says so after the tiny job's two hosts were checked,
    with nothing of their preflight on its Cluster page; back on the tiny job's draft, its preflight is still
    there."""
    nav(page, "Configure")
    choose(page, "Draft", "Qwen2.5-7B-Instruct (#2)")
    expect(page.get_by_text("hosts not checked yet (Cluster page)")).to_be_visible()
    expect(page.get_by_text("checked before the cluster changed", exact=False)).to_have_count(0)
    nav(page, "Cluster")
    expect(page.get_by_text("localhost (trainer)")).to_be_visible()
    expect(page.get_by_text("Stale:", exact=False)).to_have_count(0)
    expect(page.locator("[role=gridcell]").filter(has_text="preflight")).to_have_count(0)
    nav(page, "Configure")
    choose(page, "Draft", "model (#3)")
    nav(page, "Cluster")
    expect(page.locator("[role=gridcell]").filter(has_text=re.compile("^(✓|⚠) preflight"))).to_have_count(2)


def test_the_first_hour(app, hosts, page, tmp_path):
    open_page(page, app)
    expect(page.get_by_text("1. Model and GPUs").first).to_be_visible()
    shot(page, "walkthrough-1-start")
    refused_then_example(page)
    # import the launch script
    paste_import(page, launch_script(max_steps=300))
    expect(page.get_by_text("activates the Python environment")).to_be_visible()
    body = page.locator("body")
    expect(body).to_contain_text("No GPU model chosen", use_inner_text=True)  # the step indicator says what is missing
    choose(page, "GPU model (every node)", "NVIDIA A100-SXM4-80GB · 80 GiB")
    expect(body).not_to_contain_text("No GPU model chosen", use_inner_text=True)
    # the finding and its fix: export and launch held until then
    expect(page.get_by_text("GRPO-BATCH-DIV").first).to_be_visible()
    expect(page.get_by_role("button", name="Download node scripts (zip)")).to_be_disabled()
    expect(page.get_by_role("button", name="Download job YAML")).to_be_disabled()
    shot(page, "walkthrough-2-findings")
    click(page, page.get_by_role("button", name="Apply fix").first)
    expect(body).not_to_contain_text("GRPO-BATCH-DIV", use_inner_text=True)
    expect(page.get_by_role("button", name="Download node scripts (zip)")).to_be_enabled()
    fill(page, page.get_by_label("run_root", exact=True), str(tmp_path / "runs"))
    shot(page, "walkthrough-3-configure")
    # two hosts from ~/.ssh/config; localhost out
    nav(page, "Cluster")
    expect(page.get_by_text("Add a host from ~/.ssh/config")).to_be_visible()
    for alias in (h.name for h in hosts):
        choose(page, "Add a host from ~/.ssh/config", alias)
        click(page, page.get_by_role("button", name="Add", exact=True))
        expect(page.get_by_text(f"{alias} (trainer)")).to_be_visible()
    click(page, page.get_by_role("button", name="Remove").first)  # localhost, the imported script's node
    expect(body).not_to_contain_text("runs locally, no SSH", use_inner_text=True)
    for test in range(2):
        click(page, page.get_by_role("button", name="Test").nth(test))
    cells = page.locator("[role=gridcell]")  # the status column, one per host
    expect(cells.filter(has_text=re.compile("^✓ reached$"))).to_have_count(2)
    expect(cells.filter(has_text="✗")).to_have_count(0)
    click(page, page.get_by_role("button", name="Run preflight on every host"))
    expect(cells.filter(has_text=re.compile("^(✓|⚠) preflight"))).to_have_count(2)
    shot(page, "walkthrough-4-cluster")
    other_draft_has_its_own_cluster(page)
    # launch: two trainer nodes, every flag on its own line
    nav(page, "Launch")
    launch = page.get_by_role("button", name="Launch", exact=True)
    expect(launch).to_be_visible()
    expect(body).to_contain_text("2 trainer node(s)", use_inner_text=True)
    expect(launch).to_be_enabled()
    expect(page.get_by_test_id("stCode").last).to_contain_text(re.compile(r"\n\s*--torch_dtype float32 \\"),
                                                              use_inner_text=True)
    shot(page, "walkthrough-5-launch")
    click(page, launch)
    click(page, page.get_by_role("link", name=re.compile("^Watch ")))
    # metrics and logs arrive
    expect(page.get_by_text("Training metrics")).to_be_visible()
    expect(body).to_contain_text(re.compile(r"Step\s+\d+ / 300"), use_inner_text=True, timeout=240_000)
    expect(body).to_contain_text("Train:", use_inner_text=True)  # node 0's log, live
    expect(page.locator(".js-plotly-plot").first).to_be_attached()
    shot(page, "walkthrough-6-monitor")
    click(page, page.get_by_role("button", name="Stop this job on every node"), part="live")
    expect(page.get_by_text("Stopped: ")).to_be_visible()
    expect(body).to_contain_text("stopped", use_inner_text=True)
    # History: the run, and why there is nothing to compare yet
    nav(page, "History")
    expect(page.get_by_text("Compare two runs")).to_be_visible()
    expect(page.get_by_text("Only one run so far")).to_be_visible()  # drawn after the heading: wait for it too
    expect(body).to_contain_text("stopped", use_inner_text=True)
    shot(page, "walkthrough-7-history")
