"""SSH to the nodes with paramiko: ~/.ssh/config (HostName, User, Port, IdentityFile, ProxyJump), agent and key
files, known_hosts that rejects unknown and changed keys, pooled connections and a timeout on every operation."""

from __future__ import annotations

import base64
import hashlib
import os
import threading
from dataclasses import dataclass, replace
from pathlib import Path

import paramiko

from grpo_ui.core.errors import UserError

CONNECT_TIMEOUT = 10.0
MAX_JUMPS = 8


def known_hosts_path() -> Path:
    return Path(os.environ.get("GRPO_UI_KNOWN_HOSTS", Path.home() / ".ssh/known_hosts"))


def ssh_config_path() -> Path:
    return Path(os.environ.get("GRPO_UI_SSH_CONFIG", Path.home() / ".ssh/config"))


class SshError(UserError):
    """A connection problem on one host; the message says what to do."""

    def __init__(self, host: str, message: str):
        self.host = host
        super().__init__(f"{host}: {message}")


class UnknownHostKey(SshError):
    """The host's key is not in known_hosts: show the fingerprint and let the user trust it explicitly."""

    def __init__(self, host: str, hostname: str, port: int, key: paramiko.PKey):
        self.hostname, self.port, self.key = hostname, port, key
        self.fingerprint = fingerprint(key)
        super().__init__(host, f"unknown host key {key.get_name()} {self.fingerprint}; verify it and trust it "
                               "(Cluster page or `python -m grpo_ui preflight --trust`) before connecting")


class ChangedHostKey(SshError):
    pass


def fingerprint(key: paramiko.PKey) -> str:
    """OpenSSH-style SHA256 fingerprint."""
    return "SHA256:" + base64.b64encode(hashlib.sha256(key.asbytes()).digest()).decode().rstrip("=")


def known_host_name(hostname: str, port: int) -> str:
    return hostname if port == 22 else f"[{hostname}]:{port}"


def trust_host_key(hostname: str, port: int, key: paramiko.PKey, path: Path | None = None) -> None:
    """Append a host key to known_hosts (the user's explicit 'trust this key' action)."""
    path = path or known_hosts_path()
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)  # ~/.ssh, when it is created here
    with open(path, "a") as f:
        f.write(f"{known_host_name(hostname, port)} {key.get_name()} {key.get_base64()}\n")
    path.chmod(0o600)


class _Reject(paramiko.MissingHostKeyPolicy):
    def __init__(self, alias: str, port: int):
        self.alias, self.port = alias, port

    def missing_host_key(self, client, hostname, key):
        name = hostname.split("]")[0].lstrip("[")
        raise UnknownHostKey(self.alias, name, self.port, key)


@dataclass(frozen=True)
class Target:
    """Where to connect, after ~/.ssh/config."""

    alias: str
    hostname: str
    port: int
    user: str
    key_files: tuple[str, ...]
    proxy_jump: str | None


def resolve(host: str, user: str | None = None, port: int | None = None, identity_file: str | None = None,
            config_path: Path | None = None) -> Target:
    cfg = paramiko.SSHConfig()
    path = config_path or ssh_config_path()
    if path.exists():
        cfg = paramiko.SSHConfig.from_path(str(path))
    entry = cfg.lookup(host)
    keys = tuple(os.path.expanduser(k) for k in ([identity_file] if identity_file else entry.get("identityfile", [])))
    jump = entry.get("proxyjump")
    return Target(host, entry.get("hostname", host), int(port or entry.get("port", 22)),
                  user or entry.get("user") or os.environ.get("USER", "root"), keys,
                  None if not jump or jump.lower() == "none" else jump)


def parse_hop(hop: str) -> tuple[str | None, str, int | None]:
    """One ProxyJump hop, ``[ssh://][user@]host[:port]`` (IPv6 as ``[addr]:port``) → (user, host, port)."""
    hop = hop.strip().removeprefix("ssh://")
    user, _, hostport = hop.rpartition("@")
    if hostport.startswith("["):
        host, _, rest = hostport[1:].partition("]")
        port = rest.removeprefix(":")
    elif hostport.count(":") == 1:
        host, port = hostport.split(":")
    else:
        host, port = hostport, ""
    if not host or (port and not port.isdigit()):
        raise ValueError(f"cannot read ProxyJump hop {hop!r}: expected [user@]host[:port]")
    return user or None, host, int(port) if port else None


def jump_target(proxy_jump: str) -> Target:
    """The last hop of a ProxyJump chain, resolved through ssh config; the earlier hops become its own ProxyJump."""
    *before, last = proxy_jump.split(",")
    user, host, port = parse_hop(last)
    target = resolve(host, user, port)
    return replace(target, proxy_jump=",".join(before) if before else target.proxy_jump)


@dataclass
class Result:
    rc: int
    out: str
    err: str


