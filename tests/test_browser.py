"""The app in a real browser: Debian's Chromium driven by Playwright against `streamlit run app.py`.

Configure: fill the form, watch the estimate change, trigger and clear a validation error, download the YAML and
scripts. Then launch the tiny real ms-swift job onto a namespace test host over SSH and watch its log lines,
metric charts and memory (the estimate at launch next to measured peaks) arrive. Screenshots of every page go to
build/screenshots/ (`make screenshots` copies them to docs/screenshots/ for the README).
"""

import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from grpo_ui.spec.yaml_io import spec_to_yaml, validate_spec
from tests.hosts import stop_active_jobs
from tests.tiny_job import ASSETS, tiny_spec_data

pytestmark = pytest.mark.slow
ROOT = Path(__file__).parent.parent
SHOTS = ROOT / "build" / "screenshots"  # `make screenshots` copies them to docs/screenshots for the README
CHROMIUM = "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", "--no-first-run", "--disable-quic"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def app_url(ssh_env, tmp_path):
    if not Path(CHROMIUM).exists():
        pytest.fail("Debian chromium missing: `make test` installs it")
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


def serve(tmp_path, address: str, **env):
    """`streamlit run app.py` bound to ``address``, its database in tmp_path; yields its URL, stops it after."""
    port = free_port()
    env = {**os.environ, "GRPO_UI_HOME": str(tmp_path / "home"), "GRPO_UI_DB": str(tmp_path / "db.sqlite"), **env}
    proc = subprocess.Popen([sys.executable, "-m", "streamlit", "run", "app.py", "--server.headless", "true",
                             "--server.address", address, "--server.port", str(port),
                             "--browser.gatherUsageStats", "false"], cwd=ROOT, env=env,
                            stdout=open(tmp_path / "streamlit.log", "w"), stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    for _ in range(100):
        try:
            urllib.request.urlopen(url + "/_stcore/health", timeout=1)
            break
        except OSError:
            time.sleep(0.2)
    yield url
    proc.terminate()
    proc.wait(10)


@pytest.fixture
def page():
    from playwright.sync_api import sync_playwright
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        pg = browser.new_page(viewport={"width": 1500, "height": 1000}, accept_downloads=True)
        pg.set_default_timeout(90000)  # a loaded CI machine can take this long to start a fresh page
        yield pg
        browser.close()


def shot(page, name):
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"{name}.png"))


def nav(page, name):
    """Click a page link in the sidebar."""
    page.get_by_test_id("stSidebarUserContent").get_by_role("link", name=name).click()


def set_field(page, label, value, tab="Batch & generation"):
    page.get_by_role("radio", name=tab, exact=True).click()  # the form's section picker
    box = page.get_by_label(label, exact=True)
    box.fill(value)
    box.press("Enter")
    page.wait_for_timeout(1500)


def test_configure_in_the_browser(app_url, page, tmp_path):
    if not (ASSETS / "model" / "config.json").exists():
        pytest.fail("tiny model missing: run `make assets`")
    page.goto(app_url)
    page.get_by_text("GPU memory per device").wait_for(timeout=90000)

    def metrics():
        return page.locator('[data-testid="stMetric"]').all_inner_texts()

    def metrics_change_from(before):
        """The metrics once the rerun has replaced ``before`` (a loaded machine may take longer than set_field)."""
        for _ in range(60):
            if (now := metrics()) != before:
                return now
            page.wait_for_timeout(500)
        raise AssertionError(f"the estimate did not change from {before}")
    tiny = metrics()
    set_field(page, "model", "Qwen/Qwen2.5-7B-Instruct", tab="Model & tuner")
    seven_b = metrics_change_from(tiny)
    set_field(page, "max_completion_length", "4096")
    metrics_change_from(seven_b)
    set_field(page, "num_generations", "3")
    page.get_by_text("GRPO-BATCH-DIV").first.wait_for()
    assert page.get_by_role("button", name="Download node scripts (zip)").is_disabled()
    shot(page, "configure-error")
    set_field(page, "num_generations", "2")
    page.wait_for_function("!document.body.innerText.includes('GRPO-BATCH-DIV')")
    with page.expect_download() as dl:
        page.get_by_role("button", name="Download job YAML").click()
    assert "num_generations: 2" in Path(dl.value.path()).read_text()
    with page.expect_download() as dl:
        page.get_by_role("button", name="Download node scripts (zip)").click()
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
    host = spec_from_yaml(job["spec_yaml"]).trainer_nodes()[0].host
    line = (ROOT / "tests/data/nvidia-smi/busy.csv").read_text().splitlines()[0]
    store.add_gpu_samples(job["id"], [parse_smi_line(line, host, time.time())])
    store.add_metrics(job["id"], 1, {"memory(GiB)": 65.09})
    return f"{61234 / 1024:.1f}"


