"""The measured pace on real ms-swift runs (tests/data/captured: ms-swift 4.6 on this machine's CPU, with the time
each piece of output arrived): seconds per step from ms-swift's own clock agree with when its metric lines arrived,
the first step stays apart, logging_steps 5 gives one value per logged interval, a resumed run is clocked from its
checkpoint, the ETA follows the recent pace; the rollout share from vLLM's sleep/wake lines (tests/data/gpu_logs, in
vLLM's format: no GPU here) and completions against their cap."""

import re
from dataclasses import asdict
from pathlib import Path

import pytest

from grpo_ui.doctor.metrics import parse_jsonl_line
from grpo_ui.doctor.pace import Interval, clock, pace, rounds, seconds_text, vllm_rollouts
from grpo_ui.jobs.time_loop import completions_text

CAPTURED = Path(__file__).parent / "data/captured"
SLEEP_LOG = Path(__file__).parent / "data/gpu_logs/colocate_sleep_stuck.log"


def metrics_of(lines: list[str]) -> dict:
    """logging.jsonl lines as the store hands them out: key → [(step, value)]."""
    out: dict = {}
    for line in lines:
        step, values = parse_jsonl_line(line)
        if step is not None:
            for k, v in values.items():
                out.setdefault(k, []).append((step, v))
    return out


def logged(name: str) -> dict:
    return metrics_of((CAPTURED / f"{name}.logging.jsonl").read_text().splitlines())


def arrivals_of_metric_lines(name: str) -> dict[int, float]:
    """Step → seconds since the start when rank 0's stdout dict for it had fully arrived (NAME.arrivals)."""
    data = (CAPTURED / f"{name}.log").read_bytes()
    arrivals = [(int(o), float(t)) for o, t in (line.split() for line in
                                                (CAPTURED / f"{name}.arrivals").read_text().splitlines())]
    out = {}
    for m in re.finditer(rb"'global_step/max_steps': '(\d+)/\d+'[^}]*}", data):
        out[int(m[1])] = next(t for offset, t in arrivals if offset >= m.end())
    return out


@pytest.mark.parametrize("name", ["slow_reward", "reward_slowing", "healthy_logging5"])
def test_seconds_per_step_from_ms_swifts_clock_agree_with_when_the_lines_arrived(name):
    p = pace(logged(name))
    arrived = arrivals_of_metric_lines(name)
    steps = sorted(arrived)
    assert p.first_step == steps[0] and p.start_step == 0
    assert p.warmup_s == logged(name)["seconds_per_step"][0][1]  # the first step alone, never in the intervals
    assert [i.step for i in p.intervals] == steps[1:]
    for i, (s1, s2) in zip(p.intervals, zip(steps, steps[1:], strict=False), strict=True):
        by_arrival = (arrived[s2] - arrived[s1]) / (s2 - s1)
        assert i.steps == s2 - s1 and i.seconds == pytest.approx(by_arrival, abs=0.01), (i, by_arrival)


def test_each_step_of_a_slowing_run_is_measured_while_the_run_average_lags():
    """reward_slowing: the reward sleeps 0.5 s longer on every call. Each step's wall time holds TRL's timer around
    the training step (step_time) and follows it; ms-swift's train_speed, a run average, falls behind."""
    m = logged("reward_slowing")
    p = pace(m)
    inside = dict(m["step_time"])
    for i in p.intervals:
        assert inside[i.step] <= i.seconds < inside[i.step] + 0.05
    last = p.intervals[-1]
    assert last.seconds > 1.5 * dict(m["seconds_per_step"])[last.step]


def test_logging_steps_5_gives_one_value_per_logged_interval():
    p = pace(logged("healthy_logging5"))  # metric lines at steps 1, 5 and 10
    assert [(i.step, i.steps) for i in p.intervals] == [(5, 4), (10, 5)]
    assert (p.step, p.total) == (10, 10) and p.eta_s == 0
    assert p.median_s == pytest.approx((p.intervals[0].seconds + p.intervals[1].seconds) / 2)


