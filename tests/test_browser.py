"""The app in a real browser: Debian's Chromium driven by Playwright against `streamlit run app.py`.

Configure: fill the form, watch the estimate change, trigger and clear a validation error, download the YAML and
scripts. Then launch the tiny real ms-swift job onto a namespace test host over SSH and watch its log lines,
metric charts and memory (the estimate at launch next to measured peaks) arrive. Screenshots of every page go to
build/screenshots/ (`make screenshots` copies them to docs/screenshots/ for the README).
"""

import re
import time
from pathlib import Path

import pytest
from playwright.sync_api import expect

from grpo_ui.spec.yaml_io import spec_to_yaml, validate_spec
from tests.browser import PASSWORD, ROOT, body_text, click, fill, nav, open_page, section, serve, shot, sign_in
from tests.hosts import stop_active_jobs
from tests.tiny_job import ASSETS, tiny_spec_data

pytestmark = pytest.mark.slow


@pytest.fixture
def app_url(ssh_env, tmp_path):
    (h,) = ssh_env.add(1)
    data = tiny_spec_data(max_steps=4)
    data["train"]["output_dir"] = str(tmp_path / "out")
    data["cluster"] = {"run_root": str(tmp_path / "runs"), "nodes": [
        {"host": h.name, "address": h.addr, "gpus": [0], "python_env": data["cluster"]["nodes"][0]["python_env"]}]}
    home = tmp_path / "home"
    home.mkdir()
    (home / "draft.yaml").write_text(spec_to_yaml(validate_spec(data)))
    yield from serve(tmp_path, "127.0.0.1", GRPO_UI_HOME=str(home), GRPO_UI_SSH_CONFIG=str(ssh_env.ssh_config),
                     GRPO_UI_KNOWN_HOSTS=str(ssh_env.known_hosts))
    stop_active_jobs(tmp_path / "db.sqlite")


def set_field(page, label, value, tab="Batch & generation"):
    section(page, tab)
    fill(page, page.get_by_label(label, exact=True), value)


def test_configure_in_the_browser(app_url, page, tmp_path):
    if not (ASSETS / "model" / "config.json").exists():
        pytest.fail("tiny model missing: run `make assets`")
    open_page(page, app_url)
    expect(page.get_by_text("GPU memory per device")).to_be_visible()

    def metrics():
        return page.locator('[data-testid="stMetric"]').all_inner_texts()
    tiny = metrics()
    set_field(page, "model", "Qwen/Qwen2.5-7B-Instruct", tab="Model & tuner")
    seven_b = metrics()  # the edit's run has finished: the estimate is the new model's
    assert seven_b != tiny
    set_field(page, "max_completion_length", "4096")
    assert metrics() != seven_b
    set_field(page, "num_generations", "3")
    expect(page.get_by_text("GRPO-BATCH-DIV").first).to_be_visible()
    expect(page.get_by_role("button", name="Download node scripts (zip)")).to_be_disabled()
    shot(page, "configure-error")
    set_field(page, "num_generations", "2")
    expect(page.locator("body")).not_to_contain_text("GRPO-BATCH-DIV", use_inner_text=True)
    with page.expect_download() as dl:
        click(page, page.get_by_role("button", name="Download job YAML"))
    assert "num_generations: 2" in Path(dl.value.path()).read_text()
    with page.expect_download() as dl:
        click(page, page.get_by_role("button", name="Download node scripts (zip)"))
    assert dl.value.suggested_filename.endswith(".zip")
    shot(page, "configure")


def feed_gpu_side(db: Path) -> str:
    """What a GPU node would add while the job runs, written to the app's store: one nvidia-smi tick in its
    documented format (tests/data/nvidia-smi/busy.csv) for the job's host and rank 0's memory(GiB) as ms-swift logs
    it (a CPU run logs none). A stand-in: no GPU here. Returns the GPU 0 figure the Monitor should show (GiB with
    one decimal, as the pages write them)."""
    from grpo_ui.backends.remote.gpu import parse_smi_line
    from grpo_ui.jobs.store import Store
    from grpo_ui.spec.yaml_io import spec_from_yaml

    store = Store(db)
    job = store.jobs()[0]
    host = spec_from_yaml(job.spec_yaml).trainer_nodes()[0].host
    line = (ROOT / "tests/data/nvidia-smi/busy.csv").read_text().splitlines()[0]
    store.add_gpu_samples(job.id, [parse_smi_line(line, host, time.time())])
    store.add_metrics(job.id, 1, {"memory(GiB)": 65.09})
    return f"{61234 / 1024:.1f}"


