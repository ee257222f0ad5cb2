"""Configure: the job form (generated from the spec's declarations), findings beside their fields, the live memory
estimate with one-click fixes, presets, import and export."""

from __future__ import annotations

import plotly.graph_objects as go
import streamlit as st

from grpo_ui import form, rules, ui_state
from grpo_ui.catalog import ModelArch, from_hf_config, parse_hf_config
from grpo_ui.check import check
from grpo_ui.drafts import Draft
from grpo_ui.findings import SEVERITY_ICON, Finding, has_errors, sort_findings
from grpo_ui.fit import suggest
from grpo_ui.importer import import_uploads
from grpo_ui.memory import MemoryReport, estimate_spec
from grpo_ui.render import render
from grpo_ui.resolve import resolve
from grpo_ui.spec import ARGS, GROUPS, ArgDecl, Decl, JobSpec, SpecError, spec_from_yaml, spec_to_yaml, with_changes
from views import drafts


def reset_to(spec: JobSpec) -> None:
    """Make ``spec`` the form's content: forget widget values so they re-initialise from it."""
    st.session_state["base_yaml"] = spec_to_yaml(spec)
    for key in [k for k in st.session_state if str(k).startswith(("f:", "nodes"))]:
        del st.session_state[key]


def base_spec(draft: Draft) -> JobSpec:
    """The spec the form starts from: the tab's draft as this tab loaded it (or as a fix or import left it)."""
    if "base_yaml" not in st.session_state:
        st.session_state["base_yaml"] = st.session_state["saved_yaml"] = spec_to_yaml(draft.spec)
        st.session_state["draft_version"] = draft.version
    return spec_from_yaml(st.session_state["base_yaml"])


def autosave(draft: Draft, spec: JobSpec) -> bool:
    """Save the form's spec over the tab's draft when it changed; False (nothing saved) when another tab saved the
    draft since this tab loaded it."""
    if (text := spec_to_yaml(spec)) != st.session_state["saved_yaml"]:
        if not drafts.save(draft, spec):
            return False
        st.session_state["saved_yaml"], st.session_state["draft_version"] = text, draft.version + 1
    return True


def draft_picker(draft: Draft, spec: JobSpec) -> None:
    """Switch, rename, copy or delete this tab's draft; start a new one from a preset (import: below)."""
    st.subheader("Draft")
    listed = {d["id"]: d["name"] for d in drafts.store().drafts()}
    st.session_state["draft_pick"] = draft.id
    st.selectbox("Draft", list(listed), key="draft_pick", format_func=lambda i: f"{listed[i]} (#{i})",
                 on_change=lambda: drafts.switch_to(st.session_state["draft_pick"]),
                 help="Each browser tab edits the draft named in its address (?draft=…); edits save themselves.")
    name = st.text_input("Name", value=draft.name, key=f"draft_name:{draft.id}")
    if name.strip() and name != draft.name:
        drafts.store().rename_draft(draft.id, name.strip())
        st.rerun()
    c1, c2 = st.columns(2)
    c1.button("Copy", on_click=drafts.create, args=(f"{draft.name} (copy)", spec), width="stretch")
    with c2.popover("Delete", width="stretch"):
        st.write(f"Delete the draft **{draft.name}** for good?")
        st.button("Delete it", key="delete_draft", on_click=delete_draft, args=(draft.id,), type="primary")
    chosen = st.selectbox("New draft from a preset", list(ui_state.presets()), key="preset_choice")
    st.button("Start from this preset", width="stretch", on_click=drafts.create,
              args=(chosen, ui_state.presets()[chosen]))


def delete_draft(draft_id: int) -> None:
    drafts.store().delete_draft(draft_id)
    st.query_params.pop("draft", None)
    st.session_state.pop("draft_id", None)
    drafts.forget_form()


