"""SpecError: a job spec that cannot be loaded, with every bad field and why."""

from __future__ import annotations

from grpo_ui.core.errors import UserError


class SpecError(UserError, ValueError):
    """A spec that cannot be loaded; ``problems`` lists (dotted field path, message)."""

    def __init__(self, problems: list[tuple[str, str]], source: str = "spec"):
        self.problems = problems
        lines = [f"{source}: {len(problems)} problem(s)"] + [f"  {p}: {m}" for p, m in problems]
        super().__init__("\n".join(lines))
