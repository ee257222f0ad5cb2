"""The shipped presets: ready job specs to start a draft from (knowledge/data/presets/*.yaml)."""

from __future__ import annotations

import functools
from pathlib import Path

from grpo_ui.spec.model import JobSpec
from grpo_ui.spec.yaml_io import spec_from_yaml

PRESETS = Path(__file__).parents[1] / "knowledge" / "data" / "presets"


def presets() -> dict[str, JobSpec]:
    """The shipped presets by name (read once: the form asks on every rerun)."""
    return dict(_presets())


@functools.cache
def _presets() -> dict[str, JobSpec]:
    return {p.stem: spec_from_yaml(p.read_text(), p.name) for p in sorted(PRESETS.glob("*.yaml"))}
