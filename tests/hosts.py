"""Test hosts: Linux network namespaces on one bridge, each running its own real sshd with its own host key.

Hosts share the file system and the process table (namespaces separate the network only), so tests find a job's
processes by what was recorded, never by name. Needs root and `ip netns`; otherwise the tests that use it skip and
say why. Everything is torn down at the end of the session, also after failures.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

SSHD = "/usr/sbin/sshd"


def sh(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(args, capture_output=True, text=True, check=check)


@dataclass
class TestHost:
    name: str       # ssh-config alias
    ns: str
    addr: str
    dir: Path
    host_key_pub: str
    iface: str      # its network interface (for GLOO_SOCKET_IFNAME)

    def pid(self) -> int:
        return int((self.dir / "sshd.pid").read_text())

    def start_sshd(self) -> None:
        Path("/run/sshd").mkdir(exist_ok=True)
        sh("ip", "netns", "exec", self.ns, SSHD, "-f", str(self.dir / "sshd_config"), "-E", str(self.dir / "sshd.log"))
        for _ in range(100):
            if (self.dir / "sshd.pid").exists() and sh("ip", "netns", "exec", self.ns, "bash", "-c",
                                                        f"exec 3<>/dev/tcp/{self.addr}/22", check=False).returncode == 0:
                return
            time.sleep(0.05)
        raise RuntimeError(f"sshd on {self.name} did not start: {(self.dir / 'sshd.log').read_text()}")

    def connection_pids(self) -> list[int]:
        """The per-connection sshd processes: children of this host's listener (by its recorded pid)."""
        out = sh("ps", "-o", "pid=", "--ppid", str(self.pid()), check=False).stdout
        return [int(p) for p in out.split()]

    def kill_sshd(self) -> None:
        """SSH dies on this host: its listener and every open connection (a job started by it keeps running)."""
        for pid in [*self.connection_pids(), self.pid()]:
            try:
                os.kill(pid, 9)
            except ProcessLookupError:
                pass
        (self.dir / "sshd.pid").unlink(missing_ok=True)


class HostNet:
    """A bridge with N namespace hosts; ``ssh_env`` points grpo-ui's SSH at a private config and known_hosts."""

    def __init__(self, root: Path, prefix: str, subnet: int):
        self.root, self.prefix, self.subnet = root, prefix, subnet
        self.bridge = f"{prefix}br"
        self.hosts: list[TestHost] = []
        self.client_key = root / "id_ed25519"
        sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(self.client_key))
        sh("ip", "link", "add", self.bridge, "type", "bridge")
        # No IPv6 link-local addresses in the root namespace: their late arrival makes Chromium abort page loads
        # (ERR_NETWORK_CHANGED) in the browser tests.
        sh("ip", "link", "set", self.bridge, "addrgenmode", "none")
        sh("ip", "addr", "add", f"10.{subnet}.0.1/24", "dev", self.bridge)
        sh("ip", "link", "set", self.bridge, "up")
        self.ssh_config = root / "ssh_config"
        self.known_hosts = root / "known_hosts"
        self.ssh_config.write_text("")
        self.known_hosts.write_text("")

    def add(self, count: int = 1, trusted: bool = True, sshd_extra: str = "") -> list[TestHost]:
        """Start ``count`` hosts; ``sshd_extra`` is appended to each sshd_config (more ports, AllowUsers, …)."""
        out = []
        for _ in range(count):
            i = len(self.hosts)
            name, ns, addr = f"h{i}", f"{self.prefix}h{i}", f"10.{self.subnet}.0.{10 + i}"
            d = self.root / name
            d.mkdir()
            a, b = f"{self.prefix}{i}a", f"{self.prefix}{i}b"
            sh("ip", "netns", "add", ns)
            sh("ip", "link", "add", a, "type", "veth", "peer", "name", b)
            sh("ip", "link", "set", b, "netns", ns)
            sh("ip", "link", "set", a, "addrgenmode", "none")
            sh("ip", "link", "set", a, "master", self.bridge, "up")
            sh("ip", "netns", "exec", ns, "ip", "addr", "add", f"{addr}/24", "dev", b)
            sh("ip", "netns", "exec", ns, "ip", "link", "set", b, "up")
            sh("ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up")
            sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(d / "host_key"))
            shutil.copy(f"{self.client_key}.pub", d / "authorized_keys")
            (d / "sshd_config").write_text(
                f"Port 22\nListenAddress {addr}\nHostKey {d / 'host_key'}\nAuthorizedKeysFile {d / 'authorized_keys'}\n"
                f"PidFile {d / 'sshd.pid'}\nPasswordAuthentication no\nKbdInteractiveAuthentication no\n"
                "PermitRootLogin prohibit-password\nStrictModes no\nUsePAM no\nMaxSessions 100\nMaxStartups 100\n"
                "Subsystem sftp internal-sftp\nAcceptEnv LANG\n" + sshd_extra)
            host = TestHost(name, ns, addr, d, (d / "host_key.pub").read_text().split()[1], b)
            host.start_sshd()
            with open(self.ssh_config, "a") as f:
                f.write(f"Host {name}\n  HostName {addr}\n  User root\n  IdentityFile {self.client_key}\n\n")
            if trusted:
                self.trust(host)
            self.hosts.append(host)
            out.append(host)
        return out

    @staticmethod
    def name_iface(host: TestHost, name: str) -> None:
        """Rename the host's interface (inside its namespace), e.g. to eth0 as on every node of a real cluster, so
        one GLOO_SOCKET_IFNAME fits all of them."""
        for step in (["down"], ["name", name], ["up"]):
            sh("ip", "-n", host.ns, "link", "set", "dev", host.iface if step != ["up"] else name, *step)
        host.iface = name

    def trust(self, host: TestHost, port: int = 22) -> None:
        name = host.addr if port == 22 else f"[{host.addr}]:{port}"
        with open(self.known_hosts, "a") as f:
            f.write(f"{name} ssh-ed25519 {host.host_key_pub}\n")

    def connections(self, host: TestHost, port: int = 22) -> int:
        """Established TCP connections to the host's sshd on ``port`` (seen from inside its namespace)."""
        out = sh("ip", "netns", "exec", host.ns, "ss", "-tnH", "state", "established", f"( sport = :{port} )").stdout
        return len(out.splitlines())

    def teardown(self) -> None:
        """Stop every process left in the hosts' namespaces, then remove them. The sshd daemon alone is not enough:
        a session whose client went away after the network was deleted would wait for it forever."""
        for h in self.hosts:
            try:
                os.kill(h.pid(), 15)
            except (OSError, ValueError):
                pass
            for pid in sh("ip", "netns", "pids", h.ns, check=False).stdout.split():
                try:
                    os.kill(int(pid), 9)
                except OSError:
                    pass
            sh("ip", "netns", "del", h.ns, check=False)
        for i in range(len(self.hosts)):
            sh("ip", "link", "del", f"{self.prefix}{i}a", check=False)
        sh("ip", "link", "del", self.bridge, check=False)


