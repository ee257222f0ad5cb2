"""The first hour's visual defects (issue 32) in Debian's Chromium at 1440 × 900, the width a new user met them at:
flag names in the make-it-fit and make-it-faster cards break only between their words, and the cluster tables show
each node's host, role, GPUs and GPU model whole, without a sideways scroll hiding them. Each page waits for its run
(tests/browser.py); what is measured is the browser's own layout."""

import pytest
from playwright.sync_api import expect

from grpo_ui.importer import import_scripts
from grpo_ui.spec.paths import with_changes
from grpo_ui.spec.presets import presets
from grpo_ui.spec.yaml_io import spec_to_yaml
from tests.browser import nav, new_page, open_page, serve
from tests.test_example_findings import EXAMPLES

pytestmark = pytest.mark.slow
FIRST = next(iter(presets().values()))
H100 = "NVIDIA H100 80GB HBM3"
# The characters after which a line of a code element breaks (a new line's first character sits lower than the
# one before it): a break inside a word is the defect.
LINE_BREAKS = """e => { const breaks = []; let top = null, last = null;
    const walk = document.createTreeWalker(e, NodeFilter.SHOW_TEXT);
    for (let n = walk.nextNode(); n; n = walk.nextNode()) {
        for (let i = 0; i < n.length; i++) {
            const r = document.createRange(); r.setStart(n, i); r.setEnd(n, i + 1);
            const y = r.getBoundingClientRect().top;
            if (top !== null && y > top + 2) breaks.push(last);
            top = y; last = n.data[i];
        }
    }
    return breaks; }"""
HEADERS = "e => [...e.querySelectorAll('th')].map(th => th.textContent)"  # the columns the grid draws, in view
SIDEWAYS = "e => { const s = e.querySelector('.dvn-scroller'); return s.scrollWidth - s.clientWidth; }"


def app_with(tmp_path, spec):
    home = tmp_path / "home"
    home.mkdir()
    (home / "draft.yaml").write_text(spec_to_yaml(spec))
    yield from serve(tmp_path, "127.0.0.1", GRPO_UI_HOME=str(home))


@pytest.fixture
def oom_app(tmp_path):
    """The 24 GB preset with LoRA rank 256 and vLLM at 0.9: out of memory, three make-it-fit cards on
    rollout.vllm_gpu_memory_utilization, a name wider than a card."""
    yield from app_with(tmp_path, with_changes(FIRST, {"train.lora_rank": 256,
                                                      "rollout.vllm_gpu_memory_utilization": 0.9}))


@pytest.fixture
def two_node_app(tmp_path):
    """ms-swift's two-node colocate pair as imported, on H100s."""
    spec = import_scripts([(p.name, p.read_bytes()) for p in sorted((EXAMPLES / "two_node_colocate").iterdir())])[0]
    yield from app_with(tmp_path, with_changes(spec, {f"cluster.nodes[{i}].gpu_model": H100 for i in range(2)}))


def test_flag_names_in_the_cards_break_only_between_words(oom_app, browser):
    page = new_page(browser, 1440, 900)
    open_page(page, oom_app)
    cards = page.get_by_test_id("stColumn").filter(has=page.get_by_role("button", name="Make it fit: apply"))
    expect(cards).to_have_count(3)
    names = cards.locator("code").filter(has_text="rollout.vllm_gpu_memory_utilization")
    expect(names).to_have_count(3)
    for name in names.all():
        name.scroll_into_view_if_needed()
        assert set(name.evaluate(LINE_BREAKS)) <= {".", "_"}, name.evaluate(LINE_BREAKS)
        assert name.evaluate("e => e.getClientRects().length") > 1  # it is wider than the card: it does break


def test_the_cluster_tables_show_host_role_gpus_and_gpu_model_whole(two_node_app, browser):
    page = new_page(browser, 1440, 900)
    open_page(page, two_node_app)
    grid = page.get_by_test_id("stDataFrame").first  # Configure's node table
    expect(grid.locator("th")).not_to_have_count(0)
    drawn = grid.evaluate(HEADERS)
    assert drawn[:4] == ["host", "role", "gpus", "gpu_model"] and len(drawn) > 4, drawn  # the last may be cut
    nav(page, "Cluster")
    grid = page.get_by_test_id("stDataFrame").first
    expect(grid.locator("td").filter(has_text=H100)).to_have_count(2)
    assert grid.evaluate(HEADERS) == ["#", "host", "role", "gpus", "gpu_model", "status"]
    assert grid.evaluate(SIDEWAYS) <= 0  # nothing behind a sideways scroll
