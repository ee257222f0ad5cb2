"""The memory estimate's chart: one stacked bar per GPU and phase, one colour per term, the colours grouped by family
(model states blues, activations greens, vLLM oranges and reds, overhead greys), the legend below the bars with
room for every entry, a reclaimable term (torch's cache: nvidia-smi shows it, the peak leaves it out) hatched and
lighter, and the card's capacity as a dashed line named in the title (never on the bars)."""

from __future__ import annotations

import plotly.graph_objects as go

from grpo_ui.api.specs import MemoryReport

# (family, words a term's name contains, shades from dark to light); the first family that matches wins
FAMILIES = [
    ("vLLM", ("vLLM", "generate()"), ["#b23c17", "#e4572e", "#f28c28", "#f6b26b", "#fdd49e"]),
    ("activations", ("activations", "logits", "allocator", "autocast", "dequantisation"),
     ["#1b7837", "#41ab5d", "#78c679", "#addd8e", "#d9f0a3"]),
    ("overhead", ("CUDA context", "NCCL"), ["#525252", "#969696", "#cccccc"]),
    ("model states", (), ["#08306b", "#2171b5", "#4292c6", "#6baed6", "#9ecae1", "#6a51a3", "#9e9ac8", "#c6dbef"]),
]


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


def memory_chart(report: MemoryReport) -> go.Figure:
    fig = go.Figure()
    bars = [(f"{r.role} GPU · {p.name}", p) for r in report.roles for p in r.phases]
    order = ["model states", "activations", "vLLM", "overhead"]  # bottom to top of each bar
    names = sorted(dict.fromkeys(t.name for _, p in bars for t in p.terms if t.gib > 0.01),
                   key=lambda n: order.index(family(n)))
    colour = colours(names)
    reclaimable = {t.name for _, p in bars for t in p.terms if t.reclaimable}  # stacked, yet not in the peak
    for name in names:
        fig.add_bar(name=name + " (reclaimable)" * (name in reclaimable), x=[b[0] for b in bars],
                    marker={"color": colour[name], "pattern_shape": "/" if name in reclaimable else "",
                            "opacity": 0.5 if name in reclaimable else 1}, legendgroup=family(name),
                    legendgrouptitle_text=family(name),
                    y=[sum(t.gib for t in p.terms if t.name == name) for _, p in bars])
    cap = report.trainer.capacity_gib
    title = "GiB per GPU and phase"
    if cap:
        # a plain shape: add_hline's per-axis processing costs more than the rest of the chart
        fig.add_shape(type="line", xref="paper", x0=0, x1=1, y0=cap, y1=cap, line={"dash": "dash", "color": "red"})
        title += f" — dashed red line: {report.trainer.gpu}, {cap:.0f} GiB"
    fig.update_layout(barmode="stack", height=520, margin={"l": 10, "r": 10, "t": 40, "b": 10}, yaxis_title="GiB",
                      title={"text": title, "font": {"size": 13}},
                      legend={"orientation": "h", "yanchor": "top", "y": -0.25, "font": {"size": 11},
                              "groupclick": "toggleitem"})
    return fig
