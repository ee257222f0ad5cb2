"""A real Slurm cluster for the tests (Debian's slurm-wlm 22.05: slurmctld, slurmd, munge), started once per test
session and torn down at its end, also after failures.

One controller, two partitions:
- ``single``: one slurmd (node s0) on the test host itself;
- ``multi``: two slurmd in network-namespace hosts of tests/hosts.py with hostnames of their own (n1, n2), started
  with ``nsenter --net`` + ``unshare --uts`` (``ip netns exec`` remounts /sys and slurmd then finds no cgroup mount).
  Their sshd sees the cluster's config (sshd's SetEnv), so the first one also serves as an SSH login node. Inside
  each namespace the host's interface is called eth0, as on real clusters, so one GLOO_SOCKET_IFNAME fits every node.

Every node has two GPUs as GRES (character devices that are /dev/null: no GPU here), so ``--gres=gpu:N``, sinfo's
GRES and the CUDA_VISIBLE_DEVICES Slurm sets are Slurm's own behaviour. munged runs as the munge user with a key and
socket of its own; configs, state and logs live in a temp dir and the ports are free ones picked here, so test
sessions running at the same time never meet. There is no accounting storage, so ``sacct`` has no records.
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.hosts import TestHost, sh
from tests.wait import wait_for

DAEMONS = ("/usr/sbin/slurmctld", "/usr/sbin/slurmd", "/usr/sbin/munged", "/usr/bin/sbatch")
IFACE = "eth0"


@dataclass
class SlurmCluster:
    dir: Path
    conf: Path
    hosts: list[TestHost]   # the namespace hosts running n1 and n2; hosts[0] is the SSH login node
    controller_addr: str

    @property
    def env(self) -> dict[str, str]:
        return {"SLURM_CONF": str(self.conf)}

    def run(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess:
        return subprocess.run(argv, capture_output=True, text=True, check=check, env={**os.environ, **self.env})

    def job_pids(self, job: str) -> list[int]:
        """Processes on this machine (every test host shares its process table) of one of this cluster's jobs."""
        wanted = (f"SLURM_JOB_ID={job}".encode(), f"SLURM_CONF={self.conf}".encode())
        found = []
        for d in Path("/proc").iterdir():
            if d.name.isdigit():
                try:
                    entries = set((d / "environ").read_bytes().split(b"\0"))
                except OSError:
                    continue
                if all(w in entries for w in wanted):
                    found.append(int(d.name))
        return found


def describe(pids: list[int]) -> str:
    """pid, parent, state and command line of each process, for a failure message."""
    out = []
    for pid in pids:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            out.append(f"{pid} (parent {stat[1]}, state {stat[0]}): {cmd[:300]}")
        except OSError:
            out.append(f"{pid}: gone")
    return "\n".join(out)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def _pid(path: Path) -> int | None:
    try:
        return int(path.read_text())
    except (OSError, ValueError):
        return None


def _config(d: Path, controller: str, hosts: list[TestHost]) -> str:
    nodes = [("s0", controller)] + [(f"n{k + 1}", h.addr) for k, h in enumerate(hosts)]
    return "\n".join([
        "ClusterName=grpoui", f"SlurmctldHost={socket.gethostname().split('.')[0]}({controller})",
        f"SlurmctldPort={_free_port()}", f"SlurmdPort={_free_port()}",
        "AuthType=auth/munge", "CredType=cred/munge", f"AuthInfo=socket={d / 'munge/socket'}",
        "SlurmUser=root", "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none", "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core",  # memory is not allotted: jobs share a node's CPUs and GPUs as real ones do
        "JobAcctGatherType=jobacct_gather/none", "AccountingStorageType=accounting_storage/none",
        # job ids (hence the MASTER_PORT an sbatch derives from them) apart from a concurrent test session's
        f"FirstJobId={100 * (os.getpid() % 200) + 1}",
        "MailProg=/bin/true", "ReturnToService=2", "KillWait=15", "GresTypes=gpu",
        "SlurmdParameters=config_overrides",  # CPUs=2 on any machine
        "SchedulerParameters=bf_interval=1",  # heterogeneous jobs are started by the backfill scheduler only
        f"StateSaveLocation={d / 'state'}", f"SlurmdSpoolDir={d / 'spool/%n'}",
        f"SlurmctldLogFile={d / 'log/slurmctld.log'}", f"SlurmdLogFile={d / 'log/slurmd-%n.log'}",
        f"SlurmctldPidFile={d / 'slurmctld.pid'}", f"SlurmdPidFile={d / 'slurmd-%n.pid'}",
        *(f"NodeName={name} NodeAddr={addr} CPUs=2 Gres=gpu:2 State=UNKNOWN" for name, addr in nodes),
        "PartitionName=single Nodes=s0 Default=YES MaxTime=INFINITE State=UP",
        "PartitionName=multi Nodes=n1,n2 MaxTime=INFINITE State=UP", ""])


