"""One interface for a node, remote over SSH or the dashboard's own machine: run a command, follow a long-running
one's output, write a file, read bytes."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Protocol

import paramiko

from grpo_ui.backends.remote.ssh import Connection, Pool, Result, SshError
from grpo_ui.core import shell
from grpo_ui.spec.cluster import Node


class Runner(Protocol):
    host: str

    def run(self, command: str, timeout: float = 30.0, stdin: bytes | None = None) -> Result: ...

    def write(self, path: str, text: str, mode: int = 0o644) -> None: ...

    def read(self, path: str, offset: int, limit: int) -> bytes: ...

    def stream(self, command: str) -> Stream: ...


class Stream:
    """The output lines of a long-running command until it ends, or until ``close`` ends it (from any thread)."""

    def __init__(self, lines: Iterator[str], close: Callable[[], None]):
        self._lines, self._close = lines, close

    def __iter__(self) -> Iterator[str]:
        return self._lines

    def close(self) -> None:
        self._close()


# Over SSH a command outlives a closed channel unless it notices: run it in a session of its own and end that
# session once the channel's input closes (which closing the channel does), or when the command ends by itself.
_TIED = 'setsid bash --norc -c {} < /dev/null & p=$!; {{ read -r _; kill -TERM -- -$p; }} > /dev/null 2>&1 & wait $p'


def local_path(path: str) -> Path:
    """``~/…`` and relative paths start at the home directory, as they do over SSH and in the node scripts."""
    return Path.home() / Path(os.path.expanduser(path))


class LocalRunner:
    """The dashboard's own machine: bash and plain files, no SSH."""

    def __init__(self, host: str = "localhost"):
        self.host = host

    def run(self, command: str, timeout: float = 30.0, stdin: bytes | None = None) -> Result:
        try:
            p = subprocess.run(["bash", "-c", command], capture_output=True, timeout=timeout,
                               input=stdin if stdin is not None else b"", cwd=Path.home())  # where SSH logins start
        except subprocess.TimeoutExpired:
            raise SshError(self.host, f"command timed out after {timeout:.0f} s") from None
        return Result(p.returncode, p.stdout.decode(errors="replace"), p.stderr.decode(errors="replace"))

    def write(self, path: str, text: str, mode: int = 0o644) -> None:
        p = local_path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.chmod(p, mode)

    def read(self, path: str, offset: int, limit: int) -> bytes:
        try:
            with open(local_path(path), "rb") as f:
                f.seek(offset)
                return f.read(limit)
        except FileNotFoundError:
            return b""

    def stream(self, command: str) -> Stream:
        p = subprocess.Popen(["bash", "-c", command], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, text=True, cwd=Path.home(), start_new_session=True)

        def close():
            try:
                os.killpg(p.pid, signal.SIGTERM)  # srun, for one, ends its job step on SIGTERM
                p.wait(10)
            except ProcessLookupError:  # ended by itself: nothing to end
                p.wait()
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
            finally:
                p.stdout.close()
        return Stream(iter(p.stdout.readline, ""), close)


class SshRunner:
    """A remote node over a pooled SSH connection; paths starting with ~/ are relative to the login's home."""

    def __init__(self, conn: Connection):
        self.conn = conn
        self.host = conn.target.alias

    @staticmethod
    def _sftp_path(path: str) -> str:
        return path[2:] if path.startswith("~/") else path

    def run(self, command: str, timeout: float = 30.0, stdin: bytes | None = None) -> Result:
        return self.conn.run(command, timeout, stdin)

    def write(self, path: str, text: str, mode: int = 0o644) -> None:
        sftp = self.conn.sftp()
        p = self._sftp_path(path)
        try:
            with sftp.open(p, "w") as f:
                f.chmod(mode)  # before the content: a secrets file is never readable by others
                f.write(text)
        except OSError as e:
            raise SshError(self.host, f"cannot write {path}: {e}") from None

    def read(self, path: str, offset: int, limit: int) -> bytes:
        try:
            with self.conn.sftp().open(self._sftp_path(path), "rb") as f:
                f.seek(offset)
                return f.read(limit)
        except FileNotFoundError:
            return b""
        except (OSError, EOFError, paramiko.SSHException) as e:  # a dropped connection is not a traceback
            raise SshError(self.host, f"cannot read {path}: {e or type(e).__name__}") from None

    def stream(self, command: str) -> Stream:
        try:
            channel = self.conn.client.get_transport().open_session(timeout=30)
            channel.exec_command(_TIED.format(shell.quote(command)))
        except (OSError, AttributeError, paramiko.SSHException) as e:  # no transport: the connection is gone
            raise SshError(self.host, f"cannot run {command.split()[0]}: {e or type(e).__name__}") from None
        out = channel.makefile("r")
        return Stream(iter(out.readline, ""), channel.close)


class Wrapped:
    """A runner whose commands go through ``wrap`` first (an environment to set, a job step to run in); files are
    the inner runner's."""

    def __init__(self, inner: Runner, wrap: Callable[[str], str]):
        self.inner, self.wrap, self.host = inner, wrap, inner.host

    def run(self, command: str, timeout: float = 30.0, stdin: bytes | None = None) -> Result:
        return self.inner.run(self.wrap(command), timeout, stdin)

    def stream(self, command: str) -> Stream:
        return self.inner.stream(self.wrap(command))

    def write(self, path: str, text: str, mode: int = 0o644) -> None:
        self.inner.write(path, text, mode)

    def read(self, path: str, offset: int, limit: int) -> bytes:
        return self.inner.read(path, offset, limit)


def runner_for(node: Node, pool: Pool, password: str | None = None) -> Runner:
    if node.is_local:
        return LocalRunner(node.host)
    return SshRunner(pool.get(node.host, node.user, node.port, node.identity_file, password))


def parallel(fn, items):
    """fn over items concurrently, one thread per item; returns [(item, result or exception)]."""
    def safe(item):
        try:
            return fn(item)
        except Exception as e:  # noqa: BLE001 - reported per host to the caller
            return e
    with ThreadPoolExecutor(max_workers=max(len(items), 1)) as ex:
        return list(zip(items, ex.map(safe, items), strict=True))
