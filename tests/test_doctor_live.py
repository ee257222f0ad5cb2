"""The doctor's live parts on real processes and real sshd hosts (network namespaces): py-spy from PyPI reading the
stacks of a real hung two-rank torchrun job started by the launcher; preflight installing py-spy into a node's
environment with pip (and reporting when it cannot); the weight-sync group port tried from every trainer node;
versions compared with the compatibility table on a node with the real ms-swift 4.6 environment."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from grpo_ui.backends.preflight import preflight
from grpo_ui.backends.remote.ssh import Pool
from grpo_ui.doctor import liveness
from grpo_ui.doctor.diagnose import diagnose
from grpo_ui.doctor.snapshot import Snapshot
from grpo_ui.doctor.stacks import disagreement, parse_dumps
from grpo_ui.jobs.follow import STACKS, Watcher
from grpo_ui.jobs.service import Jobs
from grpo_ui.jobs.store import Store
from grpo_ui.knowledge.compat import conflicts, row_for, satisfies
from grpo_ui.spec.yaml_io import validate_spec
from tests.hosts import stop_active_jobs
from tests.test_launcher import job_pids, launch
from tests.tiny_job import SWIFT_VENV
from tests.wait import wait_for

ROOT = Path(__file__).parent.parent
PY_SPY = Path(sys.executable).parent / "py-spy"  # from requirements-test.txt (PyPI)


def node_env(tmp_path: Path, swift: str) -> Path:
    """A python_env directory whose `swift` is the given script and whose py-spy is the one from PyPI."""
    env = tmp_path / "env"
    (env / "bin").mkdir(parents=True)
    (env / "bin/swift").write_text(swift)
    (env / "bin/swift").chmod(0o755)
    (env / "bin/py-spy").symlink_to(PY_SPY)
    return env


def spec_for(hosts, env, tmp_path, **rollout):
    nodes = [{"host": h.name, "address": h.addr, "gpus": [0], "python_env": str(env)} for h in hosts]
    return validate_spec({
        "name": "live", "train": {"model": "Qwen/Qwen2.5-0.5B", "dataset": ["/data/d.jsonl"], "reward_funcs": ["format"],
                                  "num_generations": 2, "per_device_train_batch_size": 2},
        "rollout": rollout or {"use_vllm": False, "vllm_mode": None}, "env": {"GLOO_SOCKET_IFNAME": "lo"},
        "cluster": {"nodes": nodes, "run_root": str(tmp_path / "runs")}})


def test_stacks_of_a_real_hung_job_show_each_ranks_phase_and_who_waits(ssh_env, tmp_path, monkeypatch):
    (h,) = ssh_env.add(1)
    swift = (f"#!/bin/bash\nexec {SWIFT_VENV}/bin/python -m torch.distributed.run --nproc_per_node 2 "
             f"--master_port $MASTER_PORT {ROOT / 'tests/data/hang_job.py'}\n")
    spec = spec_for([h], node_env(tmp_path, swift), tmp_path)
    jobs = Jobs(Store(tmp_path / "db.sqlite"))
    try:
        job = launch(jobs, spec, "hang-1")
        store = jobs.store

        def both_ranks_waiting():
            text = Watcher(jobs).dump_stacks(job, spec, store.nodes(job))
            found = parse_dumps(text)
            return len(found) == 2 and {s.phase for s in found} == {"reward", "generation"} and found
        stacks = wait_for(both_ranks_waiting, 120)
        assert stacks, Watcher(jobs).dump_stacks(job, spec, store.nodes(job))
        by_rank = {s.label.split(" rank ")[1].split()[0]: s for s in stacks}
        assert by_rank["0"].summary.startswith("generation (waiting in all_gather")
        assert by_rank["1"].summary == "reward" and all(s.label.startswith(f"node 0 ({h.name}) rank ") for s in stacks)
        split = disagreement(stacks)
        assert "rank 0" in split.split(" wait in a collective for ")[0] and "rank 1" in split.split(" for ")[1]
        hang = next(a for a in diagnose(Snapshot(stacks=stacks, now=5000.0, started_at=1.0)) if a.id == "HANG")
        assert "wait in a collective for" in hang.explanation and "(reward)" in hang.explanation
        assert len(job_pids(job, store)) >= 3  # reading the stacks left the job as it was
        # the watcher dumps them by itself once the job is silent for too long (here: any silence is too long)
        monkeypatch.setattr(liveness, "allowed_silence", lambda gap: -1.0)
        polled = next(a for a in Watcher(jobs).poll(job).alerts if a.id == "HANG")
        assert "wait in a collective for" in polled.explanation and store.meta(job, STACKS).count("## node 0") == 2
    finally:
        jobs.close()
        stop_active_jobs(tmp_path / "db.sqlite")


@pytest.fixture
def bare_venv(tmp_path):
    """A fresh venv (no py-spy) and a folder holding the py-spy wheel from PyPI, for pip on a host without network."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, capture_output=True)
    wheels = tmp_path / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", str(wheels), "py-spy"],
                   check=True, capture_output=True)
    return venv, wheels


