"""The memory estimate's chart: one stacked bar per GPU and phase, one colour per term, the colours grouped by family
(model states blues, activations greens, vLLM oranges and reds, overhead greys), the legend below the bars with
room for every entry, a reclaimable term (torch's cache: nvidia-smi shows it, the peak leaves it out) hatched and
lighter, and the card's capacity as a dashed line named in the title (never on the bars). Drawn as SVG (views/svg.py);
each segment says its term and GiB on hover."""

from __future__ import annotations

from grpo_ui.api.specs import MemoryReport
from views import svg

# (family, words a term's name contains, shades from dark to light); the first family that matches wins
FAMILIES = [
    ("vLLM", ("vLLM", "generate()"), ["#b23c17", "#e4572e", "#f28c28", "#f6b26b", "#fdd49e"]),
    ("activations", ("activations", "logits", "allocator", "autocast", "dequantisation"),
     ["#1b7837", "#41ab5d", "#78c679", "#addd8e", "#d9f0a3"]),
    ("overhead", ("CUDA context", "NCCL"), ["#525252", "#969696", "#cccccc"]),
    ("model states", (), ["#08306b", "#2171b5", "#4292c6", "#6baed6", "#9ecae1", "#6a51a3", "#9e9ac8", "#c6dbef"]),
]
ORDER = ["model states", "activations", "vLLM", "overhead"]  # bottom to top of each bar, and the legend's groups
WIDTH, PLOT_HEIGHT, LEFT, RIGHT = 600, 330, 46, 8  # the width it has at 1440 px: text at its own size


def family(term: str) -> str:
    return next(name for name, words, _ in FAMILIES if not words or any(w in term for w in words))


def colours(terms: list[str]) -> dict[str, str]:
    """A distinct colour per term: the next shade of its family's (a family with more terms than shades wraps)."""
    used: dict[str, int] = {}
    out = {}
    for term in terms:
        fam = family(term)
        shades = next(s for name, _, s in FAMILIES if name == fam)
        out[term] = shades[used.get(fam, 0) % len(shades)]
        used[fam] = used.get(fam, 0) + 1
    return out


def series(report: MemoryReport) -> list[svg.Series]:
    """The chart's series, bottom to top: every term over 0.01 GiB in some phase, by family."""
    phases = [p for r in report.roles for p in r.phases]
    names = sorted(dict.fromkeys(t.name for p in phases for t in p.terms if t.gib > 0.01),
                   key=lambda n: ORDER.index(family(n)))
    colour = colours(names)
    reclaimable = {t.name for p in phases for t in p.terms if t.reclaimable}  # stacked, yet not in the peak
    return [svg.Series(name + " (reclaimable)" * (name in reclaimable), colour[name], family(name),
                       name in reclaimable) for name in names]


def memory_chart(report: MemoryReport) -> str:
    bars = [(f"{r.role} GPU · {p.name}", p) for r in report.roles for p in r.phases]
    stacked = series(report)
    gib = [[sum(t.gib for t in p.terms if t.name == s.name.removesuffix(" (reclaimable)")) for s in stacked]
           for _, p in bars]
    cap = report.trainer.capacity_gib
    title = "GiB per GPU and phase"
    if cap:
        title += f" — dashed red line: {report.trainer.gpu}, {cap:.0f} GiB"
    axis = svg.ticks(max([sum(g) for g in gib] + [cap or 0.0]) * 1.02)
    top, plot_w = 28.0, WIDTH - LEFT - RIGHT
    bottom = top + PLOT_HEIGHT

    def y(v: float) -> float:
        return bottom - v / axis[-1] * PLOT_HEIGHT
    parts = [f"<defs>{svg.patterns(stacked)}</defs>"]
    for v in axis:
        parts.append(f'<line x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{y(v):.1f}" y2="{y(v):.1f}" stroke="currentColor" '
                     f'stroke-opacity="{0.35 if v == 0 else 0.1}"/><text x="{LEFT - 5}" y="{y(v) + 4:.1f}" '
                     f'font-size="{svg.FONT - 1}" text-anchor="end">{svg.tick_label(v)}</text>')
    parts.append(f'<text transform="translate(11 {top + PLOT_HEIGHT / 2:.0f}) rotate(-90)" font-size="{svg.FONT}" '
                 'text-anchor="middle">GiB</text>')
    slot = plot_w / max(len(bars), 1)
    for k, ((label, _), values) in enumerate(zip(bars, gib, strict=True)):
        x, level = LEFT + slot * (k + 0.1), 0.0
        for s, v in zip(stacked, values, strict=True):
            if v > 0:
                parts.append(svg.segment(x, y(level + v), slot * 0.8, y(level) - y(level + v), s,
                                         f"{label}: {s.name} {v:.2f} GiB"))
            level += v
        parts.append(f'<text x="{x + slot * 0.4:.1f}" y="{bottom + svg.LINE:.1f}" font-size="{svg.FONT - 1}" '
                     f'text-anchor="middle">{svg.text(label)}</text>')
    if cap:
        parts.append(f'<line x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{y(cap):.1f}" y2="{y(cap):.1f}" stroke="red" '
                     'stroke-width="1.5" stroke-dasharray="6 4"/>')
    legend, height = svg.legend_rows([(s, s.name) for s in stacked], LEFT, plot_w, 190)
    parts.append(f'<g transform="translate(0 {bottom + svg.LINE + 14:.0f})">{legend}</g>')
    return svg.chart("".join(parts), WIDTH, bottom + svg.LINE + 18 + height, title, "memory-chart")
