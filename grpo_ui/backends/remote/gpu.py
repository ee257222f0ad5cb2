"""GPUs as nvidia-smi (or NVML, on the dashboard's own machine) reports them: one reader of nvidia-smi's CSV rows
for preflight's inventory and the monitor's samples, and the long-lived channels that sample a job's GPUs on a node.

A channel runs ``sampler(query)`` through the backend's shell on the machine that runs the node: it prints the GPUs
the job owns there (CUDA_VISIBLE_DEVICES as the job's processes get it: indices or UUIDs; every GPU when unset), the
node's index → UUID map, then the query's rows every tick. Rows of GPUs the job does not own are dropped here, so
they never reach the store, the charts or the doctor. nvidia-smi numbers GPUs in PCI bus order, as CUDA does where
the GPUs are of one model (or with CUDA_DEVICE_ORDER=PCI_BUS_ID).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

# nvidia-smi query field → the name of its value in grpo-ui's rows (memory in MiB, power in W, clocks in MHz)
NAMES = {"timestamp": "timestamp", "index": "gpu_index", "uuid": "gpu_uuid", "gpu_uuid": "gpu_uuid", "name": "name",
         "utilization.gpu": "util", "memory.used": "mem_used", "memory.total": "mem_total", "power.draw": "power",
         "power.limit": "power_limit", "temperature.gpu": "temp", "clocks.sm": "sm_clock",
         "driver_version": "driver", "pid": "pid", "used_memory": "used_mib"}
TEXT = ("timestamp", "uuid", "gpu_uuid", "name", "driver_version")
WHOLE = ("index", "pid")
SAMPLE = ("timestamp", "index", "name", "utilization.gpu", "memory.used", "memory.total", "power.draw", "power.limit",
          "temperature.gpu", "clocks.sm")
INVENTORY = ("index", "uuid", "name", "memory.total", "memory.used", "driver_version")
UUIDS = ("index", "uuid")
APPS = ("gpu_uuid", "pid", "used_memory")
OWNED, TICK = "# owned", "# tick"


def query(fields: tuple[str, ...], of: str = "gpu") -> str:
    """The nvidia-smi command printing ``fields`` of every GPU (``of="compute-apps"``: of every GPU process)."""
    return f"nvidia-smi --query-{of}={','.join(fields)} --format=csv,noheader,nounits"


def _num(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None  # "[N/A]", "[Not Supported]"


def parse_row(line: str, fields: tuple[str, ...]) -> dict | None:
    """One CSV row of a query of ``fields`` → {name: value}; None for a line that is not one."""
    parts = [p.strip() for p in line.split(",")]
    if len(parts) != len(fields) or any(f in WHOLE and not p.isdigit() for f, p in zip(fields, parts, strict=True)):
        return None
    return {NAMES[f]: p if f in TEXT else int(p) if f in WHOLE else _num(p) for f, p in zip(fields, parts,
                                                                                         strict=True)}


def parse_smi_line(line: str, host: str, now: float | None = None) -> dict | None:
    """One sample row → a sample of ``host`` at ``now`` (default: the time it is read)."""
    row = parse_row(line, SAMPLE)
    if row is None:
        return None
    del row["timestamp"]
    return {"host": host, "ts": now if now is not None else time.time(), **row}


def sampler(interval_ms: int = 1000) -> str:
    """The job's GPUs and the UUID map, then a sample row per GPU every interval."""
    return (f'echo "{OWNED} ${{CUDA_VISIBLE_DEVICES-all}}"; {query(UUIDS)} && '
            f"{query(SAMPLE)} -lms {int(interval_ms)}")


def apps_sampler(interval_ms: int = 5000) -> str:
    """The job's GPUs and the UUID map, then the compute processes every interval, each listing closed by TICK (an
    empty listing is news too: the processes are gone)."""
    return (f'echo "{OWNED} ${{CUDA_VISIBLE_DEVICES-all}}"; {query(UUIDS)} && while {query(APPS, "compute-apps")}; '
            f"do echo '{TICK}'; sleep {interval_ms / 1000:g}; done")


class JobGpus:
    """Which GPUs of one node the job owns, learnt from a sampler's first lines (``learn``)."""

    def __init__(self):
        self.visible: list[str] | None = None  # None: every GPU (CUDA_VISIBLE_DEVICES unset, or not said)
        self.uuids: dict[str, int] = {}

    def learn(self, line: str) -> bool:
        """Take an OWNED or index/UUID line; False for any other line."""
        if line.startswith(OWNED):
            said = line[len(OWNED):].strip()
            self.visible = None if said == "all" else [v.strip() for v in said.split(",") if v.strip()]
            return True
        row = parse_row(line, UUIDS)
        if row is None or not row["gpu_uuid"].startswith("GPU-"):
            return False
        self.uuids[row["gpu_uuid"]] = row["gpu_index"]
        return True

    def owns(self, index: int | None) -> bool:
        """CUDA_VISIBLE_DEVICES entries are indices or (unique prefixes of) UUIDs; MIG instances are not matched."""
        if self.visible is None:
            return True
        return any(v == str(index) or (v.startswith("GPU-") and any(u.startswith(v) and i == index
                                                                       for u, i in self.uuids.items()))
                   for v in self.visible)


