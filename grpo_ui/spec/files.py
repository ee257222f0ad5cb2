"""The files a job names, which swift opens on every node relative to its working directory: a model, reference or
reward model given as a path, local datasets, plugin files, a system prompt kept in a .txt file, a DeepSpeed or FSDP
JSON file, a checkpoint to resume from. Which values are files follows ms-swift:

- a model is a local directory when its value starts with ``/``, ``.`` or ``~`` or has more than one ``/`` (a Hub id
  is ``owner/name``);
- a dataset is read with ms-swift's syntax ``path[:subset][#samples]`` and is a file when it starts with ``/``, ``.``
  or ``~`` or names a data file (.jsonl, .json, .csv, .parquet, .txt);
- every external plugin is a file; a system prompt ending in ``.txt`` is read from that file
  (TemplateArguments: "assert os.path.isfile(self.system)");
- deepspeed/fsdp are files unless a preset (zero0…zero3_offload, fsdp2) or inline JSON;
- resume_from_checkpoint is a directory.

Rules (a relative file with no working directory to find it in) and preflight (each file on each node) read this
one list.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass

from grpo_ui.spec.model import JobSpec
from grpo_ui.spec.swift_args import DEEPSPEED_PRESETS

DATA_SUFFIX = re.compile(r"\.(jsonl|json|csv|parquet|txt)$", re.IGNORECASE)


@dataclass(frozen=True)
class JobFile:
    """One file the job names: the field, the value as written, and the paths ms-swift may open for it."""

    field: str
    value: str
    candidates: tuple[str, ...]

    @property
    def relative(self) -> bool:
        return not self.value.startswith(("/", "~"))

    def on_node(self, workdir: str | None) -> tuple[str, ...]:
        """The paths as the node opens them: relative ones from ``workdir`` (the directory swift runs in)."""
        return tuple(c if c.startswith(("/", "~")) or not workdir else posixpath.join(workdir, c)
                     for c in self.candidates)


def _model_path(value: str) -> bool:
    return value.startswith(("/", ".", "~")) or value.count("/") > 1


def _dataset_candidates(value: str) -> tuple[str, ...] | None:
    """The paths ms-swift's dataset syntax may open (the whole value, the part before the last '#', that part before
    its first ':'), or None for a Hub dataset."""
    sampled = value.rsplit("#", 1)[0]
    plain = sampled.split(":", 1)[0]
    if not (value.startswith(("/", ".", "~")) or DATA_SUFFIX.search(sampled) or DATA_SUFFIX.search(plain)):
        return None
    return tuple(dict.fromkeys([value, sampled, plain]))


def _config_file(value: str | None, presets: tuple[str, ...]) -> bool:
    return bool(value) and value not in presets and not value.lstrip().startswith("{")


def job_files(spec: JobSpec) -> list[JobFile]:
    """Every file the job names, in field order."""
    t = spec.train
    out: list[JobFile] = []
    for path, value in [("train.model", t.model), ("train.ref_model", t.ref_model),
                        *(("train.reward_model", m) for m in t.reward_model or [])]:
        if value and _model_path(value):
            out.append(JobFile(path, value, (value,)))
    for path, values in (("train.dataset", t.dataset), ("train.val_dataset", t.val_dataset)):
        for value in values:
            if (candidates := _dataset_candidates(value)) is not None:
                out.append(JobFile(path, value, candidates))
    out += [JobFile("train.external_plugins", p, (p,)) for p in t.external_plugins]
    if t.system and t.system.endswith(".txt") and "\n" not in t.system:
        out.append(JobFile("train.system", t.system, (t.system,)))
    if _config_file(t.deepspeed, DEEPSPEED_PRESETS):
        out.append(JobFile("train.deepspeed", t.deepspeed, (t.deepspeed,)))
    if _config_file(t.fsdp, ("fsdp2",)):
        out.append(JobFile("train.fsdp", t.fsdp, (t.fsdp,)))
    if t.resume_from_checkpoint:
        out.append(JobFile("train.resume_from_checkpoint", t.resume_from_checkpoint, (t.resume_from_checkpoint,)))
    return out


def node_workdir(spec: JobSpec, index: int) -> str | None:
    """The directory node ``index``'s swift runs in when set (its own, else the cluster's); None: the run directory."""
    return spec.cluster.nodes[index].workdir or spec.cluster.workdir
