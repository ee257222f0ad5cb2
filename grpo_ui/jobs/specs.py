"""A stored job's spec, parsed and resolved once: a job's spec never changes once it is stored, so the Monitor's
poll every few seconds, the watcher and the jobs service ask here instead of parsing its YAML and resolving it
again (cached by the stored text)."""

from __future__ import annotations

import functools

from grpo_ui.jobs.store import Job
from grpo_ui.spec.resolve import Resolved, resolve
from grpo_ui.spec.yaml_io import spec_from_yaml


@functools.lru_cache(maxsize=64)
def stored_job(spec_yaml: str) -> Resolved:
    """The effective values (and, as .spec, the spec) of a job stored with this YAML text."""
    return resolve(spec_from_yaml(spec_yaml))


def job_spec(job: Job) -> Resolved:
    """The effective values of a stored job."""
    return stored_job(job.spec_yaml)
