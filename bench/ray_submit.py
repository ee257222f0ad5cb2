"""Ray submission: seconds from submitting a job until Ray says it is RUNNING, through grpo-ui's Jobs API client
(grpo_ui.backends.ray_jobs: one HTTP request from the app) and through `ray job submit --no-wait` (Ray's own CLI, from
the nodes' venv) of the same entrypoint, in the same run on the same one-node cluster (a network-namespace host, Ray
2.60 from the ms-swift venv); both wait for RUNNING with the same poll. Prints each median and the ratio ours /
Ray's CLI. Needs root (namespaces), like the test suite."""

import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent.parent))
from grpo_ui.backends.ray_jobs import JobsApi  # noqa: E402
from tests.hosts import HostNet, _free_subnet  # noqa: E402
from tests.tiny_job import SWIFT_VENV  # noqa: E402

ENTRYPOINT = "sleep 60"
ROUNDS = 5
MARK = f"GRPO_UI_RUN=bench-ray-submit/{os.getpid()}"


def running(api: JobsApi, submission: str, start: float) -> float:
    """Seconds from ``start`` until the job is RUNNING (it must get there within 120 s)."""
    while time.perf_counter() - start < 120:
        status = api.status(submission)
        if status and status["status"] == "RUNNING":
            return time.perf_counter() - start
        if status and status["status"] in ("FAILED", "STOPPED", "SUCCEEDED"):
            raise SystemExit(f"{submission} ended: {status['message']}")
        time.sleep(0.05)
    raise SystemExit(f"{submission} not RUNNING within 120 s")


def ours(api: JobsApi) -> float:
    submission = f"bench-ours-{uuid.uuid4().hex[:8]}"
    start = time.perf_counter()
    api.submit(submission, ENTRYPOINT, {"env_vars": {"RAY_USAGE_STATS_ENABLED": "0"}}, {"bench": "ours"}, {})
    took = running(api, submission, start)
    api.stop(submission)
    return took


def ray_cli(api: JobsApi) -> float:
    submission = f"bench-cli-{uuid.uuid4().hex[:8]}"
    start = time.perf_counter()
    subprocess.run([str(SWIFT_VENV / "bin/ray"), "job", "submit", "--address", api.address, "--no-wait",
                    "--submission-id", submission, "--runtime-env-json", '{"env_vars": {"RAY_USAGE_STATS_ENABLED": "0"}}',
                    "--metadata-json", '{"bench": "ray"}', "--", *ENTRYPOINT.split()],
                   check=True, capture_output=True, env={**os.environ, "RAY_USAGE_STATS_ENABLED": "0"})
    took = running(api, submission, start)
    api.stop(submission)
    return took


def main() -> None:
    root = Path(tempfile.mkdtemp(prefix="bench-ray-"))
    net = HostNet(root, f"b{os.getpid() % 10000}", _free_subnet(os.getpid() % 50 + 25))
    try:
        (host,) = net.add(1)
        subprocess.run(["ip", "netns", "exec", host.ns, "env", MARK, "RAY_USAGE_STATS_ENABLED=0",
                        str(SWIFT_VENV / "bin/ray"), "start", "--head", f"--node-ip-address={host.addr}",
                        f"--dashboard-host={host.addr}", "--num-cpus=2", f"--temp-dir=/tmp/bench-ray-{os.getpid()}",
                        "--disable-usage-stats"], check=True, capture_output=True)
        api = JobsApi(f"http://{host.addr}:8265")
        ours(api), ray_cli(api)  # warm both paths once (the dashboard's first job sets up its job agent)
        mine = [ours(api) for _ in range(ROUNDS)]
        theirs = [ray_cli(api) for _ in range(ROUNDS)]
        a, b = statistics.median(mine), statistics.median(theirs)
        print(f"submit → RUNNING, grpo-ui Jobs API client: median {a:.2f} s over {ROUNDS} ({', '.join(f'{x:.2f}' for x in mine)})")
        print(f"submit → RUNNING, ray job submit (CLI):     median {b:.2f} s over {ROUNDS} ({', '.join(f'{x:.2f}' for x in theirs)})")
        print(f"ratio grpo-ui / ray job submit: {a / b:.2f}")
    finally:
        for d in Path("/proc").iterdir():  # the Ray processes this bench started, by their marker
            try:
                if d.name.isdigit() and MARK.encode() in (d / "environ").read_bytes():
                    os.kill(int(d.name), 9)
            except OSError:
                continue
        net.teardown()
        subprocess.run(["rm", "-rf", f"/tmp/bench-ray-{os.getpid()}", str(root)], check=False)


if __name__ == "__main__":
    main()
