"""Configure's charts as SVG drawn into the page: stacked bars whose every segment says its value on hover (an SVG
title), hatched segments, a dashed reference line, a legend below grouped by family — no charting library for the
browser to load and run (Plotly's 4.7 MB bundle took about a second of Configure's first load, bench/ui.py).

``chart(svg_body, width, height)`` wraps the parts into one SVG that st.markdown draws as it is (an HTML block: its
text is not read as markdown) and that scales to the column's width."""

from __future__ import annotations

import html
import math
from dataclasses import dataclass

FONT = 12  # px, in the chart's own units (it scales with the column)
LINE = FONT + 5


def text(value) -> str:
    """Text for the SVG: HTML-escaped, markdown's characters as entities (st.markdown draws the chart)."""
    return "".join(f"&#{ord(c)};" if c in "_*`[]\\~|" else c for c in html.escape(str(value)))


def ticks(top: float, count: int = 6) -> list[float]:
    """Round axis values from 0 to at least ``top``, about ``count`` of them (steps of 1, 2 or 5 × 10ⁿ)."""
    raw = max(top, 1e-9) / count
    step = min((m * 10 ** math.floor(math.log10(raw)) for m in (1, 2, 5, 10)), key=lambda s: (s < raw, s))
    return [k * step for k in range(int(math.ceil(top / step - 1e-9)) + 1)]


def tick_label(value: float, suffix: str = "") -> str:
    return f"{value:g}{suffix}"


@dataclass(frozen=True)
class Series:
    """One stacked series: its legend name, colour, legend group (a family, or "" for none) and whether it is
    hatched and lighter (torch's reclaimable cache)."""

    name: str
    colour: str
    group: str = ""
    hatched: bool = False

    @property
    def fill(self) -> str:
        return f"url(#{self.pattern_id})" if self.hatched else self.colour

    @property
    def pattern_id(self) -> str:
        return "hatch-" + self.colour.lstrip("#")


def patterns(series: list[Series]) -> str:
    """The hatching of the hatched series' colours, diagonal as Plotly's "/" pattern."""
    return "".join(f'<pattern id="{s.pattern_id}" patternUnits="userSpaceOnUse" width="6" height="6" '
                   f'patternTransform="rotate(45)"><rect width="2.5" height="6" fill="{s.colour}"/></pattern>'
                   for s in {s.pattern_id: s for s in series if s.hatched}.values())


def segment(x: float, y: float, w: float, h: float, s: Series, hover: str) -> str:
    opacity = ' opacity="0.5"' if s.hatched else ""
    return (f'<rect x="{x:.1f}" y="{y:.1f}" width="{max(w, 0):.1f}" height="{max(h, 0):.1f}" fill="{s.fill}"'
            f'{opacity}><title>{text(hover)}</title></rect>')


def swatch(x: float, y: float, s: Series, label: str) -> str:
    """A legend entry at (x, y): the series' colour (hatched when it is) and its label."""
    return segment(x, y - FONT + 2, 14, FONT - 2, s, label) + \
        f'<text x="{x + 19:.1f}" y="{y:.1f}" font-size="{FONT - 1}">{text(label)}</text>'


def legend_rows(entries: list[tuple[Series, str]], x0: float, width: float, column: float) -> tuple[str, float]:
    """The legend below a chart from (series, label) pairs: the groups side by side (a title over each, its entries
    one a line), wrapping to a new row of groups at ``width``; entries without a group flow along a row. Returns the
    SVG and its height."""
    groups: dict[str, list[tuple[Series, str]]] = {}
    for s, label in entries:
        groups.setdefault(s.group, []).append((s, label))
    parts, y, x, row_height = [], LINE, x0, 0.0
    for group, items in groups.items():
        if not group:  # one flowing row
            for s, label in items:
                step = 28 + 6.2 * len(label)
                if x + step > x0 + width and x > x0:
                    x, y = x0, y + LINE
                parts.append(swatch(x, y, s, label))
                x += step
            row_height = LINE
            continue
        if x + column > x0 + width and x > x0:
            x, y, row_height = x0, y + row_height + 6, 0.0
        parts.append(f'<text x="{x:.1f}" y="{y:.1f}" font-size="{FONT - 1}" opacity="0.7">{text(group)}</text>')
        parts += [swatch(x, y + LINE * (k + 1), s, label) for k, (s, label) in enumerate(items)]
        row_height = max(row_height, LINE * (len(items) + 1))
        x += column
    return "".join(parts), y + row_height


def chart(body: str, width: float, height: float, title: str, css_class: str) -> str:
    """The SVG: a title above ``body``; its opening and closing tags on lines of their own, so markdown passes it
    through untouched. It takes the column's width and the height that keeps its proportions."""
    return (f'<svg class="grpo-ui-chart {css_class}" viewBox="0 0 {width:.0f} {height:.0f}" width="100%" '
            f'role="img" aria-label="{text(title)}" font-family="inherit" fill="currentColor" '
            f'style="overflow: visible">\n'
            f'<text x="4" y="{FONT + 4}" font-size="{FONT + 1}">{text(title)}</text>{body}\n</svg>')
