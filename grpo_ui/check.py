"""All findings for a spec before anything runs: ms-swift's rules, field advisories and the target dialect."""

from __future__ import annotations

from grpo_ui import rules
from grpo_ui.findings import Finding
from grpo_ui.spec import JobSpec
from grpo_ui.swift_cli import rollout_command, train_command


def check(spec: JobSpec) -> list[Finding]:
    """rules.validate + what the argv rendering for the target version reports, without duplicates."""
    found = list(rules.validate(spec)) + train_command(spec).findings
    if spec.rollout.use_vllm and spec.rollout.vllm_mode == "server" and spec.rollout_nodes():
        found += rollout_command(spec).findings
    seen, out = set(), []
    for f in found:
        key = (f.id, f.fields)
        if key not in seen:
            seen.add(key)
            out.append(f)
    return out
