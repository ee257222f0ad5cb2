"""A Slurm job in the browser, on the real slurmctld the tests start (tests/slurm.py): Configure switches the tiny
CPU job (real ms-swift) to the Slurm backend, Launch submits it while another job holds the partition, Monitor shows
its place in the queue, then its log lines, metrics and its own GPU, and stops it; nothing of it is left running.

The nodes have no GPU: the job's environment has an nvidia-smi stand-in printing lines in nvidia-smi's documented
format for two GPUs (tests/test_telemetry.py), while Slurm's GRES (two per node, backed by /dev/null) decides which
one the job gets.
"""

import json
import os
import re
import select
import time
from pathlib import Path

import pytest
from playwright.sync_api import expect

from grpo_ui.jobs.service import HANDLE
from grpo_ui.jobs.store import Store
from grpo_ui.spec.yaml_io import spec_to_yaml, validate_spec
from tests.browser import choose, click, fill, nav, open_page, serve, shot
from tests.hosts import stop_active_jobs
from tests.slurm import describe
from tests.test_telemetry import nvidia_smi_standin
from tests.tiny_job import ASSETS, SWIFT_VENV, tiny_spec_data

pytestmark = pytest.mark.slow


@pytest.fixture
def slurm_app(slurm_env, tmp_path):
    """The app with the tiny job as its draft (SSH, one node), Slurm's commands answering on this machine."""
    if not (ASSETS / "model" / "config.json").exists():
        pytest.fail("the tiny model missing: `make test` builds it")
    env = tmp_path / "env"  # the ms-swift venv, activated, with an nvidia-smi stand-in beside it
    nvidia_smi_standin(env / "bin", gpus=2)
    (env / "bin/activate").write_text(f". {SWIFT_VENV}/bin/activate\n")
    data = tiny_spec_data(max_steps=20000)  # ~14 steps/s once it runs: far more than the test watches
    data["train"].update(output_dir=str(tmp_path / "out"), save_steps=100000, logging_steps=10)
    data["env"]["GLOO_SOCKET_IFNAME"] = "lo"
    data["cluster"] = {"run_root": str(tmp_path / "runs"), "master_port": 20000 + os.getpid() % 20000,
                       "nodes": [{"host": "localhost", "gpus": [0], "python_env": str(env)}]}
    home = tmp_path / "home"
    home.mkdir()
    (home / "draft.yaml").write_text(spec_to_yaml(validate_spec(data)))
    yield from serve(tmp_path, "127.0.0.1", GRPO_UI_HOME=str(home), SLURM_CONF=str(slurm_env.conf))
    stop_active_jobs(tmp_path / "db.sqlite")


def samplers(job: str) -> list[int]:
    """srun steps of the job's GPU sampler still running on this machine."""
    found = []
    for d in Path("/proc").iterdir():
        try:
            cmd = (d / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"--overlap" in cmd and f"--jobid={job}".encode() in cmd:
            found.append(int(d.name))
    return found


def still_running(pids: list[int], timeout: float) -> list[int]:
    """Those of ``pids`` that have not exited within ``timeout`` seconds (a process's pidfd turns readable when it
    exits: this waits for that, not for a time)."""
    deadline = time.monotonic() + timeout
    left = []
    for pid in pids:
        try:
            fd = os.pidfd_open(pid)
        except ProcessLookupError:
            continue
        try:
            if not select.select([fd], [], [], max(0.0, deadline - time.monotonic()))[0]:
                left.append(pid)
        finally:
            os.close(fd)
    return left


def test_a_slurm_job_configured_queued_watched_and_stopped_in_the_browser(slurm_app, slurm_env, page,
                                                                          tmp_path):
    holder = slurm_env.run("sbatch", "--parsable", "--partition=single", "--exclusive", "--output=/dev/null",
                           "--wrap=sleep 300").stdout.strip()  # the partition is busy
    try:
        open_page(page, slurm_app)
        choose(page, "backend", "slurm")
        fill(page, page.get_by_label("partition", exact=True), "single")  # shown once the backend is slurm
        expect(page.get_by_text("SLURM-NODE-HOSTS").first).to_be_visible()  # the Slurm checks run on the draft
        nav(page, "Launch")
        expect(page.get_by_text("Slurm (sbatch on localhost)")).to_be_visible()
        click(page, page.get_by_text("Run preflight on every node first"))  # preflight: the CLI test covers it
        click(page, page.get_by_role("button", name="Launch", exact=True))
        expect(page.get_by_text("is queued")).to_be_visible()
        click(page, page.get_by_role("link", name=re.compile("^Watch ")))
        expect(page.get_by_text("PENDING (Resources)")).to_be_visible()
        expect(page.get_by_text("queue position 1")).to_be_visible()
        shot(page, "monitor-slurm-queued")
        slurm_env.run("scancel", holder)
        body = page.locator("body")
        expect(body).to_contain_text("Slurm job")
        expect(body).to_contain_text("RUNNING")
        expect(body).to_contain_text(re.compile(r"Step\s*\d+ / 20000"), use_inner_text=True)
        expect(page.get_by_text("[INFO:swift]").first).to_be_visible()  # rank 0's log lines
        legends = page.locator(".legendtext").filter(has_text=re.compile("^s0/"))
        expect(legends.filter(has_text=re.compile("^s0/0$"))).not_to_have_count(0)
        # the GPU Slurm gave the job, "s0/0" (GPU charts), "s0/GPU 0 (MiB)" (memory per rank): the node's other GPU
        # is drawn nowhere (one read of every legend, in the page, as a fragment may redraw them at any time)
        legend = legends.evaluate_all("els => els.map(e => e.textContent)")
        assert {re.search(r"\d+", t.split("/")[1])[0] for t in legend} == {"0"}, legend
        shot(page, "monitor-slurm")
        # scrolled to in one step inside the page: a fragment's rerun replaces the chart between two Playwright calls
        page.wait_for_function("""() => {
            const chart = [...document.querySelectorAll('.st-key-gpu_chart .js-plotly-plot')].pop();
            chart?.scrollIntoView();
            return chart !== undefined;
        }""")
        shot(page, "monitor-slurm-gpus")
        store = Store(tmp_path / "db.sqlite")
        job = json.loads(store.meta(store.jobs()[0].id, HANDLE))["job"]
        click(page, page.get_by_role("button", name="Stop this job on every node"), part="live")
        expect(page.get_by_text("Stopped: s0: stopped")).to_be_visible()
        assert not (left := slurm_env.job_pids(job)), describe(left)
        assert not (left := still_running(samplers(job), 30)), describe(left)
    finally:
        slurm_env.run("scancel", holder, check=False)
