"""The draft this browser tab edits: its id is in the tab's URL (?draft=<id>) and in the tab's session, so two tabs
work on two drafts and Configure, Cluster and Launch of one tab all use the same one (grpo_ui.api.workspace)."""

from __future__ import annotations

import streamlit as st

from grpo_ui.api.specs import JobSpec, presets
from grpo_ui.api.workspace import Draft
from views.service import workspace

FORM_KEYS = ("f:", "nodes", "base_yaml", "saved_yaml", "draft_version")  # the Configure form's state of a draft


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
    draft, notice = workspace().open_draft(int(wanted) if str(wanted).isdigit() else None)
    if notice:
        st.warning(notice)
    if st.session_state.get("draft_id") != draft.id:
        switch_to(draft.id)
    st.query_params["draft"] = str(draft.id)  # page links drop the query: put it back
    return draft


def save(draft: Draft, spec: JobSpec) -> bool:
    """Save ``spec`` over ``draft`` (the version this page read); False when another tab saved it first."""
    return workspace().save_draft(draft, spec)


def create(name: str, spec: JobSpec) -> None:
    """A new draft, now this tab's."""
    switch_to(workspace().new_draft(name, spec).id)


def draft_picker(draft: Draft, spec: JobSpec) -> None:
    """Switch, rename, copy or delete this tab's draft; start a new one from a preset (import: below)."""
    st.subheader("Draft")
    listed = {d.id: d.name for d in workspace().drafts()}
    st.session_state["draft_pick"] = draft.id
    st.selectbox("Draft", list(listed), key="draft_pick", format_func=lambda i: f"{listed[i]} (#{i})",
                 on_change=lambda: switch_to(st.session_state["draft_pick"]),
                 help="Each browser tab edits the draft named in its address (?draft=…); edits save themselves.")
    name = st.text_input("Name", value=draft.name, key=f"draft_name:{draft.id}").strip()
    if name and name != draft.name:
        workspace().rename_draft(draft.id, name)
        st.rerun()
    c1, c2 = st.columns(2)
    c1.button("Copy", on_click=create, args=(f"{draft.name} (copy)", spec), width="stretch")
    with c2.popover("Delete", width="stretch"):
        st.write(f"Delete the draft **{draft.name}** for good?")
        st.button("Delete it", key="delete_draft", on_click=delete_draft, args=(draft.id,), type="primary")
    chosen = st.selectbox("New draft from a preset", list(presets()), key="preset_choice")
    st.button("Start from this preset", width="stretch", on_click=create,
              args=(chosen, presets()[chosen]))


def override_reason(draft_id: int, label: str, key: str) -> str | None:
    """The reason given to run this draft despite its blocking problems, or None. It is kept in the session under a
    key of its own (Streamlit drops a widget's state on a page that does not draw it), so Configure and Launch show
    the same reason."""
    kept = f"override_reason:{draft_id}"
    reason = st.text_input(label, value=st.session_state.get(kept, ""), key=key)
    st.session_state[kept] = reason
    return reason.strip() or None


def delete_draft(draft_id: int) -> None:
    workspace().delete_draft(draft_id)
    st.query_params.pop("draft", None)
    st.session_state.pop("draft_id", None)
    forget_form()


def changed_elsewhere(draft: Draft, spec: JobSpec) -> None:
    """The banner of a tab whose draft another tab saved since: reload it, or keep this tab's edits as a new draft."""
    with st.container(border=True):
        st.warning(f"The draft **{draft.name}** was changed in another tab since this tab loaded it. Your edits here "
                   "are not saved over it: reload the draft as saved, or keep your edits as a new draft.")
        c1, c2, _ = st.columns([1, 1, 2])
        c1.button("Reload the draft", on_click=forget_form, type="primary")
        c2.button("Keep my edits as a new draft", on_click=create, args=(f"{draft.name} (my edits)", spec))
