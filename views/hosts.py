"""This browser session's host checks, made on the Cluster page (connection tests by host, the latest preflight),
and what they say about each host of a draft now: the Cluster page's status column and the Configure page's step
indicator read them here, so both tell the same story."""

from __future__ import annotations

import streamlit as st

from grpo_ui.api.cluster import ConnectionTest, HostCheck, HostStatus, PreflightRun, cluster_checks, host_status
from grpo_ui.api.specs import JobSpec


def tests() -> dict[str, ConnectionTest]:
    """The latest connection test of each host, by host name."""
    return st.session_state.setdefault("host_tests", {})


def preflight_run() -> PreflightRun | None:
    return st.session_state.get("preflight_run")


def status(spec: JobSpec, index: int) -> HostStatus:
    return host_status(spec, index, tests().get(spec.cluster.nodes[index].host), preflight_run())


def checks(spec: JobSpec) -> dict[str, HostCheck]:
    return cluster_checks(spec, tests(), preflight_run())