def _why_not() -> str | None:
    if os.geteuid() != 0:
        return "network-namespace test hosts need root (CI runs as root): run `make test` as root"
    if not shutil.which("ip") or not Path(SSHD).exists():
        return "needs iproute2 and openssh-server (`make test` installs them)"
    return None


def _free_subnet(start: int) -> int:
    """S of a 10.S.0.0/24 no interface uses yet (S in 200–249, trying ``start`` first): two test sessions on one
    machine with the same subnet would route each other's packets to the wrong bridge."""
    used = sh("ip", "-4", "-o", "addr").stdout
    for k in range(50):
        subnet = 200 + (start + k) % 50
        if f" 10.{subnet}.0." not in used:
            return subnet
    raise RuntimeError("no free 10.200–249.0.0/24 subnet left for test hosts")


@pytest.fixture(scope="session")
def hostnet(tmp_path_factory):
    reason = _why_not()
    if reason:
        pytest.skip(reason)
    # One session at a time picks a subnet and takes it (pytest-xdist's workers, other test sessions on the machine).
    with open("/tmp/grpo-ui-hostnet.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        net = HostNet(tmp_path_factory.mktemp("hostnet"), f"g{os.getpid() % 10000}", _free_subnet(os.getpid() % 50))
    try:
        yield net
    finally:
        net.teardown()


@contextmanager
def launched(spec, tmp_path: Path, name: str = "watch-1"):
    """Launch ``spec`` through the jobs service with a store and run root under ``tmp_path``: yields (jobs, the job's
    id, its run dir); afterwards the service is closed and whatever the test left running is stopped."""
    from grpo_ui.jobs.service import Jobs
    from grpo_ui.jobs.store import Store
    jobs = Jobs(Store(tmp_path / "db.sqlite"))
    job = jobs.launch(jobs.plan(spec, name))
    try:
        yield jobs, job, tmp_path / "runs" / job
    finally:
        jobs.close()
        stop_active_jobs(tmp_path / "db.sqlite")


def stop_active_jobs(db_path) -> None:
    """Teardown for tests that launch jobs: stop whatever a failed test left running (no orphans, ever), through
    each job's own backend."""
    from grpo_ui.jobs.service import Jobs
    from grpo_ui.jobs.store import Store
    if not Path(db_path).exists():
        return
    jobs = Jobs(Store(db_path))
    for job in jobs.store.jobs(active_only=True):
        try:
            jobs.stop(job.id, grace=3)
        except Exception as e:  # noqa: BLE001 - report, keep tearing down
            print(f"teardown: could not stop {job.id}: {e}")
    jobs.close()


@pytest.fixture
def ssh_env(hostnet, monkeypatch):
    """Point grpo-ui's SSH at the test hosts' ssh config and known_hosts (the user's own files are untouched)."""
    monkeypatch.setenv("GRPO_UI_SSH_CONFIG", str(hostnet.ssh_config))
    monkeypatch.setenv("GRPO_UI_KNOWN_HOSTS", str(hostnet.known_hosts))
    return hostnet
