"""Job drafts: the configs being edited, each a record in the store (named, listed, switchable, deleted explicitly).

Every browser tab edits one draft (the page keeps its id in the tab's URL); a save is compare-and-set on the draft's
version, so a tab that loaded an older version is told the draft changed elsewhere instead of overwriting it. The
single draft.yaml of earlier versions becomes the first draft, once (the file is kept aside).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from grpo_ui.core.private import home, private_file
from grpo_ui.jobs.store import Store
from grpo_ui.spec.errors import SpecError
from grpo_ui.spec.model import JobSpec
from grpo_ui.spec.presets import presets
from grpo_ui.spec.yaml_io import spec_from_yaml, spec_to_yaml


@dataclass(frozen=True)
class Draft:
    id: int
    name: str
    spec: JobSpec
    version: int


def _draft(row: dict) -> Draft:
    return Draft(row.id, row.name, spec_from_yaml(row.spec_yaml, f"draft {row.name!r}"), row.version)


def migrate_draft_file(store: Store) -> str | None:
    """The old single draft.yaml as a draft (its text as it is, comments kept), the file renamed draft.yaml.migrated;
    one that no longer loads is kept aside as draft-unreadable-<time>.yaml instead: the notice says so and why."""
    path = home() / "draft.yaml"
    if not path.exists():
        return None
    try:
        text = private_file(path).read_text()
        spec = spec_from_yaml(text, str(path))
    except (OSError, UnicodeDecodeError, SpecError) as e:
        backup = path.with_name(f"draft-unreadable-{time.strftime('%Y%m%d-%H%M%S')}.yaml")
        path.replace(backup)
        return (f"Your saved draft could not be loaded, so a preset was opened; the draft is kept as {backup}. "
                f"Why: {e}")
    store.create_draft(spec.name, text)
    path.replace(path.with_name("draft.yaml.migrated"))
    return None


def open_draft(store: Store, draft_id: int | None = None) -> tuple[Draft, str | None]:
    """The draft ``draft_id`` (else the latest saved; else a new one from the first preset) and a notice for the
    user, or None. A draft that no longer loads is left as it is and another one is opened, with a notice."""
    notice = migrate_draft_file(store)
    rows = store.drafts()
    wanted = next((r for r in rows if r.id == draft_id), None)
    if draft_id is not None and wanted is None:
        notice = f"Draft {draft_id} no longer exists (deleted?): the latest draft is open instead."
    for row in [wanted] * (wanted is not None) + rows:
        try:
            return _draft(row), notice
        except SpecError as e:
            notice = f"Draft {row.name!r} (id {row.id}) no longer loads, so another one is open. Why: {e}"
    name, spec = next(iter(presets().items()))
    return new_draft(store, name, spec), notice


def new_draft(store: Store, name: str, spec: JobSpec) -> Draft:
    return Draft(store.create_draft(name, spec_to_yaml(spec)), name, spec, 1)


def latest_spec(store: Store | None = None) -> JobSpec:
    """The spec of the draft saved last (what the CLI and tests read back)."""
    return open_draft(store or Store())[0].spec
