"""The app's speed as a user feels it, in Debian's Chromium driven by Playwright (as the browser tests drive it), and
the server's side of it.

Browser (`streamlit run`, a 1440 × 900 window, median of 5):
- typed-to-updated: a new max_completion_length typed into Configure (it changes the memory estimate and the step
  time) and sent with Enter, until the page shows the new step time and the run that drew it has finished; each
  value is new, so no assessment comes from the cache;
- first Configure load: a new browser context (no cached files, a new session) opening the app, until its first run
  has finished and both charts are drawn.
Each is measured the same way, in the same run, on Streamlit's own trivial apps: one text input echoed back (typed
to updated) and an empty page with one line (first load). Targets: typed-to-updated ≤ 300 ms and within 2 × the
one-input app, first load ≤ 3 s. Where the time goes is printed beside each figure, from the browser's own clocks:
keypress → the rerun request on the websocket → the first and the last message of the run → the page updated, the
renderer's busy time (CDP Performance metrics) and its long tasks.

Server (Streamlit's AppTest, in-process, no browser): a full Configure rerun after a field change and a Monitor
refresh with 100k log lines and 10k metric points (targets ≤ 100 ms and ≤ 200 ms), against an empty-script AppTest
run measured the same way.

The machine is shared: the load average is printed with the figures. Run: PYTHONPATH=. .venv/bin/python bench/ui.py
[--browser-only | --server-only] [--repeat N]
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).parent.parent
sys.path.insert(0, str(ROOT))
from tests.browser import ARGS, CHROMIUM, free_port  # noqa: E402  (the browser tests' Chromium, as they launch it)

ONE_INPUT = "import streamlit as st\nx = st.text_input('x')\nst.write(f'value: {x}')\n"
EMPTY_PAGE = "import streamlit as st\nst.write('x')\n"

# In every page, before its scripts: the browser's clock at each websocket send and message, and the renderer's long
# tasks (a task over 50 ms: the main thread busy, nothing drawn meanwhile).
TIMELINE = """(() => {
    window.__sent = []; window.__received = []; window.__long = [];
    const Native = window.WebSocket;
    window.WebSocket = class extends Native {
        constructor(...args) {
            super(...args);
            this.addEventListener('message', () => window.__received.push(performance.now()));
        }
        send(data) { window.__sent.push(performance.now()); return super.send(data); }
    };
    new PerformanceObserver(list => { for (const e of list.getEntries()) window.__long.push([e.startTime, e.duration]); })
        .observe({type: 'longtask', buffered: true});
})()"""
# The page's state: no script running (a run that drew something new has finished: it set "running" while it drew)
IDLE = "() => document.querySelector('[data-testid=stApp]')?.dataset.testScriptState === 'notRunning'"


def load_average() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def serve(script: Path, home: Path) -> tuple[subprocess.Popen, str]:
    """`streamlit run script` on a free port, its data in ``home``; returns once it answers."""
    port = free_port()
    env = {**os.environ, "GRPO_UI_HOME": str(home), "GRPO_UI_DB": str(home / "db.sqlite")}
    proc = subprocess.Popen([sys.executable, "-m", "streamlit", "run", str(script), "--server.headless", "true",
                             "--server.address", "127.0.0.1", "--server.port", str(port),
                             "--browser.gatherUsageStats", "false"], cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    for _ in range(600):
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return proc, url
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise SystemExit(f"streamlit did not start for {script}")


def timeline(page) -> dict:
    return page.evaluate("() => ({sent: window.__sent, received: window.__received, long: window.__long})")


def renderer_busy(cdp) -> dict[str, float]:
    """The renderer's cumulative seconds of script, layout and style work, and of all its tasks."""
    metrics = {m["name"]: m["value"] for m in cdp.send("Performance.getMetrics")["metrics"]}
    return {k: metrics[k] for k in ("TaskDuration", "ScriptDuration", "LayoutDuration", "RecalcStyleDuration")}