def _start_munge(d: Path) -> None:
    munge = pwd.getpwnam("munge")
    md = d / "munge"
    md.mkdir(mode=0o755)
    (md / "key").write_bytes(os.urandom(1024))
    for p, mode in ((md, 0o755), (md / "key", 0o400)):
        os.chown(p, munge.pw_uid, munge.pw_gid)
        os.chmod(p, mode)
    sh("runuser", "-u", "munge", "--", "/usr/sbin/munged", f"--socket={md / 'socket'}", f"--key-file={md / 'key'}",
       f"--log-file={md / 'log'}", f"--pid-file={md / 'pid'}", f"--seed-file={md / 'seed'}")


def _wait_idle(cluster: SlurmCluster, nodes: int, timeout: float = 60.0) -> None:
    def states() -> list[str]:
        return cluster.run("sinfo", "-h", "-N", "-o", "%N %t", check=False).stdout.split()
    if wait_for(lambda: states().count("idle") == nodes, timeout, 0.3):
        return
    out = states()
    logs = "\n".join(p.read_text()[-1500:] for p in sorted((cluster.dir / "log").glob("*.log")))
    raise RuntimeError(f"Slurm nodes did not come up: {out}\n{logs}")


def _teardown(d: Path) -> None:
    """Cancel every job, wait until Slurm has ended them, then stop the daemons by their pid files."""
    env = {**os.environ, "SLURM_CONF": str(d / "slurm.conf")}
    if (d / "slurmctld.pid").exists():
        subprocess.run(["scancel", "--full", "--user=root"], env=env, capture_output=True, timeout=30)
        wait_for(lambda: not subprocess.run(["squeue", "-h"], env=env, capture_output=True, text=True).stdout.strip(),
                 30, 0.5)
    pids = [_pid(p) for p in [*d.glob("slurmd-*.pid"), d / "slurmctld.pid", d / "munge/pid"]]
    for pid in filter(None, pids):
        try:
            os.kill(pid, 15)
        except OSError:
            pass
    wait_for(lambda: not any(pid and Path(f"/proc/{pid}").exists() for pid in pids), 15, 0.1)
    shutil.rmtree(d, ignore_errors=True)


def _why_not() -> str | None:
    if os.geteuid() != 0:
        return "the Slurm tests start slurmctld, slurmd and munged as root (CI runs as root): run `make test` as root"
    return None


@pytest.fixture(scope="session")
def slurm(hostnet) -> SlurmCluster:
    reason = _why_not()
    if reason:
        pytest.skip(reason)
    missing = [p for p in DAEMONS if not Path(p).exists()]
    if missing:
        pytest.fail(f"Slurm is not installed ({', '.join(missing)} missing): run `make system-deps` (make test does)")
    # Not under pytest's tmp dirs: munged (as the munge user) must reach its socket, and they are root-only.
    d = Path(tempfile.mkdtemp(prefix=f"grpo-ui-slurm-{os.getpid()}-", dir="/tmp"))
    try:
        d.chmod(0o755)
        for sub in ("state", "log", "dev", "spool/s0", "spool/n1", "spool/n2"):
            (d / sub).mkdir(parents=True)
        for k in (0, 1):
            os.mknod(d / f"dev/gpu{k}", 0o666 | 0o020000, os.makedev(1, 3))  # a character device: /dev/null
        hosts = hostnet.add(2, sshd_extra=f"SetEnv SLURM_CONF={d / 'slurm.conf'}\n")
        for h in hosts:
            hostnet.name_iface(h, IFACE)
        cluster = SlurmCluster(d, d / "slurm.conf", hosts, f"10.{hostnet.subnet}.0.1")
        cluster.conf.write_text(_config(d, cluster.controller_addr, hosts))
        (d / "gres.conf").write_text(f"NodeName=s0,n1,n2 Name=gpu File={d / 'dev/gpu'}[0-1]\n")
        _start_munge(d)
        env = {**os.environ, **cluster.env}
        subprocess.run(["/usr/sbin/slurmctld"], env=env, check=True)
        subprocess.run(["/usr/sbin/slurmd", "-N", "s0"], env=env, check=True)
        for k, h in enumerate(hosts):
            subprocess.run(["nsenter", f"--net=/var/run/netns/{h.ns}", "unshare", "--uts", "sh", "-c",
                            f"hostname n{k + 1} && exec /usr/sbin/slurmd"], env=env, check=True)
        _wait_idle(cluster, 3)
        yield cluster
    finally:
        _teardown(d)


@pytest.fixture
def slurm_env(slurm, ssh_env, monkeypatch) -> SlurmCluster:
    """The cluster, with this process's Slurm commands (a localhost login node) and SSH pointed at it."""
    monkeypatch.setenv("SLURM_CONF", str(slurm.conf))
    return slurm