def test_a_resumed_run_is_clocked_from_its_checkpoint():
    """ms-swift's clock restarts with a resumed run (train_speed counts the steps since it): slow_reward's lines as a
    run resumed from checkpoint-100 would log them give the same seconds per step."""
    lines = [re.sub(r'"global_step/max_steps": "(\d+)/5"', lambda g: f'"global_step/max_steps": "{int(g[1]) + 100}/105"',
                    line) for line in (CAPTURED / "slow_reward.logging.jsonl").read_text().splitlines()]
    fresh, resumed = pace(logged("slow_reward")), pace(metrics_of(lines))
    assert (resumed.start_step, resumed.first_step, resumed.total) == (100, 101, 105)
    assert resumed.warmup_s == fresh.warmup_s
    assert [i.seconds for i in resumed.intervals] == pytest.approx([i.seconds for i in fresh.intervals])


def test_the_eta_is_the_steps_left_at_the_recent_pace():
    m = logged("slow_reward")
    mid = {k: [(s, v) for s, v in series if s <= 3] for k, series in m.items()}  # the run as seen at step 3
    p = pace(mid)
    assert (p.step, p.total) == (3, 5)
    assert p.recent_s == pytest.approx((3 * 4.104634 - 4.084601) / 2)
    assert p.eta_s == pytest.approx(2 * p.recent_s)
    _, points = clock(m)
    actual = points[-1][1] - points[2][1]  # what steps 4 and 5 then took
    assert p.eta_s == pytest.approx(actual, rel=0.05)


def test_steps_per_generation_joins_steps_into_rollout_rounds():
    """With 3 optimizer steps per rollout, one slow step generates and two fast ones reuse its completions: the
    median per step is taken over whole rounds, not over the fast steps."""
    found = [Interval(k + 1, 1, s) for k, s in enumerate([10.0, 2.0, 2.0, 10.0, 2.0, 2.0])]
    assert rounds(found, 3) == pytest.approx([14 / 3, 14 / 3])
    assert rounds(found[:2], 3) == pytest.approx([6.0])  # only a partial round yet
    assert rounds(found, 1) == [10.0, 2.0, 2.0, 10.0, 2.0, 2.0]


def test_vllm_sleep_wake_lines_give_the_rollout_share():
    """colocate_sleep_stuck.log: vLLM wakes (weights, then KV cache), generates, falls asleep; 3 wake-ups make 2
    whole cycles. Each begins when the first wake-up began (its line's time less the seconds it took)."""
    lines = SLEEP_LOG.read_text().splitlines()
    r = vllm_rollouts(lines)
    awake = [49 + 1.904418, 48 + 1.877120]  # 10:00:42 - 1.904418 → 10:01:31; 10:02:14 - 1.877120 → 10:03:02
    cycle = [92 - 1.877120 + 1.904418, 91 - 1.912036 + 1.877120]
    assert r.cycles == 2 and r.share == pytest.approx(sum(awake) / sum(cycle))
    assert r.awake_s == pytest.approx(sum(awake) / 2) and r.cycle_s == pytest.approx(sum(cycle) / 2)
    every_rank = [line for line in lines for _ in range(4)]  # each rank of a node logs its own engine's lines
    assert vllm_rollouts(every_rank) == r
    assert vllm_rollouts(lines[:4]) is None  # woken and asleep once: no whole cycle yet


def test_completions_against_their_cap():
    tiny = pace(metrics_of((CAPTURED / "swift46_tiny_grpo_logging.jsonl").read_text().splitlines()),
                completion_cap=16)  # a random model: every completion runs to the cap
    assert completions_text({"completions": asdict(tiny.completions)}) == (
        "completions average 16 of 16 tokens, 100% cut at the cap — most hit it: max_completion_length sets the "
        "generation time")
    healthy = pace(logged("slow_reward"), completion_cap=16)  # --stop_words a: completions end before the cap
    assert completions_text({"completions": asdict(healthy.completions)}) == (
        "completions average 10 of 16 tokens, 0% cut at the cap")


def test_seconds_read_as_people_read_them():
    assert [seconds_text(s) for s in (0.0613, 4.31, 54.13, 725, 4320, 90000, None)] == [
        "0.061 s", "4.3 s", "54 s", "12 min", "1 h 12 min", "1 d 1 h", "—"]
