"""What the user expects of a run, for the step-time and cost prediction (EstimateSpec): lengths, the dataset's size,
reward latency, the price of a GPU-hour. Unset means unknown: the prediction says what it assumed instead and names the
field that changes it."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from grpo_ui.spec.fields import setting

DEFAULT_PROMPT_TOKENS = 256     # a math or chat prompt with its chat template, when neither the user nor max_length says
DEFAULT_INTERNODE_GBS = 25.0    # GB/s between two nodes: one 200 Gb/s InfiniBand HDR or Ethernet port per node


class EstimateSpec(BaseModel):
    """The run as the user expects it (not ms-swift arguments: nothing here reaches a node)."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)
    completion_tokens: int | None = setting(
        None, "Expected mean completion length in tokens (a similar run's completions/mean_length). Unset: a guess from "
        "published GRPO runs, a share of a short max_completion_length that levels off at a couple of thousand tokens "
        "for long ones (the prediction says how much and widens its range), the longest completion at "
        "max_completion_length.", ge=1)
    prompt_tokens: int | None = setting(
        None, f"Mean prompt length in tokens, chat template included. Unset: {DEFAULT_PROMPT_TOKENS} (at most "
        "max_length).", ge=1)
    dataset_rows: int | None = setting(
        None, "Rows in the training set, for the number of steps. Unset: the sum of the datasets' #N samples when "
        "every dataset gives one, else unknown (then only max_steps gives the run's length).", ge=1)
    reward_latency_s: float | None = setting(
        None, "Seconds one generation round waits for reward functions that call out (an external service, a judge, "
        "sandboxed code). Unset: rule-based rewards, about 0 s.", ge=0)
    env_seconds_per_turn: float | None = setting(
        None, "Seconds a multi-turn environment takes to answer one turn (a tool call, a game move, a sandbox run), "
        "which every generation round waits for once per turn (train.max_turns). Unset: left out of the step time, "
        "and the prediction says so.", ge=0)
    price_per_gpu_hour: float | None = setting(
        None, "Price of one GPU-hour (any currency), for the run's cost. Unset: no cost.", ge=0)
