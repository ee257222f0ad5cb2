"""The app's one jobs service (grpo_ui.jobs), shared by every page and browser session of this process: it follows
running jobs and collects their GPU telemetry, whichever page is open."""

from __future__ import annotations

import streamlit as st

from grpo_ui.jobs import Jobs
from grpo_ui.store import Store


@st.cache_resource
def jobs() -> Jobs:
    return Jobs(Store(), telemetry=True)
