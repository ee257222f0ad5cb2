"""Validation: ms-swift's own GRPO checks (argument parsing and trainer init) done up front, plus field advisories.

Each rule is a small function ``(spec, eff) -> findings`` (``eff``: the job's effective values, grpo_ui.spec.resolve)
registered with ``@rule`` in one module per concern, for the engines whose checks it mirrors (swift rlhf's, megatron
rlhf's — megatron.py, ray.py — or both); base.RULES lists every finding id with the ms-swift check or field report it
stands for.
"""

from __future__ import annotations

from dataclasses import replace

from grpo_ui.checks.rules import batch, cluster, credentials, files, inputs, megatron, ray, rewards, rollout, seeds
from grpo_ui.checks.rules.base import RULES, rules_in
from grpo_ui.core.findings import Finding
from grpo_ui.spec.model import JobSpec
from grpo_ui.spec.resolve import Resolved, resolve

__all__ = ["RULES", "validate"]

ORDER = (inputs, megatron, ray, rollout, batch, rewards, cluster, files, credentials, seeds)  # the order findings are reported in


def validate(job: JobSpec | Resolved) -> list[Finding]:
    """Every finding for the job (a spec, or its Resolved values), in rule order."""
    eff = resolve(job)
    return [_after_partial_import(f, eff.spec.import_errors) for module in ORDER
            for check in rules_in(module, eff.engine) for f in check(eff.spec, eff)]


def _after_partial_import(f: Finding, unread: dict[str, str]) -> Finding:
    """A finding about a field a partial import could not read (a dataset lost after an unclosed quote) is a
    consequence: its one-click fix would hide the real problem, so it offers none and says where the value is."""
    if f.id == "IMPORT-PARTIAL" or not set(f.fields) & set(unread):
        return f
    return replace(f, apply={}, fix=f"First restore the value from the script (see IMPORT-PARTIAL); {f.fix}")
