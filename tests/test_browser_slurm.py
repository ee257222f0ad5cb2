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
from pathlib import Path

import pytest

from grpo_ui.jobs.service import HANDLE
from grpo_ui.jobs.store import Store
from grpo_ui.spec.yaml_io import spec_to_yaml, validate_spec
from tests.hosts import stop_active_jobs
from tests.slurm import describe
from tests.test_browser import CHROMIUM, nav, page, serve, shot  # noqa: F401 - fixture
from tests.test_launcher import wait_for
from tests.test_telemetry import nvidia_smi_standin
from tests.tiny_job import ASSETS, SWIFT_VENV, tiny_spec_data

pytestmark = pytest.mark.slow


@pytest.fixture
def slurm_app(slurm_env, tmp_path):
    """The app with the tiny job as its draft (SSH, one node), Slurm's commands answering on this machine."""
    if not Path(CHROMIUM).exists() or not (ASSETS / "model" / "config.json").exists():
        pytest.fail("Debian chromium or the tiny model missing: `make test` installs and builds them")
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


def test_a_slurm_job_configured_queued_watched_and_stopped_in_the_browser(slurm_app, slurm_env, page,  # noqa: F811
                                                                          tmp_path):
    holder = slurm_env.run("sbatch", "--parsable", "--partition=single", "--exclusive", "--output=/dev/null",
                           "--wrap=sleep 300").stdout.strip()  # the partition is busy
    try:
        page.goto(slurm_app)
        page.get_by_text("GPU memory per device").wait_for(timeout=90000)
        partition = page.get_by_label("partition", exact=True)  # shown once the backend is slurm
        for _ in range(4):  # the combobox: open it, pick the option (again, should a rerun have closed it)
            page.get_by_label("backend", exact=True).click(force=True)
            option = page.get_by_role("option", name="slurm", exact=True)
            if wait_for(option.is_visible, 15):
                option.click()
            if wait_for(partition.is_visible, 30):
                break
        partition.fill("single")
        partition.press("Enter")
        page.get_by_text("SLURM-NODE-HOSTS").first.wait_for(timeout=60000)  # the Slurm checks run on the draft
        nav(page, "Launch")
        page.get_by_text("Slurm (sbatch on localhost)").wait_for(timeout=90000)
        page.get_by_text("Run preflight on every node first").click()  # preflight: the CLI test covers it
        page.get_by_role("button", name="Launch", exact=True).click()
        page.get_by_text("is queued").wait_for(timeout=60000)
        page.get_by_role("link", name=re.compile("^Watch ")).click()
        page.get_by_text("PENDING (Resources)").wait_for(timeout=90000)
        page.get_by_text("queue position 1").wait_for(timeout=30000)
        shot(page, "monitor-slurm-queued")
        slurm_env.run("scancel", holder)
        page.wait_for_function("document.body.innerText.includes('Slurm job') && "
                               "document.body.innerText.includes('RUNNING')", timeout=60000)
        page.wait_for_function("/Step\\s*\\d+ \\/ 20000/.test(document.body.innerText)", timeout=180000)
        page.get_by_text("[INFO:swift]").first.wait_for(timeout=30000)  # rank 0's log lines
        page.wait_for_function("[...document.querySelectorAll('.legendtext')].some(e => e.textContent == 's0/0')",
                               timeout=60000)
        legend = [t for t in page.locator(".legendtext").evaluate_all("els => els.map(e => e.textContent)")
                  if t.startswith("s0/")]  # "s0/0" (GPU charts), "s0/GPU 0 (MiB)" (memory per rank)
        # the GPU Slurm gave the job; the node's other GPU is drawn nowhere
        assert {re.search(r"\d+", t.split("/")[1])[0] for t in legend} == {"0"}, legend
        shot(page, "monitor-slurm")
        gpu_chart = page.locator(".st-key-gpu_chart .js-plotly-plot").last  # a rerun may briefly show two
        gpu_chart.wait_for(timeout=30000)
        gpu_chart.scroll_into_view_if_needed()
        shot(page, "monitor-slurm-gpus")
        store = Store(tmp_path / "db.sqlite")
        job = json.loads(store.meta(store.jobs()[0]["id"], HANDLE))["job"]
        page.get_by_role("button", name="Stop this job on every node").click()
        page.get_by_text("Stopped: s0: stopped").wait_for(timeout=90000)
        assert not (left := slurm_env.job_pids(job)), describe(left)
        assert wait_for(lambda: not samplers(job), 30), describe(samplers(job))
    finally:
        slurm_env.run("scancel", holder, check=False)