def typed_to_updated(browser, url: str, box_label: str, values: list[str], shown, prepare=None) -> list[dict]:
    """For each value: type it into the box, press Enter, and wait in the page (each animation frame) until
    ``shown(value)`` (a JS predicate's source) holds and no script runs; the browser's clock at the key press, at
    the rerun request, the run's first and last message and the update, with the renderer's busy time meanwhile."""
    context = browser.new_context(viewport={"width": 1440, "height": 900})
    context.add_init_script(TIMELINE)
    page = context.new_page()
    cdp = context.new_cdp_session(page)
    cdp.send("Performance.enable")
    page.goto(url)
    page.wait_for_function(IDLE, timeout=180_000)
    if prepare:
        prepare(page)
    box = page.get_by_label(box_label, exact=True)
    out = []
    for value in values:
        box.fill(value)
        page.wait_for_function(IDLE, timeout=180_000)
        page.evaluate("() => { window.__sent = []; window.__received = []; window.__long = []; }")
        before = renderer_busy(cdp)
        pressed = page.evaluate("() => performance.now()")
        box.press("Enter")
        page.wait_for_function(f"""() => {{
            const done = ({IDLE})() && ({shown(value)});
            if (done && window.__updated === undefined) window.__updated = performance.now();
            return done; }}""", timeout=180_000, polling="raf")
        updated = page.evaluate("() => { const t = window.__updated; window.__updated = undefined; return t; }")
        after, t = renderer_busy(cdp), timeline(page)
        received = t["received"]
        sent = (t["sent"] or [pressed])[0]
        out.append({"total": updated - pressed, "to_send": sent - pressed,
                    "first_message": (received[0] if received else updated) - sent,
                    "server": (received[-1] if received else updated) - sent,
                    "after_last_message": updated - (received[-1] if received else updated),
                    "messages": len(received), "busy": {k: (after[k] - before[k]) * 1000 for k in after},
                    "long_tasks": sum(d for _, d in t["long"])})
    context.close()
    return out


def first_load(browser, url: str, done: str) -> list[dict]:
    """A new context (no cached files, a new session) opening ``url``, until the JS predicate ``done`` holds and no
    script runs: the browser's clock from the navigation's start, when the first and last message came and the
    renderer's long tasks."""
    context = browser.new_context(viewport={"width": 1440, "height": 900})
    context.add_init_script(TIMELINE)
    page = context.new_page()
    page.goto(url, wait_until="commit")
    page.wait_for_function(f"""() => {{
        const ok = ({IDLE})() && ({done});
        if (ok && window.__loaded === undefined) window.__loaded = performance.now();
        return ok; }}""", timeout=180_000, polling="raf")
    loaded = page.evaluate("() => window.__loaded")
    t = timeline(page)
    nav = page.evaluate("() => { const n = performance.getEntriesByType('navigation')[0]; "
                        "return {response: n.responseEnd, dom: n.domContentLoadedEventEnd}; }")
    context.close()
    received = t["received"]
    return {"total": loaded, "html": nav["response"], "dom_ready": nav["dom"],
            "first_message": received[0] if received else None, "last_message": received[-1] if received else None,
            "messages": len(received), "long_tasks": sum(d for _, d in t["long"])}


def median(rows: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in rows)


def each(rows: list[dict]) -> str:
    return ", ".join(f"{r['total']:.0f}" for r in rows)


def typed_line(name: str, rows: list[dict]) -> str:
    busy = {k: statistics.median(r["busy"][k] for r in rows) for k in rows[0]["busy"]}
    return (f"  {name}: {median(rows, 'total'):.0f} ms (median of {len(rows)}; each: "
            f"{each(rows)}) = key → request {median(rows, 'to_send'):.0f} ms, request → the run's first message "
            f"{median(rows, 'first_message'):.0f} ms, → its last message {median(rows, 'server'):.0f} ms "
            f"({median(rows, 'messages'):.0f} messages), last message → updated "
            f"{median(rows, 'after_last_message'):.0f} ms; renderer busy "
            f"{busy['TaskDuration']:.0f} ms (script {busy['ScriptDuration']:.0f}, layout {busy['LayoutDuration']:.0f}"
            f", style {busy['RecalcStyleDuration']:.0f}), long tasks {median(rows, 'long_tasks'):.0f} ms")


def load_line(name: str, rows: list[dict]) -> str:
    return (f"  {name}: {median(rows, 'total'):.0f} ms (median of {len(rows)}; each: "
            f"{each(rows)}) = HTML {median(rows, 'html'):.0f} ms, page scripts "
            f"ready {median(rows, 'dom_ready'):.0f} ms, the run's first message {median(rows, 'first_message'):.0f}"
            f" ms, last {median(rows, 'last_message'):.0f} ms ({median(rows, 'messages'):.0f} messages); long tasks "
            f"{median(rows, 'long_tasks'):.0f} ms")