def changed_elsewhere(draft: Draft, spec: JobSpec) -> None:
    """The banner of a tab whose draft another tab saved since: reload it, or keep this tab's edits as a new draft."""
    with st.container(border=True):
        st.warning(f"The draft **{draft.name}** was changed in another tab since this tab loaded it. Your edits here "
                   "are not saved over it: reload the draft as saved, or keep your edits as a new draft.")
        c1, c2, _ = st.columns([1, 1, 2])
        c1.button("Reload the draft", on_click=drafts.forget_form, type="primary")
        c2.button("Keep my edits as a new draft", on_click=drafts.create, args=(f"{draft.name} (my edits)", spec))


def field_value(decl: Decl, base: JobSpec):
    """The field's form value: what the user set (kept while its widget is hidden), else the base spec's."""
    key = "f:" + decl.path
    if key not in st.session_state:
        st.session_state[key] = form.form_value(decl, base)
    return st.session_state[key]


def help_text(decl: Decl) -> str:
    if isinstance(decl, ArgDecl):
        return f"{decl.help}  \nflag: --{decl.flag}" + (f" (ms-swift ≥ {decl.since})" if decl.since else "") + (
            f"; acts in {decl.applies} mode only" if decl.applies else "")
    return decl.help + (f"  \n({decl.applies} backend only)" if decl.applies else "")


def field_widget(decl: Decl, base: JobSpec, where=st):
    """The field's widget in ``where``; its value outlives the widget being hidden (persist_state)."""
    value = field_value(decl, base)
    key, label, help_ = "f:" + decl.path, decl.name, help_text(decl)
    kind = form.widget_kind(decl)
    if kind == "checkbox":
        return where.checkbox(label, key=key, help=help_, persist_state="session")
    if kind == "select":
        unset = "(ms-swift default)" if isinstance(decl, ArgDecl) else "(not set)"
        return where.selectbox(label, form.choices(decl, [value]), key=key, help=help_, persist_state="session",
                               format_func=lambda v: unset if v is None else str(v))
    if kind == "lines":
        return where.text_area(label, key=key, help=help_, persist_state="session", height=80)
    return where.text_input(label, key=key, help=help_, persist_state="session",
                            placeholder=f"e.g. {', '.join(decl.choices)}" if decl.choices else None)


def node_column(decl, base: JobSpec):
    """The node table's column for a node setting, from its declaration."""
    kind, help_ = form.column_kind(decl), help_text(decl)
    if kind == "select":
        options = form.choices(decl, [getattr(n, decl.name) for n in base.cluster.nodes])
        return st.column_config.SelectboxColumn(decl.name, help=help_, options=[o for o in options if o is not None])
    if kind == "checkbox":
        return st.column_config.CheckboxColumn(decl.name, help=help_)
    if kind == "number":
        b = decl.bounds
        return st.column_config.NumberColumn(decl.name, help=help_, min_value=b.get("ge", b.get("gt")),
                                             max_value=b.get("le", b.get("lt")),
                                             step=1 if form.is_integer(decl) else None)
    return st.column_config.TextColumn(decl.name, help=help_, required=decl.required)


def memory_chart(report: MemoryReport) -> go.Figure:
    fig = go.Figure()
    bars = [(f"{r.role} GPU · {p.name}", p, r) for r in report.roles for p in r.phases]
    names = list(dict.fromkeys(t.name for _, p, _ in bars for t in p.terms if t.gib > 0.01))
    for name in names:
        fig.add_bar(name=name, x=[b[0] for b in bars],
                    y=[sum(t.gib for t in p.terms if t.name == name) for _, p, _ in bars])
    cap = report.trainer.capacity_gib
    if cap:
        # a plain shape and annotation: add_hline's per-axis processing costs more than the rest of the chart
        fig.add_shape(type="line", xref="paper", x0=0, x1=1, y0=cap, y1=cap, line={"dash": "dash", "color": "red"})
        fig.add_annotation(xref="paper", x=1, y=cap, text=f"{report.trainer.gpu}: {cap:.0f} GiB", showarrow=False,
                           xanchor="right", yanchor="bottom")
    fig.update_layout(barmode="stack", height=380, margin={"l": 10, "r": 10, "t": 30, "b": 10}, yaxis_title="GiB per GPU",
                      legend={"font": {"size": 10}})
    return fig


