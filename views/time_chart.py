"""The step-time prediction's chart: one horizontal bar of an optimizer step, stacked by phase in the order a round
runs them (generation oranges, the trainer's forwards and backward blues, moving weights greys), each segment's
seconds on hover and in the legend, the likely range named in the title."""

from __future__ import annotations

import plotly.graph_objects as go

from grpo_ui.api.specs import PHASES, TimeReport, duration

COLOURS = {"rollout": "#e4572e", "reward": "#f6b26b", "old_logprobs": "#6baed6", "ref_logprobs": "#9ecae1",
           "train": "#08306b", "weight_sync": "#525252", "sleep_wake": "#969696", "offload": "#bdbdbd",
           "overhead": "#dddddd"}
LABELS = {"rollout": "rollout", "reward": "reward", "old_logprobs": "old log-probs", "ref_logprobs": "ref log-probs",
          "train": "train", "weight_sync": "weight sync", "sleep_wake": "sleep/wake", "offload": "offload",
          "overhead": "overhead"}


def time_chart(report: TimeReport) -> go.Figure:
    """Built from plain dicts in one go (adding traces one by one costs ~40× more: plotly validates each)."""
    bars = [{"type": "bar", "name": f"{LABELS[name]} {duration(seconds)}", "y": ["one step"], "x": [seconds],
             "orientation": "h", "marker": {"color": COLOURS[name]},
             "hovertemplate": f"{LABELS[name]}: %{{x:.2f}} s — {PHASES[name]}<extra></extra>"}
            for name in PHASES if (seconds := report.phases.get(name, 0.0)) >= 0.005]
    low, high = report.range
    title = f"{duration(report.step_s)} per optimizer step (likely {duration(low)} – {duration(high)})"
    return go.Figure(data=bars, layout={
        "barmode": "stack", "height": 190, "margin": {"l": 10, "r": 10, "t": 36, "b": 10},
        "xaxis": {"ticksuffix": " s"}, "yaxis": {"showticklabels": False},
        "title": {"text": title, "font": {"size": 13}},
        "legend": {"orientation": "h", "yanchor": "top", "y": -0.3, "traceorder": "normal", "font": {"size": 11}}})
