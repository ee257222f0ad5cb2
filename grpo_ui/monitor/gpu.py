"""GPU telemetry: NVML on the dashboard's own machine, and long-lived nvidia-smi channels per remote host (restarted
after a drop): `--query-gpu … -lms` gives one sample dict per GPU per tick, `--query-compute-apps` one snapshot of
the processes holding GPU memory per tick."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

QUERY = "timestamp,index,name,utilization.gpu,memory.used,memory.total,power.draw,power.limit,temperature.gpu,clocks.sm"
FIELDS = ("util", "mem_used", "mem_total", "power", "power_limit", "temp", "sm_clock")


def smi_command(interval_ms: int = 1000) -> str:
    return f"nvidia-smi --query-gpu={QUERY} --format=csv,noheader,nounits -lms {interval_ms}"


def _num(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None  # "[N/A]", "[Not Supported]"


def parse_smi_line(line: str, host: str, now: float | None = None) -> dict | None:
    """One CSV line of QUERY → a sample (memory in MiB, power in W, clocks in MHz); None for other lines."""
    parts = [p.strip() for p in line.split(",")]
    if len(parts) != 10 or not parts[1].isdigit():
        return None
    sample = {"host": host, "gpu_index": int(parts[1]), "name": parts[2], "ts": now if now is not None else time.time()}
    sample.update(zip(FIELDS, map(_num, parts[3:]), strict=True))
    return sample


TICK = "# tick"
APPS_QUERY = "gpu_uuid,pid,used_memory"


def apps_command(interval_ms: int = 5000) -> str:
    """The GPU uuid → index map once, then the compute processes every interval, each listing closed by TICK (an
    empty listing is news too: the processes are gone)."""
    return (f"nvidia-smi --query-gpu=index,uuid --format=csv,noheader,nounits && while nvidia-smi "
            f"--query-compute-apps={APPS_QUERY} --format=csv,noheader,nounits; do echo '{TICK}'; "
            f"sleep {interval_ms / 1000:g}; done")


class AppsReader:
    """Lines of ``apps_command`` → at each TICK a snapshot ``{host, ts, processes: [{gpu_index, gpu_uuid, pid,
    used_mib}]}``; None for the lines in between."""

    def __init__(self, host: str):
        self.host = host
        self.index: dict[str, int] = {}
        self.rows: list[dict] = []

    def __call__(self, line: str) -> dict | None:
        if line.strip() == TICK:
            rows, self.rows = self.rows, []
            return {"host": self.host, "ts": time.time(), "processes": rows}
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 2 and parts[0].isdigit():
            self.index[parts[1]] = int(parts[0])
        elif len(parts) == 3 and parts[1].isdigit():
            self.rows.append({"gpu_index": self.index.get(parts[0]), "gpu_uuid": parts[0], "pid": int(parts[1]),
                              "used_mib": _num(parts[2])})
        return None


@dataclass(frozen=True)
class Query:
    """What a channel runs and how it reads the lines (a fresh reader per opened stream)."""

    command: Callable[[int], str]
    reader: Callable[[str], Callable[[str], dict | None]]


GPUS = Query(smi_command, lambda host: lambda line: parse_smi_line(line, host))
APPS = Query(apps_command, AppsReader)


class SmiChannel:
    """A background reader of an nvidia-smi query (``GPUS``: a sample per GPU per tick; ``APPS``: a process
    snapshot per tick) over ``open_stream(command)`` (an SSH exec channel's stdout lines), reopened with back-off
    when it ends or fails. ``on_sample`` receives what the reader returns."""

    def __init__(self, host: str, open_stream: Callable[[str], object], on_sample: Callable[[dict], None],
                 interval_ms: int = 1000, query: Query = GPUS):
        self.host, self.open_stream, self.on_sample, self.interval_ms = host, open_stream, on_sample, interval_ms
        self.query = query
        self.restarts = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True, name=f"smi-{host}")

    def start(self) -> SmiChannel:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def _loop(self) -> None:
        delay = 1.0
        while not self._stop.is_set():
            read = self.query.reader(self.host)
            try:
                for line in self.open_stream(self.query.command(self.interval_ms)):
                    if self._stop.is_set():
                        return
                    sample = read(line)
                    if sample is not None:
                        self.on_sample(sample)
                        delay = 1.0
            except Exception:  # noqa: BLE001 - a dropped connection: reopen below
                pass
            self.restarts += 1
            self._stop.wait(delay)
            delay = min(delay * 2, 30.0)


def nvml_samples(host: str = "localhost") -> list[dict]:
    """One sample per local GPU through NVML; [] when there is no NVIDIA driver."""
    try:
        import pynvml
        pynvml.nvmlInit()
    except Exception:  # noqa: BLE001 - no driver / no GPU
        return []
    out, now = [], time.time()
    try:
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            mem = pynvml.nvmlDeviceGetMemoryInfo(h)
            name = pynvml.nvmlDeviceGetName(h)
            out.append({"host": host, "gpu_index": i, "name": name.decode() if isinstance(name, bytes) else name,
                        "ts": now, "util": float(pynvml.nvmlDeviceGetUtilizationRates(h).gpu),
                        "mem_used": mem.used / 2**20, "mem_total": mem.total / 2**20,
                        "power": pynvml.nvmlDeviceGetPowerUsage(h) / 1000,
                        "power_limit": pynvml.nvmlDeviceGetEnforcedPowerLimit(h) / 1000,
                        "temp": float(pynvml.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU)),
                        "sm_clock": float(pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM))})
    finally:
        pynvml.nvmlShutdown()
    return out


def nvml_processes(host: str = "localhost") -> dict | None:
    """A process snapshot of the local GPUs through NVML (as ``AppsReader`` gives it); None without a driver."""
    try:
        import pynvml
        pynvml.nvmlInit()
    except Exception:  # noqa: BLE001 - no driver / no GPU
        return None
    rows = []
    try:
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            uuid = pynvml.nvmlDeviceGetUUID(h)
            for p in pynvml.nvmlDeviceGetComputeRunningProcesses(h):
                used = p.usedGpuMemory  # None where the driver does not say (e.g. no permission)
                rows.append({"gpu_index": i, "gpu_uuid": uuid.decode() if isinstance(uuid, bytes) else uuid,
                             "pid": p.pid, "used_mib": used / 2**20 if used is not None else None})
    finally:
        pynvml.nvmlShutdown()
    return {"host": host, "ts": time.time(), "processes": rows}