class Connection:
    """One authenticated SSH connection; commands and SFTP over it. With ProxyJump, the hops' connections belong to
    it and are closed with it."""

    def __init__(self, target: Target, password: str | None = None, timeout: float = CONNECT_TIMEOUT,
                 depth: int = 0):
        self.target = target
        self.jump: Connection | None = None
        self.client = paramiko.SSHClient()
        kh = known_hosts_path()
        if kh.exists():
            self.client.load_host_keys(str(kh))
        self.client.set_missing_host_key_policy(_Reject(target.alias, target.port))
        try:
            self._connect(password, timeout, depth)
        except BaseException:
            self.close()
            raise
        self._sftp: paramiko.SFTPClient | None = None

    def _open_jump(self, timeout: float, depth: int) -> paramiko.Channel:
        """Connect through the ProxyJump chain; a channel to the target from the last hop."""
        target = self.target
        if depth >= MAX_JUMPS:
            raise SshError(target.alias, f"more than {MAX_JUMPS} ProxyJump hops: check ssh config for a loop")
        try:
            hop = jump_target(target.proxy_jump)
        except ValueError as e:
            raise SshError(target.alias, f"{e} (ProxyJump in ssh config)") from None
        self.jump = Connection(hop, timeout=timeout, depth=depth + 1)
        try:
            return self.jump.client.get_transport().open_channel(
                "direct-tcpip", (target.hostname, target.port), ("127.0.0.1", 0), timeout=timeout)
        except (OSError, paramiko.SSHException) as e:
            raise SshError(target.alias, f"jump host {hop.alias} cannot reach {target.hostname}:{target.port}: "
                                         f"{e}; check the address and that the jump host allows TCP forwarding"
                           ) from None

    def _connect(self, password: str | None, timeout: float, depth: int) -> None:
        target = self.target
        sock = self._open_jump(timeout, depth) if target.proxy_jump else None
        try:
            self.client.connect(target.hostname, port=target.port, username=target.user,
                                key_filename=list(target.key_files) or None, password=password, timeout=timeout,
                                banner_timeout=timeout, auth_timeout=timeout, sock=sock,
                                allow_agent=True, look_for_keys=not target.key_files)
        except SshError:
            raise
        except paramiko.BadHostKeyException as e:
            raise ChangedHostKey(target.alias, f"the host key changed (now {fingerprint(e.key)}); this may be an "
                                 "attack or a reinstalled machine — remove the old line from known_hosts only if "
                                 "you know why it changed") from None
        except paramiko.AuthenticationException:
            raise SshError(target.alias, f"authentication failed for user {target.user!r}: check the user, the key "
                           "(identity_file) or your ssh-agent") from None
        except (OSError, paramiko.SSHException) as e:
            raise SshError(target.alias, f"cannot connect to {target.hostname}:{target.port}: {e}") from None

    def run(self, command: str, timeout: float = 30.0, stdin: bytes | str | None = None) -> Result:
        try:
            chan_in, out, err = self.client.exec_command(command, timeout=timeout)
            if stdin is not None:
                chan_in.write(stdin)
                chan_in.channel.shutdown_write()
            o, e = out.read().decode(errors="replace"), err.read().decode(errors="replace")
            status = out.channel.recv_exit_status()
        except (OSError, paramiko.SSHException) as e:
            raise SshError(self.target.alias, f"command failed or timed out after {timeout:.0f} s: {e}") from None
        if status == -1 and not self.alive:
            raise SshError(self.target.alias, "the connection dropped while a command ran; it may have run in part")
        return Result(status, o, e)

    def sftp(self) -> paramiko.SFTPClient:
        if self._sftp is None:
            self._sftp = self.client.open_sftp()
            self._sftp.get_channel().settimeout(30)
        return self._sftp

    @property
    def alive(self) -> bool:
        t = self.client.get_transport()
        return bool(t and t.is_active())

    def close(self) -> None:
        self.client.close()
        if self.jump:
            self.jump.close()


class Pool:
    """Reuses one connection per (host, user, port); reconnects when a connection died. Threads asking for the same
    host at once wait for one connection attempt (a lock per key) and share its result."""

    def __init__(self):
        self._conns: dict[tuple, Connection] = {}
        self._key_locks: dict[tuple, threading.Lock] = {}
        self._lock = threading.Lock()

    def get(self, host: str, user: str | None = None, port: int | None = None, identity_file: str | None = None,
            password: str | None = None) -> Connection:
        target = resolve(host, user, port, identity_file)
        key = (target.hostname, target.port, target.user)
        with self._lock:
            key_lock = self._key_locks.setdefault(key, threading.Lock())
        with key_lock:
            with self._lock:
                conn = self._conns.get(key)
            if conn and conn.alive:
                return conn
            if conn:
                conn.close()
            conn = Connection(target, password)
            with self._lock:
                self._conns[key] = conn
            return conn

    def drop(self, host: str, user: str | None = None, port: int | None = None) -> None:
        target = resolve(host, user, port)
        with self._lock:
            conn = self._conns.pop((target.hostname, target.port, target.user), None)
        if conn:
            conn.close()

    def close(self) -> None:
        with self._lock:
            for conn in self._conns.values():
                conn.close()
            self._conns.clear()
