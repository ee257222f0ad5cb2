"""What the app's pages need that is not Streamlit: the data directory and the presets (drafts: grpo_ui.drafts;
the form: grpo_ui.form)."""

from __future__ import annotations

import functools
import os
from pathlib import Path

from grpo_ui.private import private_dir
from grpo_ui.spec import JobSpec, spec_from_yaml

PRESETS = Path(__file__).parent / "data" / "presets"


def home() -> Path:
    """The app's data directory (the database, which holds the drafts), 0700; GRPO_UI_HOME overrides it."""
    return private_dir(Path(os.environ.get("GRPO_UI_HOME", Path.home() / ".local/share/grpo-ui")))


def presets() -> dict[str, JobSpec]:
    """The shipped presets by name (read once: the form asks on every rerun)."""
    return dict(_presets())


@functools.cache
def _presets() -> dict[str, JobSpec]:
    return {p.stem: spec_from_yaml(p.read_text(), p.name) for p in sorted(PRESETS.glob("*.yaml"))}
