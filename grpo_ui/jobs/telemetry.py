"""GPU telemetry of running jobs, the same for every backend: for each node of a job, two nvidia-smi channels (a
sample per GPU each second, the processes holding GPU memory every five) through the backend's shell on the machine
that runs the node, keeping only the GPUs the job owns there (grpo_ui.backends.remote.gpu). The jobs service starts a
job's channels once it runs and stops them when it ends; pages only draw what lands in the store. Each sample also
lands in the job's running window (grpo_ui.doctor.gpu_window.GpuWindow), which the watcher's doctor pass reads instead
of the last five minutes of samples from the store.
"""

from __future__ import annotations

import atexit
import threading
import time

from grpo_ui.backends.base import Backend, Handle, NodeStatus
from grpo_ui.backends.remote.gpu import PROCESSES, SmiChannel
from grpo_ui.core import shell
from grpo_ui.doctor.gpu_window import DUTY_WINDOW_S, GpuWindow
from grpo_ui.jobs.store import Store


class Collector:
    """The channels of every job it follows, writing to the store."""

    def __init__(self, store: Store):
        self.store = store
        self._channels: dict[str, dict[int, list[SmiChannel]]] = {}
        self._windows: dict[str, GpuWindow] = {}
        self._lock = threading.Lock()
        atexit.register(self.close)  # a channel's command runs on the node: end it with this process

    def follow(self, job_id: str, backend: Backend, handle: Handle, nodes: list[NodeStatus]) -> None:
        """Start the channels of the job's running nodes that have none yet."""
        for node in nodes:
            with self._lock:
                followed = self._channels.setdefault(job_id, {})
                if node.state != "running" or not node.host or node.index in followed:
                    continue
                if job_id not in self._windows:  # what an earlier process stored of the window, once
                    self._windows[job_id] = GpuWindow(self.store.gpu_samples(job_id, time.time() - DUTY_WINDOW_S))
                followed[node.index] = self._open(job_id, backend, handle, node)

    def _open(self, job_id: str, backend: Backend, handle: Handle, node: NodeStatus) -> list[SmiChannel]:
        env = backend.spec.cluster.nodes[node.index].python_env  # where a conda env or module puts nvidia-smi
        path = f"export PATH={shell.path(env)}/bin:$PATH; " if env else ""

        def open_stream(command: str):  # in the channel's thread: a connection that fails is retried there
            return backend.node_shell(handle, node.index, node.host).stream(path + command)

        window = self._windows[job_id]

        def sampled(sample: dict) -> None:
            self.store.add_gpu_samples(job_id, [sample])
            window.add(sample)

        return [SmiChannel(node.host, open_stream, sampled).start(),
                SmiChannel(node.host, open_stream, lambda s: self.store.set_gpu_processes(job_id, s),
                           interval_ms=5000, query=PROCESSES).start()]

    def following(self, job_id: str) -> list[int]:
        """The nodes (indices) of the job whose GPUs are being sampled."""
        with self._lock:
            return sorted(self._channels.get(job_id, {}))

    def window(self, job_id: str) -> GpuWindow | None:
        """The job's GPU samples of the last DUTY_WINDOW_S with their duty cycles, while its GPUs are sampled."""
        with self._lock:
            return self._windows.get(job_id)

    def drop(self, job_id: str) -> None:
        with self._lock:
            channels = self._channels.pop(job_id, {})
            self._windows.pop(job_id, None)
        for pair in channels.values():
            for channel in pair:
                channel.stop()

    def close(self) -> None:
        for job_id in list(self._channels):
            self.drop(job_id)
