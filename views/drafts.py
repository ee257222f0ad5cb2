"""The draft this browser tab edits: its id is in the tab's URL (?draft=<id>) and in the tab's session, so two tabs
work on two drafts and Configure, Cluster and Launch of one tab all use the same one (grpo_ui.drafts)."""

from __future__ import annotations

import streamlit as st

from grpo_ui import drafts
from grpo_ui.drafts import Draft
from grpo_ui.spec import JobSpec, spec_to_yaml
from grpo_ui.store import Store, db_path

FORM_KEYS = ("f:", "nodes", "base_yaml", "saved_yaml", "draft_version")  # the Configure form's state of a draft


@st.cache_resource
def _store(path: str) -> Store:
    return Store(path)


def store() -> Store:
    return _store(str(db_path()))


def forget_form() -> None:
    """Drop the form's state, so Configure re-reads the tab's draft on its next run."""
    for key in [k for k in st.session_state if str(k).startswith(FORM_KEYS)]:
        del st.session_state[key]


def switch_to(draft_id: int) -> None:
    st.session_state["draft_id"] = draft_id
    st.query_params["draft"] = str(draft_id)
    forget_form()


def tab_draft() -> Draft:
    """This tab's draft as stored now (a notice above the page when it had to open another one)."""
    wanted = st.query_params.get("draft") or st.session_state.get("draft_id")
    draft, notice = drafts.open_draft(store(), int(wanted) if str(wanted).isdigit() else None)
    if notice:
        st.warning(notice)
    if st.session_state.get("draft_id") != draft.id:
        switch_to(draft.id)
    st.query_params["draft"] = str(draft.id)  # page links drop the query: put it back
    return draft


def save(draft: Draft, spec: JobSpec) -> bool:
    """Save ``spec`` over ``draft`` (the version this page read); False when another tab saved it first."""
    return store().save_draft(draft.id, spec_to_yaml(spec), draft.version) is not None


def create(name: str, spec: JobSpec) -> None:
    """A new draft, now this tab's."""
    switch_to(drafts.new_draft(store(), name, spec).id)
