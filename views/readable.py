"""Numbers as people read them on every page: GiB with one decimal, metrics with four significant digits, '—'
for what was not measured (never 54.1300, never a bare None)."""

from __future__ import annotations


def gib(value: float | None) -> str:
    return "—" if value is None else f"{value:.1f}"


def memory_table(rows: list[dict]) -> list[dict]:
    """The estimate-vs-measured rows (grpo_ui.jobs.memory_loop.comparison) with their GiB columns readable."""
    return [{k: gib(v) if "GiB" in k else v for k, v in row.items()} for row in rows]