def test_preflight_installs_py_spy_with_pip_or_says_why_not(ssh_env, tmp_path, bare_venv):
    (h,) = ssh_env.add(1)
    venv, wheels = bare_venv
    spec = spec_for([h], venv, tmp_path)
    offline = spec.model_copy(update={"env": {"PIP_NO_INDEX": "1"}})  # the host has no network: pip finds nothing
    _, findings = preflight(offline, Pool())
    spy = [f for f in findings if f.id == "PREFLIGHT-PY-SPY"]
    assert spy and spy[0].severity == "warning" and "could not be installed" in spy[0].message
    tools = tmp_path / "runs/.grpo-ui-tools/bin/py-spy"
    assert not tools.exists()
    local = spec.model_copy(update={"env": {"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(wheels)}})
    _, findings = preflight(local, Pool())
    assert "PREFLIGHT-PY-SPY" not in {f.id for f in findings} and tools.exists()
    assert not (venv / "bin/py-spy").exists()  # the job's environment is left as it was


def test_weight_sync_port_tried_from_every_trainer_node(ssh_env, tmp_path):
    trainer0, trainer1, rollout = ssh_env.add(3)
    env = node_env(tmp_path, "#!/bin/bash\nexit 0\n")
    shutil.copy(SWIFT_VENV / "pyvenv.cfg", env / "pyvenv.cfg")
    (env / "lib").symlink_to(SWIFT_VENV / "lib")
    (env / "bin/python3").symlink_to((SWIFT_VENV / "bin/python3").resolve())
    spec = spec_for([trainer0, trainer1, rollout], env, tmp_path, use_vllm=True, vllm_mode="server")
    nodes = [n.model_dump() for n in spec.cluster.nodes]
    nodes[2]["role"] = "rollout"
    spec = validate_spec({**spec.model_dump(), "cluster": {**spec.cluster.model_dump(), "nodes": nodes}})
    # trainer 1 cannot reach the rollout node at all; trainer 0 can
    subprocess.run(["ip", "netns", "exec", trainer1.ns, "ip", "route", "add", "blackhole", f"{rollout.addr}/32"],
                   check=True)
    try:
        _, findings = preflight(spec, Pool())
    finally:
        subprocess.run(["ip", "netns", "exec", trainer1.ns, "ip", "route", "del", "blackhole", f"{rollout.addr}/32"])
    sync = [f for f in findings if f.id == "PREFLIGHT-SYNC-PORT"]
    assert len(sync) == 1 and sync[0].message.startswith(f"{trainer1.name} cannot reach the weight-sync group port "
                                                         f"{rollout.addr}:51216")
    assert not [f for f in findings if f.id == "PREFLIGHT-ROLLOUT-UNREACHABLE"]  # rank 0 reaches it
    assert not [f for f in findings if f.id == "PREFLIGHT-COMPAT"]  # the real ms-swift 4.6 environment fits its row


def test_compatibility_table_rows_and_ranges():
    row = row_for("4.6.0")
    transformers = row["requires"]["transformers"]
    assert satisfies("5.19.0", transformers) and not satisfies("5.20.0", transformers)
    assert all(row_for(f"{v}.0")["source"].startswith("ms-swift ") for v in ("3.2", "3.9", "4.0", "4.5"))
    old = conflicts({"ms-swift": "3.2.2", "transformers": "4.51.3", "trl": "0.16.1", "vllm": "0.8.5.post1"})
    assert {(c.package, c.wanted) for c in old} == {("transformers", ">=4.33,<4.51"), ("vllm", ">=0.5.1,<0.8")}
    bad = conflicts({"ms-swift": "3.9.1", "vllm": "0.8.5"})
    assert len(bad) == 1 and bad[0].known_bad and "#6935" in bad[0].why
    assert conflicts({"ms-swift": "9.9.0", "transformers": "1.0"}) == []  # no row: nothing to say
    assert os.path.exists(ROOT / "grpo_ui/knowledge/data/compat.yaml")