def show_findings(slot, findings: list[Finding], parse_error: str | None = None) -> None:
    lines = ([f"{SEVERITY_ICON['error']} {parse_error}"] if parse_error else []) + [
        f"{SEVERITY_ICON[f.severity]} **{f.id}**: {f.message} — *{f.fix}*" for f in findings]
    if lines:
        slot.markdown("\n\n".join(lines))


def pasted_arch(model: str) -> ModelArch | None:
    """The architecture from a config.json the user gave for this model (kept in the session), or None."""
    pasted = st.session_state.get("model_config")
    return from_hf_config(pasted[1], name=model.split("/")[-1]) if pasted and pasted[0] == model else None


def config_json_import(model: str) -> None:
    """Paste or upload the model's config.json when the catalogue does not know it (the estimate then uses it)."""
    with st.expander("Model architecture from its config.json", expanded=pasted_arch(model) is None):
        upload = st.file_uploader("config.json", type=["json"], key="config_json_file")
        text = st.text_area("…or paste it", key="config_json_text", height=120)
        if st.button("Use this config.json", disabled=not (upload or text.strip())):
            try:
                cfg = parse_hf_config(upload.getvalue().decode() if upload else text)
                from_hf_config(cfg)  # the fields the estimate needs are there
            except ValueError as e:
                st.error(str(e))
            else:
                st.session_state["model_config"] = (model, cfg)
                st.rerun()


def apply_fix(spec: JobSpec, changes: dict) -> None:
    reset_to(with_changes(spec, changes))


# ---------------------------------------------------------------------------------------------------------------

st.title("Configure a GRPO job")
draft = drafts.tab_draft()
base = base_spec(draft)
conflict_slot, picker_slot = st.empty(), st.sidebar.container()

with st.sidebar:
    uploads = st.file_uploader("Import launch scripts (one per node, with the config YAML they name) or a job YAML",
                               type=["sh", "bash", "yaml", "yml", "json", "txt"], accept_multiple_files=True)
    pasted = st.text_area("…or paste it", key="import_text", height=100)
    if st.button("Import", width="stretch", disabled=not (uploads or pasted.strip())):
        files = {u.name: u.getvalue() for u in uploads} if uploads else {"pasted": pasted.encode()}
        try:
            imported, notes = import_uploads(files, base.swift_version)
            moved = [f for f in rules.validate(imported) if f.id == "ENV-SECRET-MOVED"]
            st.session_state["import_notes"] = [f.to_dict() for f in [*notes, *moved]]
            drafts.create(imported.name, imported)
            st.rerun()
        except SpecError as e:
            st.error(str(e))
    for note in st.session_state.get("import_notes", []):
        st.caption(f"{SEVERITY_ICON[note['severity']]} {note['message']}")

top = st.container()
# Only the chosen section's widgets are drawn (each Streamlit widget costs time that grows with the whole form);
# the others keep their values in the session.
section = st.segmented_control("Section", list(GROUPS), format_func=GROUPS.get, key="section", required=True,
                               default=next(iter(GROUPS)), persist_state="session", label_visibility="collapsed")
values, slots = {}, {}
cols = st.columns(3)
for k, decl in enumerate(d for d in ARGS if d.group == section):
    with cols[k % 3]:
        values[decl.path] = field_widget(decl, base)
        slots[decl.path] = st.empty()
with st.container(border=True):
    st.markdown("**Cluster**")
    st.caption("One row per machine. role trainer runs swift rlhf; role rollout runs swift rollout (server mode).")
    nodes = st.data_editor(form.node_rows(base), key="nodes", num_rows="dynamic", width="stretch",
                           column_config={**{d.name: node_column(d, base) for d in form.NODE_FIELDS}, form.ROW: None})
    backend = field_value(form.FIELDS_BY_PATH["cluster.backend"], base)  # settings for the other backend: hidden
    for part in ("cluster", "slurm"):
        shown = [d for d in form.FORM_FIELDS if d.section == part and d.applies in (None, backend)]
        if part == "slurm" and shown:
            st.markdown("**Slurm**")
        cols = st.columns(4)
        for k, decl in enumerate(shown):
            values[decl.path] = field_widget(decl, base, cols[k % 4])
    slots["cluster"] = st.empty()