def test_launch_and_watch_a_real_job_in_the_browser(app_url, page, tmp_path):
    page.goto(app_url)
    page.get_by_text("GPU memory per device").wait_for(timeout=90000)
    nav(page, "Launch")  # through the sidebar, as a user would
    page.get_by_role("button", name="Launch", exact=True).wait_for(timeout=90000)
    shot(page, "launch")
    page.get_by_role("button", name="Launch", exact=True).click()
    page.get_by_text("is running").wait_for(timeout=60000)
    page.get_by_role("link", name=re.compile("^Watch ")).click()  # the link the Launch page offers
    page.get_by_text("Training metrics").wait_for(timeout=90000)
    measured = feed_gpu_side(tmp_path / "db.sqlite")
    page.get_by_text("the estimate at launch vs the measured peak").wait_for(timeout=60000)
    page.wait_for_function(f"document.body.innerText.includes('{measured}') && "
                           "document.body.innerText.includes('65.1')", timeout=60000)
    page.wait_for_function("document.body.innerText.includes('last_model_checkpoint')", timeout=180000)
    page.wait_for_function("document.body.innerText.includes('succeeded')", timeout=240000)
    page.get_by_text("NO-LEARNING-SIGNAL").first.wait_for(timeout=60000)
    # the job picker, drawn before the live part, follows the state change too
    page.wait_for_function("[...document.querySelectorAll('[data-testid=stSelectbox] *')].some("
                           "e => (e.value || e.textContent || '').includes('\u2014 succeeded'))", timeout=30000)
    assert page.locator(".js-plotly-plot").count() >= 1
    shot(page, "monitor")
    nav(page, "History")
    page.get_by_text("Compare two runs").wait_for(timeout=90000)
    page.get_by_text("Memory per GPU: estimate at launch vs measured peak").wait_for(timeout=30000)
    shot(page, "history")
    nav(page, "Cluster")
    page.get_by_text("Preflight").first.wait_for(timeout=90000)
    page.get_by_role("button", name="Run preflight on every host").click()
    page.get_by_text("Preflight done").wait_for(timeout=60000)
    shot(page, "cluster")


PASSWORD = "pässwörd-密码-🔑"  # non-ASCII on purpose: compared as UTF-8 bytes
PAGES = {"/": "Configure a GRPO job", "/configure": "Configure a GRPO job", "/cluster": "Connections",
         "/launch": "Job id (the run directory on every node)", "/monitor": "No jobs yet", "/history": "No jobs yet",
         "/diagnose": "Logs from"}


@pytest.fixture
def exposed_app(tmp_path):
    """The app as a team would expose it: bound to 0.0.0.0 with GRPO_UI_PASSWORD set; nothing opened it before."""
    yield from serve(tmp_path, "0.0.0.0", GRPO_UI_PASSWORD=PASSWORD)


def sign_in(page, password):
    page.get_by_label("Password", exact=True).fill(password)
    page.get_by_role("button", name="Sign in").click()


def test_every_page_url_shows_only_the_sign_in_form_until_the_password_is_given(exposed_app, page):
    """Each page's URL opened directly, first thing on a fresh server (Streamlit would serve a pages/ directory by
    itself then): only the sign-in form, none of the page; after the password, that page."""
    for path, content in PAGES.items():
        page.goto(exposed_app + path)
        page.get_by_role("button", name="Sign in").wait_for(timeout=90000)
        page.wait_for_timeout(1000)  # a page drawn after the form would show up here
        body = page.locator("body").inner_text()
        assert content not in body and "Sign in" in body, (path, body)
        assert not page.get_by_test_id("stSidebarUserContent").count(), path  # no page links either
    for path, content in PAGES.items():
        page.goto(exposed_app + path)
        sign_in(page, PASSWORD)
        page.get_by_text(content).first.wait_for(timeout=90000)
        page.get_by_role("button", name="Sign in").wait_for(state="detached", timeout=90000)  # the form is gone


def test_wrong_passwords_are_throttled(exposed_app, page):
    """Each answer names the attempts left, so every submission is seen answered before the next one."""
    page.goto(exposed_app + "/cluster")
    for left in range(4, -1, -1):
        sign_in(page, f"wrong {left}")
        page.get_by_text(f"{left} attempt(s) left" if left else "Wrong password; too many failed attempts").wait_for(
            timeout=90000)
    sign_in(page, PASSWORD)  # right, but inside the wait: not even checked
    page.get_by_text("Not checked: too many failed attempts").wait_for(timeout=90000)
    assert "Connections" not in page.locator("body").inner_text()