def test_launch_and_watch_a_real_job_in_the_browser(app_url, page, tmp_path):
    open_page(page, app_url)
    nav(page, "Launch")  # through the sidebar, as a user would
    launch = page.get_by_role("button", name="Launch", exact=True)
    expect(launch).to_be_enabled()
    shot(page, "launch")
    click(page, launch)
    expect(page.get_by_text("is running")).to_be_visible()
    click(page, page.get_by_role("link", name=re.compile("^Watch ")))  # the link the Launch page offers
    expect(page.get_by_text("Training metrics")).to_be_visible()
    measured = feed_gpu_side(tmp_path / "db.sqlite")
    expect(page.get_by_text("the estimate at launch vs the measured peak")).to_be_visible()
    body = page.locator("body")
    expect(body).to_contain_text(measured)
    expect(body).to_contain_text("65.1")
    expect(body).to_contain_text("last_model_checkpoint")
    expect(body).to_contain_text("succeeded", timeout=240_000)
    expect(page.get_by_text("NO-LEARNING-SIGNAL").first).to_be_visible()
    # the job picker, drawn before the live part, follows the state change too
    expect(page.get_by_role("combobox", name="Job", exact=True)).to_have_value(re.compile("\u2014 succeeded"))
    expect(page.locator(".js-plotly-plot").first).to_be_visible()
    shot(page, "monitor")
    nav(page, "History")
    expect(page.get_by_text("Compare two runs")).to_be_visible()
    expect(page.get_by_text("Memory per GPU: estimate at launch vs measured peak")).to_be_visible()
    shot(page, "history")
    nav(page, "Cluster")
    expect(page.get_by_text("Preflight").first).to_be_visible()
    click(page, page.get_by_role("button", name="Run preflight on every host"))
    expect(page.get_by_text("Preflight done")).to_be_visible()
    shot(page, "cluster")


PAGES = {"/": "Configure a GRPO job", "/configure": "Configure a GRPO job", "/cluster": "Connections",
         "/launch": "Job id (the run directory on every node)", "/monitor": "No jobs yet", "/history": "No jobs yet",
         "/diagnose": "Logs from"}


def test_every_page_url_shows_only_the_sign_in_form_until_the_password_is_given(exposed_app, page):
    """Each page's URL opened directly, first thing on a fresh server (Streamlit would serve a pages/ directory by
    itself then): once the run has finished, only the sign-in form, none of the page; after the password, that
    page."""
    for path, content in PAGES.items():
        open_page(page, exposed_app + path)
        text = body_text(page)
        assert content not in text and "Sign in" in text, (path, text)
        assert not page.get_by_test_id("stSidebarUserContent").count(), path  # no page links either
    for path, content in PAGES.items():
        open_page(page, exposed_app + path)
        sign_in(page, PASSWORD)
        expect(page.get_by_text(content).first).to_be_visible()
        expect(page.get_by_role("button", name="Sign in")).to_have_count(0)  # the form is gone


def test_wrong_passwords_are_throttled(exposed_app, page):
    """Each answer names the attempts left, so every submission is seen answered before the next one."""
    open_page(page, exposed_app + "/cluster")
    for left in range(4, -1, -1):
        sign_in(page, f"wrong {left}")
        expect(page.get_by_text(f"{left} attempt(s) left" if left else "Wrong password; too many failed attempts")
               ).to_be_visible()
    sign_in(page, PASSWORD)  # right, but inside the wait: not even checked
    expect(page.get_by_text("Not checked: too many failed attempts")).to_be_visible()
    assert "Connections" not in body_text(page)
