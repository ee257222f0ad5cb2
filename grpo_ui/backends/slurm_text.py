"""Reading what Slurm's commands print: ``scontrol show job -o`` records, ``sinfo`` node lines and GRES strings, and
Slurm job states in grpo-ui's words. Pure functions, no I/O (formats as Slurm 22.05 prints them)."""

from __future__ import annotations

import re
from dataclasses import dataclass

# Slurm job states (squeue(1), JOB STATE CODES) → grpo-ui's job states.
QUEUED = {"PENDING", "CONFIGURING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD"}
RUNNING = {"RUNNING", "COMPLETING", "SUSPENDED", "STOPPED", "SIGNALING", "STAGE_OUT", "RESIZING"}
FAILED = {"FAILED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE", "PREEMPTED", "REVOKED",
          "SPECIAL_EXIT"}
# sinfo's compact node states a job can still be scheduled on (sinfo(1), NODE STATE CODES).
USABLE_NODE = {"idle", "mix", "alloc", "comp", "resv", "plnd", "boot", "blocked"}
_FIELD = re.compile(r"(?:^|\s)([A-Za-z][\w:/]*)=(\S*)")
_SRUN_TASK = re.compile(r"^srun: error: \S+: tasks? (\d+)(?:-\d+)?: (.+)$", re.MULTILINE)


def job_state(slurm_state: str) -> str:
    """A Slurm job state → queued / running / succeeded / failed / stopped."""
    if slurm_state in QUEUED:
        return "queued"
    if slurm_state in RUNNING:
        return "running"
    if slurm_state == "COMPLETED":
        return "succeeded"
    if slurm_state == "CANCELLED":
        return "stopped"
    return "failed"  # FAILED and the rest: anything else means it did not finish well


def records(text: str) -> list[dict[str, str]]:
    """``scontrol show job -o`` output → one dict per line (per component of a heterogeneous job)."""
    return [dict(_FIELD.findall(line)) for line in text.splitlines() if line.startswith("JobId=")]


def exit_code(value: str) -> tuple[int, int]:
    """scontrol's ExitCode ``code:signal`` → (code, signal)."""
    code, _, signal = value.partition(":")
    return int(code or 0), int(signal or 0)


def gres_gpus(gres: str) -> int:
    """GPUs in a GRES string as sinfo prints it: ``gpu:8``, ``gpu:a100:4(S:0-1),gpu:v100:2``, ``(null)`` → 0."""
    total = 0
    for entry in re.sub(r"\([^)]*\)", "", gres).split(","):
        parts = entry.strip().split(":")
        if parts[0] == "gpu":
            total += int(parts[-1]) if len(parts) > 1 and parts[-1].isdigit() else 1
    return total


@dataclass(frozen=True)
class SlurmNode:
    name: str
    partition: str       # without the default partition's '*'
    default: bool        # in the cluster's default partition
    gpus: int
    state: str           # sinfo's compact state, e.g. idle, mix, drain, down*

    @property
    def usable(self) -> bool:
        """Up and schedulable: not down, drained, failing or not responding (a trailing '*')."""
        return not self.state.endswith("*") and self.state.rstrip("~#!%$@^-") in USABLE_NODE


def sinfo_nodes(text: str) -> list[SlurmNode]:
    """``sinfo -h -N -o '%N|%P|%G|%t'`` lines → nodes (a node in two partitions appears twice)."""
    nodes = []
    for line in text.splitlines():
        parts = line.strip().split("|")
        if len(parts) == 4:
            name, part, gres, state = parts
            nodes.append(SlurmNode(name, part.rstrip("*"), part.endswith("*"), gres_gpus(gres), state))
    return nodes


def srun_task_error(text: str) -> tuple[int, str] | None:
    """The first task srun reported as failed in a batch script's output (``srun: error: n2: task 1: Killed``):
    (task id, what happened). With one task per node, the task id is the node id."""
    m = _SRUN_TASK.search(text)
    return (int(m[1]), m[2].strip()) if m else None
