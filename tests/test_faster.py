"""Make it faster (grpo_ui.checks.faster): each card's change shortens the step to the time it states, and a change is
offered only when the job still passes after it (ms-swift's rules, the command line, the memory verdict)."""

from __future__ import annotations

import pytest

from grpo_ui.checks.assess import assess
from grpo_ui.checks.faster import MIN_SAVING, faster
from grpo_ui.memory.estimate import estimate_spec
from grpo_ui.spec.paths import with_changes
from grpo_ui.spec.presets import presets
from grpo_ui.timing.predict import predict_spec

PRESETS = presets()
LORA_24GB, FULL_8X80, SERVER_32B = PRESETS.values()


@pytest.mark.parametrize("spec", PRESETS.values(), ids=list(PRESETS))
def test_every_card_is_faster_by_what_it_says_and_still_passes(spec):
    now = predict_spec(spec).step_s
    cards = faster(spec)
    assert cards
    for card in cards:
        after = with_changes(spec, card.changes)
        assert predict_spec(after).step_s == pytest.approx(card.step_s)
        assert card.step_s <= now * (1 - MIN_SAVING) and card.saving == pytest.approx(1 - card.step_s / now)
        assert not assess(after).errors
        assert estimate_spec(after).verdict == card.verdict != "oom"
    assert [c.step_s for c in cards] == sorted(c.step_s for c in cards)


def test_a_faster_change_that_would_not_fit_is_never_offered():
    """On 4 × RTX 4090 (LoRA, ZeRO-3) ZeRO-2 would be the fastest change, but each GPU would then hold the whole
    model and run out of memory: no card offers it."""
    zero2 = with_changes(LORA_24GB, {"train.deepspeed": "zero2"})
    assert predict_spec(zero2).step_s < min(c.step_s for c in faster(LORA_24GB))
    assert estimate_spec(zero2).verdict == "oom"
    assert all(c.changes != {"train.deepspeed": "zero2"} for c in faster(LORA_24GB))


def test_server_mode_offers_async_generation():
    cards = faster(SERVER_32B)
    assert {"rollout.async_generate": True} in [c.changes for c in cards]


def test_the_assessment_carries_the_prediction_and_the_cards():
    a = assess(SERVER_32B)
    assert a.time.step_s == predict_spec(SERVER_32B).step_s and a.time_error is None
    assert a.faster == faster(SERVER_32B)


def test_no_card_without_a_step_time():
    cpu = with_changes(LORA_24GB, {"cluster.nodes": [{"host": "localhost", "gpus": [0], "gpu_memory_gib": 24.0}]})
    assert faster(cpu) == []
    a = assess(cpu)
    assert a.time is None and a.faster == [] and a.time_error.startswith("no step time")