def browser_bench(repeat: int) -> None:
    from playwright.sync_api import sync_playwright

    from grpo_ui.spec.presets import presets
    from grpo_ui.spec.yaml_io import spec_to_yaml

    with tempfile.TemporaryDirectory() as d:
        home = Path(d)
        (home / "one_input.py").write_text(ONE_INPUT)
        (home / "empty.py").write_text(EMPTY_PAGE)
        # the app's draft: the first preset
        (home / "draft.yaml").write_text(spec_to_yaml(next(iter(presets().values()))))
        servers = [serve(ROOT / "app.py", home), serve(home / "one_input.py", home), serve(home / "empty.py", home)]
        (_, app), (_, one), (_, empty) = servers
        try:
            with sync_playwright() as p:
                browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
                first_load(browser, app, "true")  # each server's first run imports its modules: not a user's wait
                first_load(browser, empty, "true")
                print(f"Browser (Chromium, 1440 × 900, 2 cores); load average {load_average()} at the start")
                trivial = typed_to_updated(browser, one, "x", [f"v{k}" for k in range(repeat + 1)],
                                           lambda v: f"document.body.textContent.includes('value: {v}')")[1:]
                print(typed_line("one-input Streamlit app, typed to updated (baseline)", trivial))

                def batch(page):
                    page.get_by_role("radio", name="Batch & generation", exact=True).click()
                    page.get_by_label("max_completion_length", exact=True).wait_for()

                def step_shown(v):  # the time panel's assumptions name the new cap: the step time is the new one
                    return f"document.body.textContent.includes('of max_completion_length {v},')"
                configure = typed_to_updated(browser, app, "max_completion_length",
                                             [str(600 + 16 * k) for k in range(repeat + 1)], step_shown, batch)[1:]
                print(typed_line("Configure, max_completion_length typed to the updated step time", configure))
                ratio = median(configure, "total") / median(trivial, "total")
                print(f"  → {median(configure, 'total'):.0f} ms, {ratio:.1f} × the one-input app (targets ≤ 300 ms, "
                      "≤ 2 ×)")
                loads_empty = [first_load(browser, empty, "document.body.textContent.includes('x')")
                               for _ in range(repeat)]
                print(load_line("empty Streamlit page, first load (baseline)", loads_empty))
                loads_app = [first_load(browser, app, "document.querySelectorAll('svg.grpo-ui-chart').length >= 2 "
                                        "&& document.querySelectorAll('.grpo-ui-run').length > 0")
                             for _ in range(repeat)]
                print(load_line("Configure, first load until both charts are drawn", loads_app))
                first = median(loads_app, "total")
                print(f"  → {first / 1000:.2f} s, {first / median(loads_empty, 'total'):.1f} × the empty page "
                      f"(target ≤ 3 s); load average {load_average()} at the end")
                browser.close()
        finally:
            for proc, _ in servers:
                proc.terminate()
                proc.wait(30)


def best(fn, n=5) -> float:
    times = []
    for _ in range(n):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times) * 1000


def server_bench() -> None:
    from streamlit.testing.v1 import AppTest

    with tempfile.TemporaryDirectory() as d:
        os.environ["GRPO_UI_HOME"], os.environ["GRPO_UI_DB"] = d, str(Path(d) / "db.sqlite")
        from grpo_ui.jobs.store import Store
        from grpo_ui.spec.presets import presets
        from grpo_ui.spec.yaml_io import spec_to_yaml

        empty = Path(d) / "empty.py"
        empty.write_text(EMPTY_PAGE)
        base_at = AppTest.from_file(str(empty))
        baseline = best(lambda: base_at.run())

        at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=60).run()
        at.button_group(key="section").set_value("batch").run()  # only the chosen section's fields are drawn
        box = at.text_input(key="f:train.num_generations")
        values = iter(["8", "16"] * 10)
        configure = best(lambda: box.set_value(next(values)).run())

        store = Store()
        spec = next(iter(presets().values()))
        store.create_job("big", spec.name, spec_to_yaml(spec), "succeeded")
        store.add_node("big", 0, "localhost", "trainer", 0, "node_0.sh", d)
        store.add_log_lines("big", 0, [f"[INFO:swift] line {i}" for i in range(100_000)], keep=100_000)
        for step in range(1, 1001):
            store.add_metrics("big", step, dict.fromkeys(("reward", "reward_std", "kl", "loss", "grad_norm", "completions/mean_length", "completions/clipped_ratio", "learning_rate", "seconds_per_step", "max_steps"), step * 0.001))
        mon = AppTest.from_file(str(ROOT / "views" / "monitor.py"), default_timeout=60)
        monitor = best(lambda: mon.run(), 3)
    print(f"Server (AppTest, in-process); load average {load_average()}")
    print(f"  empty Streamlit script (baseline): {baseline:.0f} ms")
    print(f"  Configure rerun after a field change (validate + estimate + chart + findings): {configure:.0f} ms "
          f"(target ≤ 100 ms; {configure / baseline:.1f} × baseline)")
    print(f"  Monitor page run with 100k log lines and 10k metric points: {monitor:.0f} ms (target ≤ 200 ms for the "
          f"fragment; this is the whole page)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--browser-only", action="store_true")
    parser.add_argument("--server-only", action="store_true")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    if not args.server_only:
        browser_bench(args.repeat)
    if not args.browser_only:
        server_bench()


if __name__ == "__main__":
    main()
