"""The app in Debian's Chromium, driven by Playwright, waiting for the app's state and never for time.

Each script run of the app ends by drawing a hidden marker with the session's run count (views/runs.py). `act` reads
the highest count on the page, does the click, the typing or the upload, then waits until the count went past it and
Streamlit's stApp says no script is running: the run the action caused has finished and its elements are drawn. A
page load (`open_page`) waits for the new page's first finished run. Elements are found with locators, which are
queried again on every use, never element handles (a rerun detaches them); what a test expects to see it checks with
Playwright's auto-waiting `expect`. Timeouts are generous because a loaded CI machine (2 cores, other jobs) is slow;
no wait takes longer than the page does.

The Monitor page's live fragments rerun every 3 s by themselves: their runs move their own counts, not the page's, and
an action inside one (``part=`` its name) may see one of those runs finish rather than its own, so what it changes is
checked with `expect`, which waits for it.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Locator, Page, expect

ROOT = Path(__file__).parent.parent
SHOTS = ROOT / "build" / "screenshots"  # `make screenshots` copies them to docs/screenshots for the README
FAILURES = ROOT / "build" / "failures"  # what each page of a failed browser test showed at its end
CHROMIUM = "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", "--no-first-run", "--disable-quic"]
TIMEOUT_MS = 180_000  # a rerun, an SSH connection or a Slurm submission on a loaded 2-core machine
expect.set_options(timeout=TIMEOUT_MS)

# The highest run count of a part of the page ("page", or a live fragment's name; 0 before any run of it finished),
# and "a run of the part recorded in window.__runsBefore, later than the count recorded there, has finished" (in a
# document that recorded none, a fresh page load: the page's first run).
_HIGHEST = """(part) => Math.max(0, ...[...document.querySelectorAll('.grpo-ui-run')]
    .filter(e => e.dataset.part === part).map(e => Number(e.dataset.run)))"""
_RECORD = f"(part) => {{ window.__runsBefore = {{part, count: ({_HIGHEST})(part)}}; }}"
_SETTLED = f"""() => {{
    const app = document.querySelector('[data-testid=stApp]');
    const before = window.__runsBefore ?? {{part: 'page', count: 0}};
    return app !== null && app.dataset.testScriptState === 'notRunning'
        && ({_HIGHEST})(before.part) > before.count;
}}"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve(tmp_path: Path, address: str, **env: str) -> Iterator[str]:
    """`streamlit run app.py` bound to ``address``, its database in tmp_path; yields its URL once the server says it
    listens (its output goes to tmp_path/streamlit.log), stops it after."""
    port = free_port()
    env = {**os.environ, "GRPO_UI_HOME": str(tmp_path / "home"), "GRPO_UI_DB": str(tmp_path / "db.sqlite"), **env}
    proc = subprocess.Popen([sys.executable, "-m", "streamlit", "run", "app.py", "--server.headless", "true",
                             "--server.address", address, "--server.port", str(port),
                             "--browser.gatherUsageStats", "false"], cwd=ROOT, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    listening = threading.Event()
    log = tmp_path / "streamlit.log"

    def copy_output() -> None:
        with open(log, "w") as out:
            for line in proc.stdout:
                out.write(line)
                out.flush()
                if "URL:" in line:
                    listening.set()
        listening.set()  # it exited: the check below says so

    copier = threading.Thread(target=copy_output, daemon=True)
    copier.start()
    if not listening.wait(TIMEOUT_MS / 1000) or proc.poll() is not None:
        proc.kill()
        pytest.fail(f"streamlit did not start listening on port {port}:\n{log.read_text()}")
    yield f"http://127.0.0.1:{port}"
    ended = proc.poll()
    proc.terminate()
    proc.wait(30)
    copier.join(30)
    if ended is not None:
        pytest.fail(f"streamlit exited ({ended}) before the test ended:\n{log.read_text()}")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """A browser test that failed: what its pages show now (the server still runs) goes to build/failures/."""
    report = yield
    if call.when == "call" and report.failed and "browser" in item.funcargs:
        keep_pages(item.funcargs["browser"], item.name, item.funcargs.get("tmp_path"))
    return report


@pytest.fixture
def browser() -> Iterator[Browser]:
    from playwright.sync_api import sync_playwright
    if not Path(CHROMIUM).exists():
        pytest.fail("Debian chromium missing: `make test` installs it")
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield b
        b.close()


def keep_pages(browser: Browser, test: str, tmp_path: Path | None) -> None:
    """Each page's screenshot and HTML, and the server's output, into build/failures/."""
    FAILURES.mkdir(parents=True, exist_ok=True)
    for n, page in enumerate(pg for context in browser.contexts for pg in context.pages):
        page.screenshot(path=str(FAILURES / f"{test}-{n}.png"), timeout=30_000)
        (FAILURES / f"{test}-{n}.html").write_text(f"<!-- {page.url} -->\n{page.content()}")
    if tmp_path and (tmp_path / "streamlit.log").exists():
        shutil.copy(tmp_path / "streamlit.log", FAILURES / f"{test}-streamlit.log")


def new_page(browser: Browser, width: int = 1500, height: int = 1000) -> Page:
    page = browser.new_page(viewport={"width": width, "height": height}, accept_downloads=True)
    page.set_default_timeout(TIMEOUT_MS)
    return page


@pytest.fixture
def page(browser) -> Page:
    return new_page(browser)


def settled(page: Page) -> None:
    """Wait until a run later than the one `act` recorded (or, after a page load, the first) has finished."""
    page.wait_for_function(_SETTLED, timeout=TIMEOUT_MS)


def open_page(page: Page, url: str) -> None:
    page.goto(url)
    settled(page)


def act(page: Page, action: Callable[[], object], part: str = "page") -> None:
    """Do ``action`` (a click, typing, an upload: something that reruns the app) and wait for its run to finish;
    ``part`` is the live fragment's name when the action is inside one (it reruns only that fragment)."""
    page.evaluate(_RECORD, part)
    action()
    settled(page)


def click(page: Page, target: Locator, part: str = "page") -> None:
    act(page, target.click, part)


def fill(page: Page, box: Locator, value: str, send: str = "Enter") -> None:
    """Type ``value`` into a text field and send it (Enter; a text area sends on Control+Enter)."""
    box.fill(value)
    act(page, lambda: box.press(send))


def choose(page: Page, label: str, option: str) -> None:
    """Pick ``option`` in the select box labelled exactly ``label``, typed to find it in a long list (choosing the option already
    shown runs nothing, so then there is nothing to do)."""
    box = page.get_by_role("combobox", name=label, exact=True)
    if box.input_value() == option:
        return
    box.click()
    page.keyboard.type(option)
    click(page, page.get_by_role("option", name=option, exact=True))


def nav(page: Page, name: str) -> None:
    """Go to a page through its link in the sidebar, as a user would."""
    click(page, page.get_by_test_id("stSidebarUserContent").get_by_role("link", name=name))


def section(page: Page, name: str) -> None:
    """Show one section of Configure's form (its section picker reruns only when the choice changes)."""
    tab = page.get_by_role("radio", name=name, exact=True)
    if not tab.is_checked():
        click(page, tab)


PASSWORD = "pässwörd-密码-🔑"  # the exposed app's; non-ASCII on purpose: compared as UTF-8 bytes


@pytest.fixture
def exposed_app(tmp_path) -> Iterator[str]:
    """The app as a team would expose it: bound to 0.0.0.0 with GRPO_UI_PASSWORD set; nothing opened it before."""
    yield from serve(tmp_path, "0.0.0.0", GRPO_UI_PASSWORD=PASSWORD)


def sign_in(page: Page, password: str) -> None:
    page.get_by_label("Password", exact=True).fill(password)
    click(page, page.get_by_role("button", name="Sign in"))


def body_text(page: Page) -> str:
    return page.locator("body").inner_text()


def shot(page: Page, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"{name}.png"))