with st.sidebar:
    st.subheader("Job")
    for decl in (d for d in form.FORM_FIELDS if d.section == "job"):
        values[decl.path] = field_widget(decl, base)
        slots[decl.path] = st.empty()

values = {d.path: field_value(d, base) for d in form.FORM_FIELDS} | values  # hidden ones: as last set
spec, parse_errors = form.build_spec(base, values, list(nodes))
arch = pasted_arch(spec.train.model)
eff = resolve(spec, arch)  # the job's effective values, for every step below
findings = sort_findings(check(eff)) if not parse_errors else []
for path, slot in slots.items():
    cluster_wide = ("cluster", "slurm", "spec")
    here = [f for f in findings if any(fp == path or (path == "cluster" and fp.startswith(cluster_wide))
                                       for fp in f.fields)]
    show_findings(slot, here, parse_errors.get(path) or (
        "; ".join(f"{p}: {m}" for p, m in parse_errors.items() if p.startswith(("cluster", "slurm")))
        if path == "cluster"
        else None))
if draft.version != st.session_state["draft_version"] or not parse_errors and not autosave(draft, spec):
    with conflict_slot:
        changed_elsewhere(draft, spec)
with picker_slot:
    draft_picker(draft, spec)

with top:
    errors = [f for f in findings if f.severity == "error"]
    left, right = st.columns([3, 2])
    with right:
        st.subheader("Findings")
        if parse_errors:
            st.error("Fix the highlighted fields: " + ", ".join(parse_errors))
        elif not findings:
            st.success("No findings: ms-swift's checks pass for this configuration.")
        for f in findings:
            with st.expander(f"{SEVERITY_ICON[f.severity]} {f.id} — {', '.join(f.fields)}", expanded=f.severity == "error"):
                st.write(f.message)
                st.caption(f"Fix: {f.fix}")
                if f.apply:
                    st.button("Apply fix", key=f"fix:{f.id}:{','.join(f.fields)}", on_click=apply_fix,
                              args=(spec, f.apply))
    with left:
        st.subheader("GPU memory per device")
        try:
            report = estimate_spec(eff)
        except ValueError as e:  # an unknown model or GPU, an unreadable DeepSpeed/FSDP config
            report = None
            st.info(str(e))
        if arch or not report:
            config_json_import(spec.train.model)
        if report:
            cols = st.columns(len(report.roles) + 1)
            cols[0].metric("Verdict", report.verdict.upper())
            for col, role in zip(cols[1:], report.roles, strict=False):
                cap = f" of {role.capacity_gib:.0f}" if role.capacity_gib else ""
                col.metric(f"{role.role} GPU peak", f"{role.peak_gib:.1f}{cap} GiB",
                           delta=None if role.headroom_gib is None else f"{role.headroom_gib:+.1f} GiB headroom",
                           delta_color="normal")
            st.plotly_chart(memory_chart(report), width="stretch")
            for note in (n for r in report.roles for n in r.notes):
                st.caption(f"{SEVERITY_ICON['warning']} {note}")
            for k, s in enumerate(suggest(eff)):
                st.button(f"Make it fit: {s.why} → {s.peak_gib:.1f} GiB", key=f"fit:{k}", on_click=apply_fix,
                          args=(spec, s.changes))

    st.subheader("Scripts")
    blocked = has_errors(findings) or bool(parse_errors)
    if blocked:
        st.warning(f"Launch and export are blocked by {len(errors) or len(parse_errors)} error(s) above.")
    c1, c2 = st.columns(2)
    c1.download_button("Download job YAML", spec_to_yaml(spec), file_name=f"{spec.name}.yaml", key="dl_yaml")
    bundle = None if blocked else render(eff, spec.name)
    c2.download_button("Download node scripts (zip)", bundle.zip_bytes() if bundle else b"", disabled=blocked,
                       file_name=f"{spec.name}.zip", key="dl_zip")
