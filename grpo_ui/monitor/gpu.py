"""GPU telemetry: NVML on the dashboard's own machine, and one long-lived `nvidia-smi --query-gpu … -lms` channel
per remote host (restarted after a drop). Samples are plain dicts, one per GPU per tick."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

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


class SmiChannel:
    """A background reader of `nvidia-smi -lms` over ``open_stream()`` (an SSH exec channel's stdout lines),
    reopened with back-off when it ends or fails. ``on_sample`` receives each sample."""

    def __init__(self, host: str, open_stream: Callable[[str], object], on_sample: Callable[[dict], None],
                 interval_ms: int = 1000):
        self.host, self.open_stream, self.on_sample, self.interval_ms = host, open_stream, on_sample, interval_ms
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
            try:
                for line in self.open_stream(smi_command(self.interval_ms)):
                    if self._stop.is_set():
                        return
                    sample = parse_smi_line(line, self.host)
                    if sample:
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
