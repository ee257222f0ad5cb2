"""GPU telemetry scoped to the job: the sampler's readers keep only the GPUs a job owns on a node (CUDA_VISIBLE_DEVICES
as its processes get it, indices or UUIDs), so another job's GPUs never reach the store, the charts or the doctor;
and the jobs service starts a job's channels through its backend once it runs and ends them (on the node too) when
it stops.

No GPU here: nvidia-smi is a stand-in answering the sampler's queries with lines in nvidia-smi's documented formats
(tests/data/nvidia-smi, see its README), a tick every 0.2 s.
"""

import time
from pathlib import Path

from grpo_ui.backends.remote.gpu import OWNED, TICK, AppsReader, SampleReader
from grpo_ui.core import shell
from grpo_ui.doctor.diagnose import diagnose
from grpo_ui.doctor.snapshot import Snapshot
from grpo_ui.jobs.service import Jobs
from grpo_ui.jobs.store import Store
from grpo_ui.spec.yaml_io import validate_spec
from tests.test_launcher import launch
from tests.wait import wait_for

DATA = Path(__file__).parent / "data" / "nvidia-smi"
UUIDS, APPS = ((DATA / f).read_text().splitlines() for f in ("gpu_uuid.csv", "compute_apps.csv"))
BUSY, IDLE = ((DATA / f).read_text().splitlines() for f in ("busy.csv", "idle.csv"))
GPU3 = "GPU-36f675cc"  # a unique prefix of GPU 3's UUID (gpu_uuid.csv), as CUDA_VISIBLE_DEVICES may give it


def nvidia_smi_standin(bin_dir: Path, gpus: int = 8) -> Path:
    """An nvidia-smi for a machine without GPUs, answering the sampler's three queries for the first ``gpus`` GPUs
    of tests/data/nvidia-smi (compute processes of every GPU there, as nvidia-smi lists them)."""
    uuids = UUIDS[:gpus]
    ticks = [line for line in BUSY if int(line.split(",")[1]) < gpus]
    bin_dir.mkdir(parents=True, exist_ok=True)
    path = bin_dir / "nvidia-smi"
    path.write_text(f"""#!/bin/bash
case "$*" in
  *--query-gpu=index,uuid\\ *|*--query-gpu=index,uuid) printf '%s\\n' {shell.join(uuids)} ;;
  *--query-compute-apps=*) printf '%s\\n' {shell.join(APPS)} ;;
  *-lms*) while :; do printf '%s\\n' {shell.join(ticks)}; sleep 0.2; done ;;
  *) exit 2 ;;
esac
""")
    path.chmod(0o755)
    return path


def read_all(reader, lines):
    return [s for s in map(reader, lines) if s is not None]


def test_readers_keep_the_gpus_the_job_owns_by_index_or_uuid():
    samples = read_all(SampleReader("h0"), [f"{OWNED} 1,{GPU3}", *UUIDS, *BUSY])
    assert {s["gpu_index"] for s in samples} == {1, 3} and len(samples) == 6  # 3 ticks of 2 GPUs
    (snap,) = read_all(AppsReader("h0"), [f"{OWNED} 1,{GPU3}", *UUIDS, *APPS, TICK])
    # GPU 3 holds a rank and a leftover process of an earlier run; the other GPUs' ranks are not this job's
    assert sorted((p["gpu_index"], p["pid"]) for p in snap["processes"]) == [(1, 41231), (3, 28817), (3, 41233)]
    assert len(read_all(SampleReader("h0"), [f"{OWNED} all", *UUIDS, *BUSY])) == 24  # unset: every GPU
    assert read_all(SampleReader("h0"), [f"{OWNED} ", *UUIDS, *BUSY]) == []  # empty: none


def test_a_gpu_the_job_does_not_own_never_reaches_gpu_underused():
    """GPUs 4-7 alternate busy and idle (another job's colocate pattern), the job's GPUs 0-3 work steadily: read
    through the job's sampler they raise nothing; read as every GPU they would."""
    now = time.time()
    lines = [f"{OWNED} 0,1,2,3", *UUIDS]
    for t in range(300):
        lines += [(BUSY if g < 4 or (t // 20) % 2 == 0 else IDLE)[(t % 3) * 8 + g] for g in range(8)]

    def seen_as(owned: str) -> list[dict]:
        samples = read_all(SampleReader("h0"), [owned, *lines[1:]])
        for k, s in enumerate(samples):  # one tick per second over the last five minutes
            s["ts"] = now - 300 + k // len({x["gpu_index"] for x in samples})
        return samples

    def underused(samples):
        return [a for a in diagnose(Snapshot(gpu=samples, now=now, first_step_at=now - 3600))
                if a.id == "GPU-UNDERUSED"]
    assert {s["gpu_index"] for s in seen_as(lines[0])} == {0, 1, 2, 3} and not underused(seen_as(lines[0]))
    (alert,) = underused(seen_as(f"{OWNED} all"))
    assert "4 of 8 GPUs" in alert.explanation


def test_the_service_samples_a_running_jobs_gpus_on_its_node_and_ends_that_with_the_job(ssh_env, tmp_path):
    (h,) = ssh_env.add(1)
    env = tmp_path / "env"
    standin = nvidia_smi_standin(env / "bin")
    (env / "bin/swift").write_text("#!/bin/bash\nexec sleep 300\n")
    (env / "bin/swift").chmod(0o755)
    spec = validate_spec({
        "name": "gpus", "train": {"model": "Qwen/Qwen2.5-0.5B", "dataset": ["/data/d.jsonl"], "reward_funcs": ["format"],
                                  "num_generations": 2, "per_device_train_batch_size": 2},
        "rollout": {"use_vllm": False, "vllm_mode": None},
        "cluster": {"nodes": [{"host": h.name, "address": h.addr, "gpus": [1, 3], "python_env": str(env)}],
                    "run_root": str(tmp_path / "runs")}})
    jobs = Jobs(Store(tmp_path / "db.sqlite"), telemetry=True)
    try:
        job = launch(jobs, spec, "gpus-1")
        assert jobs.collector.following(job) == [0]
        assert wait_for(lambda: len(jobs.store.gpu_samples(job)) >= 6 and jobs.store.gpu_processes(job), 120)
        assert {(s["host"], s["gpu_index"]) for s in jobs.store.gpu_samples(job)} == {(h.name, 1), (h.name, 3)}
        assert sorted({p.gpu_index for p in jobs.store.gpu_processes(job)}) == [1, 3]
        held = {(r["host"], r["gpu_index"], r["ts"]) for r in jobs.collector.window(job).recent(time.time(), 300)}
        stored = {(r["host"], r["gpu_index"], r["ts"]) for r in jobs.store.gpu_samples(job)}
        assert held and held <= stored  # each sample stored also lands in the job's running window
        assert jobs.stop(job, grace=3) == {h.name: "stopped"}
        assert jobs.collector.following(job) == [] and jobs.collector.window(job) is None
        assert wait_for(lambda: not samplers(standin), 60), "a sampler outlived its job"
    finally:
        jobs.close()


def samplers(standin: Path) -> list[int]:
    """Processes running the stand-in (every test host shares this machine's process table)."""
    found = []
    for d in Path("/proc").iterdir():
        try:
            if d.name.isdigit() and str(standin).encode() in (d / "cmdline").read_bytes():
                found.append(int(d.name))
        except OSError:
            pass
    return found
