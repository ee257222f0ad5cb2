"""A Megatron MoE job in a real browser (Debian's Chromium at 1440 × 900): a launch script written like ms-swift's
MoE examples (tests/data/megatron/moe_full.sh) pasted and imported, its GPU chosen, a tensor-parallel size that
does not fit fixed in one click, the estimate and the cards, the rendered megatron rlhf command; nothing of the
layout, the metrics or the cards is cut at that width. Screenshots for the README's first hour go to
build/screenshots/megatron-*.png."""

import re
from pathlib import Path

import pytest
from playwright.sync_api import expect

from tests.browser import choose, click, fill, nav, new_page, open_page, serve, shot
from tests.test_browser_story import OVERFLOW
from tests.test_walkthrough import finding, paste_import

pytestmark = pytest.mark.slow
MOE = Path(__file__).parent / "data" / "megatron" / "moe_full.sh"


@pytest.fixture
def app(tmp_path):
    yield from serve(tmp_path, "127.0.0.1")


@pytest.fixture
def page(browser):
    return new_page(browser, 1440, 900)


def test_a_megatron_moe_job_imported_fixed_estimated_and_rendered(app, page):
    open_page(page, app)
    paste_import(page, MOE.read_text())
    expect(page.get_by_role("radio", name="megatron rlhf · Megatron-Core (TP, PP, CP, EP)")).to_be_checked()
    choose(page, "GPU model (every node)", "NVIDIA H100 80GB HBM3 · 80 GiB")
    layout = page.locator(".st-key-megatron_layout")
    expect(layout).to_contain_text("DP = 8 ÷ (TP 4 · PP 2 · CP 1) = 1")
    expect(layout).to_contain_text("✓ EP 4 divides its 128 experts")
    # TP 8 on an 8-GPU node, as a first guess: TP·PP is 16, and the model has 4 KV heads
    fill(page, layout.get_by_label("TP", exact=True), "8")
    expect(layout).to_contain_text("✗ TP·PP·CP = 8·2·1 = 16 divides the 8 training GPUs")
    expect(layout).to_contain_text("✗ TP 8 divides the 32 attention heads and 4 KV heads of Qwen3-30B-A3B")
    expect(layout.get_by_text("MEGATRON-WORLD")).to_be_visible()  # beside the sizes, in full
    expect(page.get_by_role("button", name="Download node scripts (zip)")).to_be_disabled()
    layout.scroll_into_view_if_needed()
    shot(page, "megatron-1-layout")
    click(page, finding(page, "MEGATRON-WORLD").get_by_role("button", name="Apply fix"))
    expect(layout.get_by_label("TP", exact=True)).to_have_value("4")
    expect(layout).not_to_contain_text("✗")
    expect(page.get_by_role("button", name="Download node scripts (zip)")).to_be_enabled()
    # the estimate: the trainer GPU's peak, the step time and what would make it faster, nothing of them cut
    verdict = page.get_by_test_id("stMetric").filter(has_text="Verdict")
    expect(verdict).to_contain_text(re.compile("FITS|TIGHT"))
    faster = page.get_by_test_id("stColumn").filter(has=page.get_by_role("button", name="Make it faster: apply"))
    expect(faster.first).to_be_visible()
    metrics = page.get_by_test_id("stMetric")
    cut = layout.evaluate_all(OVERFLOW) + metrics.evaluate_all(OVERFLOW) + faster.evaluate_all(OVERFLOW)
    assert not cut, cut
    layout.scroll_into_view_if_needed()
    shot(page, "megatron-2-fixed")
    faster.first.scroll_into_view_if_needed()
    shot(page, "megatron-3-estimate")
    # the scripts: megatron rlhf with the sizes as fixed, torchrun's variables as ms-swift's examples set them
    nav(page, "Launch")
    script = page.get_by_test_id("stCode").last
    expect(script).to_contain_text("megatron rlhf")
    expect(script).to_contain_text(re.compile(r"--tensor_model_parallel_size 4\b"))
    expect(script).to_contain_text("NPROC_PER_NODE")
    assert page.evaluate("""() => {  // the command's first line in the middle of the window
        const code = [...document.querySelectorAll('[data-testid=stCode]')].pop();
        const walk = document.createTreeWalker(code, NodeFilter.SHOW_TEXT);
        for (let n = walk.nextNode(); n; n = walk.nextNode()) {
            if (n.textContent.includes('rlhf')) { n.parentElement.scrollIntoView({block: 'center'}); return true; }
        }
        return false;
    }""")
    shot(page, "megatron-4-launch")
