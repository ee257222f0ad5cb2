"""Drafts: records in the store saved compare-and-set on their version; the old draft.yaml migrated once; two real
browser tabs on one server never overwrite each other's edits silently."""

import re

import pytest
from playwright.sync_api import expect

from grpo_ui.jobs.drafts import latest_spec, open_draft
from grpo_ui.jobs.store import Store
from grpo_ui.spec.paths import with_changes
from grpo_ui.spec.presets import presets
from grpo_ui.spec.yaml_io import spec_to_yaml
from tests.browser import body_text, click, fill, nav, new_page, open_page, section, serve


def test_a_save_from_an_older_version_writes_nothing(tmp_path):
    store = Store(tmp_path / "db.sqlite")
    spec = next(iter(presets().values()))
    first = store.create_draft("a", spec_to_yaml(spec))
    assert store.save_draft(first, "name: one\n", 1) == 2
    assert store.save_draft(first, "name: two\n", 1) is None  # another editor saved version 2 meanwhile
    assert store.draft(first).spec_yaml == "name: one\n" and store.draft(first).version == 2
    store.delete_draft(first)
    assert store.save_draft(first, "name: three\n", 2) is None and store.drafts() == []


def test_the_old_draft_file_becomes_a_draft_once(tmp_path, monkeypatch):
    monkeypatch.setenv("GRPO_UI_HOME", str(tmp_path))
    spec = with_changes(next(iter(presets().values())), {"name": "old-one"})
    (tmp_path / "draft.yaml").write_text(spec_to_yaml(spec))
    draft, notice = open_draft(Store())
    assert notice is None and draft.name == "old-one" and draft.spec == spec
    assert (tmp_path / "draft.yaml.migrated").exists() and not (tmp_path / "draft.yaml").exists()
    open_draft(Store())
    assert [d.name for d in Store().drafts()] == ["old-one"] and latest_spec() == spec


def open_tab(browser, url):
    page = new_page(browser, 1440, 900)
    open_page(page, url)
    expect(page.get_by_text("GPU memory per device")).to_be_visible()
    return page


def set_text(page, label, value, tab="Batch & generation"):
    section(page, tab)
    fill(page, page.get_by_label(label, exact=True), value)


def field_value(page, label, tab="Batch & generation"):
    section(page, tab)
    return page.get_by_label(label, exact=True).input_value()


@pytest.fixture
def url(tmp_path):
    yield from serve(tmp_path, "127.0.0.1")


def test_two_tabs_on_one_draft_never_overwrite_each_other(browser, url, tmp_path):
    """Tab A and tab B open the same draft; A saves an edit; B's later edit is not saved over it: B is told the
    draft changed in another tab and keeps its edits as a new draft; then each tab edits its own draft."""
    a = open_tab(browser, url)
    first = re.search(r"draft=(\d+)", a.url).group(1)
    b = open_tab(browser, f"{url}/?draft={first}")
    set_text(a, "max_completion_length", "777")  # saved once its run has finished
    set_text(b, "temperature", "0.55")
    expect(b.get_by_text("was changed in another tab")).to_be_visible()
    assert Store(tmp_path / "db.sqlite").draft(int(first)).spec_yaml.count("max_completion_length: 777") == 1
    assert "temperature: 0.55" not in Store(tmp_path / "db.sqlite").draft(int(first)).spec_yaml
    click(b, b.get_by_role("button", name="Keep my edits as a new draft"))
    second = re.search(r"draft=(\d+)", b.url).group(1)
    assert second != first
    assert field_value(b, "temperature") == "0.55"
    # each tab on its own draft now: edits in both are saved, neither is told of a conflict
    set_text(a, "num_generations", "16")
    set_text(b, "max_completion_length", "333")
    for page in (a, b):
        assert "changed in another tab" not in body_text(page)
    store = Store(tmp_path / "db.sqlite")
    one, two = (store.draft(int(i)).spec_yaml for i in (first, second))
    assert "max_completion_length: 777" in one and "num_generations: 16" in one and "temperature: 0.55" not in one
    assert "temperature: 0.55" in two and "max_completion_length: 333" in two
    # Launch in tab B uses tab B's draft
    nav(b, "Launch")
    expect(b.get_by_text(f"Draft {store.draft(int(second)).name} (this tab's")).to_be_visible()


def test_drafts_are_created_switched_renamed_and_deleted_from_the_sidebar(tmp_path, monkeypatch):
    from streamlit.testing.v1 import AppTest

    from tests.pages import draft_of
    from tests.test_app import APP, field
    monkeypatch.setenv("GRPO_UI_HOME", str(tmp_path))
    at = AppTest.from_file(APP, default_timeout=60).run()
    first = at.selectbox(key="draft_pick").value
    field(at, "train.num_generations").set_value("16").run()
    at.selectbox(key="preset_choice").set_value("2-7b-full-8x80gb").run()
    next(b for b in at.button if b.label == "Start from this preset").click().run()
    second = at.selectbox(key="draft_pick").value
    assert second != first and field(at, "train.model").value == presets()["2-7b-full-8x80gb"].train.model
    at.text_input(key=f"draft_name:{second}").set_value(" full run ").run()
    assert Store().draft(second).name == "full run"
    at.selectbox(key="draft_pick").set_value(first).run()
    assert field(at, "train.num_generations").value == "16" and draft_of(at) == str(first)
    at.button(key="delete_draft").click().run()
    assert [d.id for d in Store().drafts()] == [second] and at.selectbox(key="draft_pick").value == second
