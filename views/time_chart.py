"""The step-time prediction's chart: one horizontal bar of an optimizer step, stacked by phase in the order a round
runs them (generation oranges, the trainer's forwards and backward blues, moving weights greys), each segment's
seconds on hover and in the legend, the likely range named in the title. Drawn as SVG (views/svg.py)."""

from __future__ import annotations

from grpo_ui.api.specs import PHASES, TimeReport, duration
from views import svg

COLOURS = {"rollout": "#e4572e", "reward": "#f6b26b", "old_logprobs": "#6baed6", "ref_logprobs": "#9ecae1",
           "train": "#08306b", "weight_sync": "#525252", "sleep_wake": "#969696", "offload": "#bdbdbd",
           "overhead": "#dddddd"}
LABELS = {"rollout": "rollout", "reward": "reward", "old_logprobs": "old log-probs", "ref_logprobs": "ref log-probs",
          "train": "train", "weight_sync": "weight sync", "sleep_wake": "sleep/wake", "offload": "offload",
          "overhead": "overhead"}
WIDTH, LEFT, RIGHT, BAR = 980, 8, 16, 44  # the width it has at 1440 px: text at its own size


def time_chart(report: TimeReport) -> str:
    phases = [(name, seconds) for name in PHASES if (seconds := report.phases.get(name, 0.0)) >= 0.005]
    low, high = report.range
    title = f"{duration(report.step_s)} per optimizer step (likely {duration(low)} – {duration(high)})"
    axis = svg.ticks(sum(s for _, s in phases) * 1.02, 8)
    plot_w, top = WIDTH - LEFT - RIGHT, 30.0

    def x(v: float) -> float:
        return LEFT + v / axis[-1] * plot_w
    parts, level = [], 0.0
    for v in axis:
        parts.append(f'<line x1="{x(v):.1f}" x2="{x(v):.1f}" y1="{top:.0f}" y2="{top + BAR:.0f}" '
                     f'stroke="currentColor" stroke-opacity="0.1"/><text x="{x(v):.1f}" y="{top + BAR + svg.LINE}" '
                     f'font-size="{svg.FONT - 1}" text-anchor="middle">{svg.tick_label(v, " s")}</text>')
    entries = []
    for name, seconds in phases:
        s = svg.Series(f"{LABELS[name]} {duration(seconds)}", COLOURS[name])
        parts.append(svg.segment(x(level), top, x(level + seconds) - x(level), BAR, s,
                                 f"{LABELS[name]}: {seconds:.2f} s — {PHASES[name]}"))
        entries.append((s, s.name))
        level += seconds
    legend, height = svg.legend_rows(entries, LEFT, plot_w, 0)
    parts.append(f'<g transform="translate(0 {top + BAR + svg.LINE + 12:.0f})">{legend}</g>')
    return svg.chart("".join(parts), WIDTH, top + BAR + svg.LINE + 16 + height, title, "time-chart")
