"""What the app's pages need that is not Streamlit: the autosaved draft and the presets (the form: grpo_ui.form)."""

from __future__ import annotations

import functools
import os
import time
from pathlib import Path

from grpo_ui.private import private_dir, private_file, write_private
from grpo_ui.spec import JobSpec, SpecError, spec_from_yaml, spec_to_yaml

PRESETS = Path(__file__).parent / "data" / "presets"


def home() -> Path:
    """The app's data directory (draft, database), 0700; GRPO_UI_HOME overrides it."""
    return private_dir(Path(os.environ.get("GRPO_UI_HOME", Path.home() / ".local/share/grpo-ui")))


def load_draft() -> JobSpec:
    """The config in progress (see open_draft)."""
    return open_draft()[0]


def open_draft() -> tuple[JobSpec, str | None]:
    """The config in progress, as autosaved, and None; the first preset when there is none. A draft that no longer
    loads (unreadable, not valid, an unknown key) is kept aside as a backup, never overwritten: the preset comes
    with a notice that names the backup and why."""
    path = home() / "draft.yaml"
    preset = next(iter(presets().values()))
    if not path.exists():
        return preset, None
    try:
        return spec_from_yaml(private_file(path).read_text(), str(path)), None
    except (OSError, UnicodeDecodeError, SpecError) as e:
        backup = path.with_name(f"draft-unreadable-{time.strftime('%Y%m%d-%H%M%S')}.yaml")
        path.replace(backup)
        return preset, (f"Your saved draft could not be loaded, so a preset was opened; the draft is kept as "
                        f"{backup}. Why: {e}")


def save_draft(spec: JobSpec) -> None:
    write_private(home() / "draft.yaml", spec_to_yaml(spec))


def presets() -> dict[str, JobSpec]:
    """The shipped presets by name (read once: the form asks on every rerun)."""
    return dict(_presets())


@functools.cache
def _presets() -> dict[str, JobSpec]:
    return {p.stem: spec_from_yaml(p.read_text(), p.name) for p in sorted(PRESETS.glob("*.yaml"))}
