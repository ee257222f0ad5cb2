"""The app's one jobs service (grpo_ui.jobs.service), shared by every page and browser session of this process: it follows
running jobs and collects their GPU telemetry, whichever page is open; and the job store the pages read drafts and
past jobs from."""

from __future__ import annotations

import streamlit as st

from grpo_ui.jobs.service import Jobs
from grpo_ui.jobs.store import Store, db_path


@st.cache_resource
def jobs() -> Jobs:
    return Jobs(Store(), telemetry=True)


@st.cache_resource
def _store(path: str) -> Store:
    return Store(path)


def store() -> Store:
    """The job store (jobs, drafts) at the path the environment names now: one per path, shared by the sessions."""
    return _store(str(db_path()))
