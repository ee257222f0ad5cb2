"""How a job asks Slurm for its allocation (SlurmSpec), and which extra #SBATCH lines it may carry."""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict, field_validator

from grpo_ui.spec.fields import setting

# Options a job's extra #SBATCH lines may not set: grpo-ui writes them itself, or a field of its own sets them.
SBATCH_OWN = {
    "nodes": "the number of trainer nodes", "ntasks": "one task per node", "ntasks-per-node": "one task per node",
    "output": "the per-node logs in the run directory", "error": "the per-node logs in the run directory",
    "job-name": "the job id", "chdir": "the run directory", "array": "one job per launch", "wrap": "the batch script",
    "parsable": "the submission", "partition": "slurm.partition", "account": "slurm.account", "qos": "slurm.qos",
    "time": "slurm.time_limit", "gres": "slurm.gpus_per_node", "gpus": "slurm.gpus_per_node",
    "gpus-per-node": "slurm.gpus_per_node", "constraint": "slurm.constraint", "cpus-per-task": "slurm.cpus_per_task",
}
SBATCH_SHORT = {"N": "nodes", "n": "ntasks", "o": "output", "e": "error", "J": "job-name", "D": "chdir", "a": "array",
                "p": "partition", "A": "account", "q": "qos", "t": "time", "G": "gpus", "C": "constraint",
                "c": "cpus-per-task"}
SBATCH_LINE = re.compile(r"^--([A-Za-z][A-Za-z0-9-]*)(?=[= ]|$)|^-([A-Za-z])")  # the option's long or short name
_NAME = (re.compile(r"^[A-Za-z0-9_.-]+$"), "letters, digits, '.', '_' and '-'")
SLURM_TEXT = {  # field → (what sbatch takes, said in words)
    "partition": (re.compile(r"^[A-Za-z0-9_.-]+(,[A-Za-z0-9_.-]+)*$"), "a name, or names separated by ','"),
    "account": _NAME, "qos": _NAME,
    "time_limit": (re.compile(r"^(\d+-\d+(:\d+){0,2}|\d+(:\d+){0,2}|UNLIMITED|INFINITE)$"),
                   "minutes, HH:MM:SS or D-HH:MM:SS"),
    "constraint": (re.compile(r"^[A-Za-z0-9_.,:&|!*\[\]()-]+$"), "feature names joined by & | , ( ) [ ] *"),
}


def sbatch_option(line: str) -> str:
    """One extra #SBATCH line → the option text sbatch reads (``#SBATCH`` prefix dropped); ValueError says why not."""
    text = line.strip().removeprefix("#SBATCH").strip()
    m = SBATCH_LINE.match(text)
    if not m or "#" in text or not text.isprintable():
        raise ValueError(f"{line!r} is not one sbatch option (e.g. --mem=64G or --exclusive)")
    name = m[1] or SBATCH_SHORT.get(m[2], m[2])
    own = next((o for o in SBATCH_OWN if o.startswith(name)), None)  # sbatch takes unambiguous prefixes (--part)
    if own:
        raise ValueError(f"{line!r}: grpo-ui sets --{own} from {SBATCH_OWN[own]}; remove the line")
    return text


class SlurmSpec(BaseModel):
    """How the job asks Slurm for its allocation (cluster.backend slurm)."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)
    partition: str | None = setting(None, "Partition (-p); empty: the cluster's default partition.", applies="slurm")
    account: str | None = setting(None, "Account charged for the job (-A).", applies="slurm")
    qos: str | None = setting(None, "Quality of service (--qos).", applies="slurm")
    time_limit: str | None = setting(None, "Wall-clock limit (-t): minutes, HH:MM:SS or D-HH:MM:SS; the job ends as "
                                     "TIMEOUT when it passes.", applies="slurm")
    gpus_per_node: int | None = setting(None, "GPUs requested per node (--gres=gpu:N); empty: the trainer nodes' GPU "
                                        "count; 0 asks for none (a CPU partition).", applies="slurm", ge=0, le=128)
    cpus_per_task: int | None = setting(None, "CPUs for each node's task, torchrun and its workers "
                                        "(--cpus-per-task); empty: the partition's default.", applies="slurm", ge=1,
                                        le=4096)
    constraint: str | None = setting(None, "Node features the machines must have (-C), e.g. a100|h100.",
                                     applies="slurm")
    extra_sbatch: list[str] = setting([], "More #SBATCH lines, one option each (e.g. --exclusive, --mem=0, "
                                      "--reservation=ml).", applies="slurm", widget="lines")

    @field_validator("partition", "account", "qos", "time_limit", "constraint")
    @classmethod
    def _text_ok(cls, v: str | None, info) -> str | None:
        pattern, form = SLURM_TEXT[info.field_name]
        if v is not None and not pattern.match(v):
            raise ValueError(f"{v!r} is not a Slurm {info.field_name.replace('_', ' ')}: use {form}")
        return v

    @field_validator("extra_sbatch")
    @classmethod
    def _lines_ok(cls, v: list[str]) -> list[str]:
        problems = []
        for i, line in enumerate(v):
            try:
                sbatch_option(line)
            except ValueError as e:
                problems.append(f"line {i + 1}: {e}")
        if problems:
            raise ValueError("; ".join(problems))
        return v
