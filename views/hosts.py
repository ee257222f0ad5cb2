"""This browser session's host checks, made on the Cluster page (connection tests by host, the latest preflight of
each draft), and what they say about each host of a draft now: the Cluster page's status column and the Configure
page's step indicator read them here, so both tell the same story. A preflight belongs to the draft it checked:
another draft's is never shown, not even as stale."""

from __future__ import annotations

import streamlit as st

from grpo_ui.api.cluster import ConnectionTest, HostCheck, HostStatus, PreflightRun, cluster_checks, host_status
from grpo_ui.api.specs import JobSpec


def tests() -> dict[str, ConnectionTest]:
    """The latest connection test of each host, by host name."""
    return st.session_state.setdefault("host_tests", {})


def preflight_run(draft_id: int) -> PreflightRun | None:
    """The latest preflight of the draft (None: never run on it in this session)."""
    return st.session_state.setdefault("preflight_runs", {}).get(draft_id)


def keep_preflight(draft_id: int, run: PreflightRun) -> None:
    st.session_state.setdefault("preflight_runs", {})[draft_id] = run


def status(spec: JobSpec, draft_id: int, index: int) -> HostStatus:
    return host_status(spec, index, tests().get(spec.cluster.nodes[index].host), preflight_run(draft_id))


def checks(spec: JobSpec, draft_id: int) -> dict[str, HostCheck]:
    return cluster_checks(spec, tests(), preflight_run(draft_id))
