"""The app's one Workspace (grpo_ui.api.workspace) per job database, shared by every page and browser session of this
process: its jobs service follows running jobs and collects their GPU telemetry, whichever page is open; the pages
read drafts and jobs through it."""

from __future__ import annotations

import streamlit as st

from grpo_ui.api.workspace import Workspace, db_path


@st.cache_resource
def _workspace(path: str) -> Workspace:
    return Workspace(path, telemetry=True)


def workspace() -> Workspace:
    """The workspace of the database the environment names now (GRPO_UI_DB / GRPO_UI_HOME)."""
    return _workspace(str(db_path()))
