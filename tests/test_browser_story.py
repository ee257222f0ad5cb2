"""Issue 26 in a real browser (Debian's Chromium at 1440 × 900, as the new user tried it): a refused import is
shown where the script was pasted and at the top of the page, and makes no draft unless asked; nothing of the
memory metrics or the make-it-fit cards is cut (measured: no element's content is wider than its box); YAML is
shown by a YAML lexer, so the '#1000' of a dataset is no comment. Screenshots go to build/screenshots/."""

import re

import pytest
from playwright.sync_api import expect

from grpo_ui.jobs.store import Store
from grpo_ui.spec.paths import with_changes
from grpo_ui.spec.presets import presets
from grpo_ui.spec.yaml_io import spec_to_yaml
from tests.browser import choose, click, fill, nav, new_page, open_page, serve, shot
from tests.test_import_scripts import UNCLOSED

pytestmark = pytest.mark.slow
ROLLOUT = list(presets().values())[2]  # server mode with a rollout node: a trainer and a rollout GPU metric
TIGHT = with_changes(ROLLOUT, {"train.per_device_train_batch_size": 8})  # make-it-fit cards shown


@pytest.fixture
def page(browser):
    return new_page(browser, 1440, 900)


def app_with(tmp_path, spec):
    home = tmp_path / "home"
    home.mkdir()
    (home / "draft.yaml").write_text(spec_to_yaml(spec))
    return serve(tmp_path, "127.0.0.1", GRPO_UI_HOME=str(home))


@pytest.fixture
def app(tmp_path):
    yield from app_with(tmp_path, ROLLOUT)


@pytest.fixture
def tight_app(tmp_path):
    yield from app_with(tmp_path, TIGHT)


def test_a_refused_import_shows_where_it_was_pasted_and_makes_no_draft_unless_asked(app, page, tmp_path):
    open_page(page, app)
    sidebar = page.get_by_test_id("stSidebarUserContent")
    fill(page, sidebar.get_by_label("…or paste it"), UNCLOSED, send="Control+Enter")  # as a text area sends it
    importing = sidebar.get_by_role("button", name="Import", exact=True)
    expect(importing).to_be_enabled()
    click(page, importing)
    expect(sidebar.get_by_text(re.compile(r"line 5, --system: the ' that opens its value never closes"))).to_be_visible()
    main = page.get_by_test_id("stMain")
    expect(main.get_by_text("Import refused: no draft was made.")).to_be_visible()
    assert len(Store(str(tmp_path / "db.sqlite")).drafts()) == 1  # the one the page opened with
    click(page, main.get_by_role("button", name="Keep what could be read as a draft"))
    expect(main.get_by_text("This draft is a partial import.")).to_be_visible()
    expect(page.get_by_role("button", name="Download job YAML")).to_be_disabled()
    assert len(Store(str(tmp_path / "db.sqlite")).drafts()) == 2
    shot(page, "import-partial")


OVERFLOW = """roots => roots.flatMap(root => [root, ...root.querySelectorAll('*')])
    .filter(e => e.clientWidth > 0 && e.scrollWidth > e.clientWidth + 1)
    .map(e => `${e.tagName}.${e.getAttribute('data-testid') || ''} "${e.textContent.slice(0, 40)}" `
              + `${e.scrollWidth} > ${e.clientWidth}`)"""


def test_nothing_of_the_metrics_or_the_cards_is_cut_at_1440_by_900(tight_app, page):
    open_page(page, tight_app)
    verdict = page.get_by_test_id("stMetric").filter(has_text="Verdict")
    metrics = page.get_by_test_id("stHorizontalBlock").filter(has=verdict).get_by_test_id("stMetric")
    expect(metrics).to_have_count(3)  # the verdict, the trainer GPU, the rollout GPU (the time panel's are below)
    cards = page.get_by_test_id("stColumn").filter(has=page.get_by_role("button", name="Make it fit: apply"))
    expect(cards.first).to_be_visible()
    assert cards.count() >= 2
    cut = metrics.evaluate_all(OVERFLOW) + cards.evaluate_all(OVERFLOW)
    assert not cut, cut
    for text in metrics.all_inner_texts():
        assert "…" not in text and re.search(r"\d+\.\d GiB|TIGHT|FITS|OOM", text), text
    metrics.first.scroll_into_view_if_needed()
    shot(page, "configure-metrics-1440")


def test_yaml_is_shown_by_a_yaml_lexer_that_keeps_a_hash_inside_a_value(app, page):
    open_page(page, app)
    nav(page, "Launch")
    choose(page, "File", "swift_0.yaml")
    shown = page.get_by_test_id("yaml-code")
    expect(shown).to_contain_text("AI-MO/NuminaMath-TIR#")
    commented = shown.locator("span").evaluate_all(
        "spans => spans.filter(s => getComputedStyle(s).color === 'rgb(110, 119, 129)' || "
        "s.className.includes('comment')).map(s => s.textContent)")
    assert not [c for c in commented if "NuminaMath" in c or re.match(r"#\d", c)], commented