class SampleReader:
    """Lines of ``sampler`` → a sample dict per row of a GPU the job owns; None for the other lines."""

    def __init__(self, host: str):
        self.host, self.gpus = host, JobGpus()

    def __call__(self, line: str) -> dict | None:
        if self.gpus.learn(line):
            return None
        sample = parse_smi_line(line, self.host)
        return sample if sample and self.gpus.owns(sample["gpu_index"]) else None


class AppsReader:
    """Lines of ``apps_sampler`` → at each TICK a snapshot ``{host, ts, processes: [{gpu_index, gpu_uuid, pid,
    used_mib}]}`` of the GPUs the job owns; None for the lines in between."""

    def __init__(self, host: str):
        self.host, self.gpus = host, JobGpus()
        self.rows: list[dict] = []

    def __call__(self, line: str) -> dict | None:
        if line.strip() == TICK:
            rows, self.rows = self.rows, []
            return {"host": self.host, "ts": time.time(), "processes": rows}
        if self.gpus.learn(line):
            return None
        row = parse_row(line, APPS)
        if row:
            row["gpu_index"] = self.gpus.uuids.get(row["gpu_uuid"])
            if self.gpus.owns(row["gpu_index"]):
                self.rows.append(row)
        return None


@dataclass(frozen=True)
class Query:
    """What a channel runs and how it reads the lines (a fresh reader per opened stream)."""

    command: Callable[[int], str]
    reader: Callable[[str], Callable[[str], dict | None]]


GPUS = Query(sampler, SampleReader)
PROCESSES = Query(apps_sampler, AppsReader)


class SmiChannel:
    """A background reader of a sampler (``GPUS``: a sample per owned GPU per tick; ``PROCESSES``: a process
    snapshot per tick) over ``open_stream(command)`` (its output lines; closed on ``stop`` when it can be), reopened
    with back-off when it ends or fails. ``on_sample`` receives what the reader returns."""

    def __init__(self, host: str, open_stream: Callable[[str], object], on_sample: Callable[[dict], None],
                 interval_ms: int = 1000, query: Query = GPUS):
        self.host, self.open_stream, self.on_sample, self.interval_ms = host, open_stream, on_sample, interval_ms
        self.query = query
        self.restarts = 0
        self._stop = threading.Event()
        self._stream = None
        self._thread = threading.Thread(target=self._loop, daemon=True, name=f"smi-{host}")

    def start(self) -> SmiChannel:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._close()

    def _close(self) -> None:
        stream, self._stream = self._stream, None
        if hasattr(stream, "close"):
            stream.close()

    def _loop(self) -> None:
        delay = 1.0
        while not self._stop.is_set():
            read = self.query.reader(self.host)
            try:
                self._stream = self.open_stream(self.query.command(self.interval_ms))
                if self._stop.is_set():  # stopped while it opened
                    return self._close()
                for line in self._stream:
                    if self._stop.is_set():
                        return
                    sample = read(line)
                    if sample is not None:
                        self.on_sample(sample)
                        delay = 1.0
            except Exception:  # noqa: BLE001 - a dropped connection, or the stream closed by stop: reopen below
                pass
            self._close()
            self.restarts += 1
            self._stop.wait(delay)
            delay = min(delay * 2, 30.0)


def nvml_inventory() -> tuple[list[dict], str, str] | None:
    """This machine's GPUs through NVML, as rows of an INVENTORY query with their compute processes ({pid,
    used_mib}), the driver version and the newest CUDA it supports; None without nvidia-ml-py, a driver or a GPU."""
    try:
        import pynvml
        pynvml.nvmlInit()
    except Exception:  # noqa: BLE001 - no nvidia-ml-py, no driver, no GPU
        return None
    try:
        gpus = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            mem = pynvml.nvmlDeviceGetMemoryInfo(h)
            procs = [{"pid": p.pid, "used_mib": (p.usedGpuMemory or 0) / 2**20}
                     for p in pynvml.nvmlDeviceGetComputeRunningProcesses(h)]
            gpus.append({"gpu_index": i, "gpu_uuid": _text(pynvml.nvmlDeviceGetUUID(h)),
                         "name": _text(pynvml.nvmlDeviceGetName(h)), "mem_total": mem.total / 2**20,
                         "mem_used": mem.used / 2**20, "processes": procs})
        cuda = pynvml.nvmlSystemGetCudaDriverVersion()  # e.g. 12040
        return gpus, _text(pynvml.nvmlSystemGetDriverVersion()), f"{cuda // 1000}.{cuda % 1000 // 10}"
    except pynvml.NVMLError:
        return None
    finally:
        pynvml.nvmlShutdown()


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else value
