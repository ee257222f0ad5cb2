"""A new user's first hour, end to end in a real browser (Debian's Chromium at 1440 × 900) against two
network-namespace sshd hosts and the tiny CPU ms-swift job: import a launch script written like ms-swift's
examples, pick a GPU model, add two hosts from ~/.ssh/config, fix the findings with the
offered fixes, launch, watch metrics and logs arrive, stop, open History. Every step asserts on what the user sees.
Screenshots go to build/screenshots/walkthrough-*.png (`make screenshots` copies them for the README)."""

import re

import pytest
from playwright.sync_api import expect

from tests.browser import body_text, choose, click, fill, nav, new_page, open_page, serve, shot
from tests.hosts import stop_active_jobs
from tests.tiny_job import ASSETS, CPU_ENV, SWIFT_VENV

pytestmark = pytest.mark.slow


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


def test_the_first_hour(app, hosts, page, tmp_path):
    open_page(page, app)
    expect(page.get_by_text("1. Model and GPUs").first).to_be_visible()
    shot(page, "walkthrough-1-start")
    # import the launch script
    script = page.get_by_test_id("stSidebarUserContent").get_by_label("…or paste it")
    fill(page, script, launch_script(max_steps=300), send="Control+Enter")  # a text area sends on Ctrl+Enter
    click(page, page.get_by_role("button", name="Import", exact=True))
    expect(page.get_by_text("activates the Python environment")).to_be_visible()
    assert "No GPU model chosen" in body_text(page)  # the step indicator says what is missing
    choose(page, "GPU model (every node)", "NVIDIA A100-SXM4-80GB · 80 GiB")
    assert "No GPU model chosen" not in body_text(page)
    # the finding and its fix: export and launch held until then
    expect(page.get_by_text("GRPO-BATCH-DIV").first).to_be_visible()
    expect(page.get_by_role("button", name="Download node scripts (zip)")).to_be_disabled()
    expect(page.get_by_role("button", name="Download job YAML")).to_be_disabled()
    shot(page, "walkthrough-2-findings")
    click(page, page.get_by_role("button", name="Apply fix").first)
    assert "GRPO-BATCH-DIV" not in body_text(page)
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
    assert "runs locally, no SSH" not in body_text(page)
    for test in range(2):
        click(page, page.get_by_role("button", name="Test").nth(test))
    # the status column, one per host
    expect(page.locator("[role=gridcell]").filter(has_text=re.compile("^✓ reached$"))).to_have_count(2)
    assert not [c for c in page.locator("[role=gridcell]").all_text_contents() if "✗" in c]
    shot(page, "walkthrough-4-cluster")
    # launch: two trainer nodes, every flag on its own line
    nav(page, "Launch")
    launch = page.get_by_role("button", name="Launch", exact=True)
    expect(launch).to_be_enabled()
    assert "2 trainer node(s)" in body_text(page)
    assert re.search(r"\n\s*--torch_dtype float32 \\", page.get_by_test_id("stCode").last.inner_text())
    shot(page, "walkthrough-5-launch")
    click(page, launch)
    click(page, page.get_by_role("link", name=re.compile("^Watch ")))
    # metrics and logs arrive
    expect(page.get_by_text("Training metrics")).to_be_visible()
    body = page.locator("body")
    expect(body).to_contain_text(re.compile(r"Step\s+\d+ / 300"), use_inner_text=True, timeout=240_000)
    expect(body).to_contain_text("Train:")  # node 0's log, live
    expect(page.locator(".js-plotly-plot").first).to_be_visible()
    shot(page, "walkthrough-6-monitor")
    click(page, page.get_by_role("button", name="Stop this job on every node"), part="live")
    expect(page.get_by_text("Stopped: ")).to_be_visible()
    expect(body).to_contain_text("stopped")
    # History: the run, and why there is nothing to compare yet
    nav(page, "History")
    expect(page.get_by_text("Compare two runs")).to_be_visible()
    assert "Only one run so far" in body_text(page) and "stopped" in body_text(page)
    shot(page, "walkthrough-7-history")
