"""The step-time panel in a real browser (Debian's Chromium, Playwright, `streamlit run app.py`): the layout of
ms-swift's grpo_7b.sh (6 trainer GPUs and a 2-GPU rollout server on one H100 node) shows its time per step by
phase, the run's hours, GPU-hours and cost; the expected completion length changes it; a Make it faster card applies
its change and the page then shows the step time the card promised. Each action waits for the run it causes
(tests/browser.py); the page's content is checked with Playwright's auto-waiting ``expect``. The
screenshot goes to build/screenshots/configure-time.png (`make screenshots`)."""

import re

import pytest
from playwright.sync_api import expect

from grpo_ui.spec.yaml_io import spec_from_yaml
from grpo_ui.timing.predict import predict_spec
from grpo_ui.timing.report import duration
from tests.browser import click, fill, open_page, serve, shot

pytestmark = pytest.mark.slow
GRPO_7B = """name: grpo-7b
train:
  model: Qwen/Qwen2.5-7B-Instruct
  tuner_type: full
  torch_dtype: bfloat16
  deepspeed: zero2
  per_device_train_batch_size: 4
  gradient_accumulation_steps: 2
  num_generations: 8
  max_length: 2048
  max_completion_length: 1024
  num_train_epochs: 1
  dataset: ['AI-MO/NuminaMath-TIR#10000']
  reward_funcs: [accuracy, format]
rollout: {use_vllm: true, vllm_mode: server, vllm_server_host: [127.0.0.1], vllm_server_port: [8000]}
server: {vllm_data_parallel_size: 2}
cluster:
  nodes:
  - {host: localhost, gpus: [0, 1, 2, 3, 4, 5], gpu_model: NVIDIA H100 80GB HBM3}
  - {host: localhost, role: rollout, gpus: [6, 7], gpu_model: NVIDIA H100 80GB HBM3}
estimate: {price_per_gpu_hour: 2.5}
"""


@pytest.fixture
def time_app(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    (home / "draft.yaml").write_text(GRPO_7B)
    yield from serve(tmp_path, "127.0.0.1", GRPO_UI_HOME=str(home))


def test_the_time_panel_in_the_browser(time_app, page):
    report = predict_spec(spec_from_yaml(GRPO_7B))
    open_page(page, time_app)
    per_step = page.get_by_test_id("stMetric").filter(has_text="Per step")
    expect(per_step).to_contain_text(duration(report.step_s))
    metrics = page.get_by_test_id("stMetric")
    expect(metrics.filter(has_text="Run")).to_contain_text(duration(report.total_h * 3600))
    expect(metrics.filter(has_text="GPU-hours")).to_contain_text(f"{report.gpu_hours:,.0f}")
    expect(metrics.filter(has_text="Cost")).to_contain_text(f"{report.cost:,.0f}")
    chart = page.locator("svg.time-chart").filter(has_text="per optimizer step")
    expect(chart).to_contain_text("rollout")
    expect(chart).to_contain_text("weight sync")
    expect(page.get_by_text(re.compile(r"^Assumes prompts of 256 tokens"))).to_be_visible()
    first_card = page.get_by_text(re.compile(r"per step \(−")).first  # the cards, fastest first, side by side
    apply = page.get_by_role("button", name="Make it faster: apply").first
    expect(apply).to_be_visible()
    chart.scroll_into_view_if_needed()
    shot(page, "configure-time")

    fill(page, page.get_by_label("completion_tokens", exact=True), "300")
    shorter = predict_spec(spec_from_yaml(GRPO_7B.replace("estimate: {", "estimate: {completion_tokens: 300, ")))
    expect(per_step).to_contain_text(duration(shorter.step_s))

    promised = first_card.inner_text().split(" per step")[0]
    click(page, apply)
    expect(per_step).to_contain_text(promised)


def test_node_0s_script_is_drawn_when_its_expander_is_opened(time_app, page):
    """The preview is a lazy expander (sent only while open, bench/ui.py's first load): opened, it shows the script."""
    open_page(page, time_app)
    expect(page.get_by_test_id("stCode")).to_have_count(0)
    click(page, page.get_by_text("node_0.sh (the Launch page shows every file)"))
    expect(page.get_by_test_id("stCode")).to_contain_text("swift rlhf")
