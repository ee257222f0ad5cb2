"""Configure: the job form (generated from the spec's declarations), findings beside their fields, the live memory
estimate with one-click fixes, presets, import and export."""

from __future__ import annotations

import plotly.graph_objects as go
import streamlit as st

from grpo_ui import rules, ui_state
from grpo_ui.catalog import ModelArch, from_hf_config, gpus, parse_hf_config
from grpo_ui.check import check
from grpo_ui.findings import SEVERITY_ICON, Finding, has_errors, sort_findings
from grpo_ui.fit import suggest
from grpo_ui.importer import import_uploads
from grpo_ui.memory import MemoryReport, estimate_spec
from grpo_ui.render import render
from grpo_ui.spec import (
    ARGS,
    ARGS_BY_PATH,
    GROUPS,
    SUPPORTED_VERSIONS,
    ClusterSpec,
    JobSpec,
    SlurmSpec,
    SpecError,
    spec_from_yaml,
    spec_to_yaml,
    with_changes,
)

NODE_COLUMNS = ("host", "address", "user", "port", "gpus", "gpu_model", "gpu_memory_gib", "python_env", "role")
ROW = "_node"  # hidden table column: which node of the base spec a row shows (its other fields are kept)


def reset_to(spec: JobSpec) -> None:
    """Make ``spec`` the form's content: forget widget values so they re-initialise from it."""
    st.session_state["base_yaml"] = spec_to_yaml(spec)
    for key in [k for k in st.session_state if str(k).startswith(("f:", "nodes", "cl:"))]:
        del st.session_state[key]


def base_spec() -> JobSpec:
    if "base_yaml" not in st.session_state:
        draft, st.session_state["draft_notice"] = ui_state.open_draft()
        st.session_state["base_yaml"] = st.session_state["saved_yaml"] = spec_to_yaml(draft)
    return spec_from_yaml(st.session_state["base_yaml"])


def field_value(decl, base: JobSpec):
    """The field's form value: what the user set (kept while its section is hidden), else the base spec's."""
    key = "f:" + decl.path
    if key not in st.session_state:
        st.session_state[key] = ui_state.form_value(decl, base)
    return st.session_state[key]


def field_widget(decl, base: JobSpec):
    """The field's widget; its value outlives its section being hidden (persist_state)."""
    field_value(decl, base)
    key, label = "f:" + decl.path, decl.name
    help_text = f"{decl.help}  \nflag: --{decl.flag}" + (f" (ms-swift ≥ {decl.since})" if decl.since else "")
    kind = ui_state.widget_kind(decl)
    if kind == "checkbox":
        return st.checkbox(label, key=key, help=help_text, persist_state="session")
    if kind == "select":
        return st.selectbox(label, ui_state.choices(decl), key=key, help=help_text, persist_state="session",
                            format_func=lambda v: "(ms-swift default)" if v is None else str(v))
    hint = f"e.g. {', '.join(decl.choices)}" if decl.choices else None
    return st.text_input(label, key=key, help=help_text, placeholder=hint, persist_state="session")


def node_rows(base: JobSpec) -> list[dict]:
    rows = []
    for i, n in enumerate(base.cluster.nodes):
        d = n.model_dump()
        d["gpus"] = ",".join(map(str, n.gpus))
        rows.append({**{c: d.get(c) for c in NODE_COLUMNS}, ROW: i})
    return rows


def row_node(base: JobSpec, row: dict, node: dict) -> dict:
    """The node a table row describes: the base node it shows, with its set fields (those the table leaves out, such
    as identity_file, workdir and env, included) and the row's values where they differ; a new row's values."""
    try:
        shown = base.cluster.nodes[int(row.get(ROW))]
    except (TypeError, ValueError, IndexError):  # a row added in the table (None, or NaN)
        return {k: v for k, v in node.items() if v is not None}
    current = shown.model_dump()
    return {**shown.model_dump(exclude_unset=True), **{k: v for k, v in node.items() if v != current.get(k)}}


def build_spec(base: JobSpec, values: dict, nodes: list[dict], cluster: dict,
               slurm: dict | None) -> tuple[JobSpec, dict[str, str]]:
    """The spec the form describes, and the fields whose text does not parse (path → message). Only fields set before
    or changed on the form are set; a value typed over an imported script's unresolved text replaces it. ``slurm``:
    the Slurm fields, when they are drawn."""
    errors: dict[str, str] = {}
    changes = {}
    for path, raw in ui_state.changed_fields(base, values).items():
        decl = ARGS_BY_PATH[path]
        if ui_state.widget_kind(decl) == "text":
            try:
                raw = ui_state.from_text(decl, raw)
            except ValueError as e:
                errors[path] = str(e)
                continue
        changes[path] = raw
    node_list = []
    for i, row in enumerate(nodes):
        if not row.get("host"):
            continue
        try:
            gpus_ = [int(x) for x in str(row.get("gpus") or "0").replace(" ", "").split(",") if x != ""]
        except ValueError:
            errors[f"cluster.nodes[{i}].gpus"] = "GPU ids are integers separated by commas, e.g. 0,1,2,3"
            gpus_ = [0]
        node = {k: (row.get(k) or None) for k in NODE_COLUMNS if k not in ("gpus",)}
        node["role"] = node["role"] or "trainer"
        node["port"] = int(node["port"]) if node["port"] else None
        node_list.append(row_node(base, row, {**node, "gpus": gpus_}))
    changes.update({f"cluster.{k}": v for k, v in cluster.items() if v != getattr(base.cluster, k)})
    changes.update({f"slurm.{k}": v for k, v in (slurm or {}).items() if v != getattr(base.slurm, k)})
    if node_list and node_list != [n.model_dump(exclude_unset=True) for n in base.cluster.nodes]:
        changes["cluster.nodes"] = node_list
    unresolved = {p: t for p, t in base.unresolved.items() if p not in changes}
    if unresolved != base.unresolved:
        changes["unresolved"] = unresolved
    try:
        return with_changes(base, changes), errors
    except SpecError as e:
        errors.update(dict(e.problems))
        return base, errors


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
base = base_spec()
if st.session_state.get("draft_notice"):
    st.warning(st.session_state["draft_notice"])

with st.sidebar:
    st.subheader("Start from")
    preset_names = list(ui_state.presets())
    chosen = st.selectbox("Preset", preset_names, key="preset_choice")
    if st.button("Load preset", width="stretch"):
        reset_to(ui_state.presets()[chosen])
        st.rerun()
    uploads = st.file_uploader("Import launch scripts (one per node, with the config YAML they name) or a job YAML",
                               type=["sh", "bash", "yaml", "yml", "json", "txt"], accept_multiple_files=True)
    pasted = st.text_area("…or paste it", key="import_text", height=100)
    if st.button("Import", width="stretch", disabled=not (uploads or pasted.strip())):
        files = {u.name: u.getvalue() for u in uploads} if uploads else {"pasted": pasted.encode()}
        try:
            imported, notes = import_uploads(files, base.swift_version)
            moved = [f for f in rules.validate(imported) if f.id == "ENV-SECRET-MOVED"]
            st.session_state["import_notes"] = [f.to_dict() for f in [*notes, *moved]]
            reset_to(imported)
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
values = {d.path: field_value(d, base) for d in ARGS if d.group != section}
slots = {}
cols = st.columns(3)
for k, decl in enumerate(d for d in ARGS if d.group == section):
    with cols[k % 3]:
        values[decl.path] = field_widget(decl, base)
        slots[decl.path] = st.empty()
with st.container(border=True):
    st.markdown("**Cluster**")
    st.caption("One row per machine. role trainer runs swift rlhf; role rollout runs swift rollout (server mode).")
    nodes = st.data_editor(node_rows(base), key="nodes", num_rows="dynamic", width="stretch",
                           column_config={
                               "gpu_model": st.column_config.SelectboxColumn("gpu_model", options=sorted(
                                   set(gpus()) | {n.gpu_model for n in base.cluster.nodes if n.gpu_model})),
                               "gpu_memory_gib": st.column_config.NumberColumn(
                                   "GPU GiB", min_value=1, help="memory per GPU, for a GPU the catalogue lacks"),
                               "role": st.column_config.SelectboxColumn("role", options=["trainer", "rollout"]),
                               "port": st.column_config.NumberColumn("ssh port", min_value=1, max_value=65535),
                               "gpus": st.column_config.TextColumn("gpus", help="CUDA ids, e.g. 0,1,2,3"),
                               ROW: None})
    c1, c2, c3 = st.columns(3)
    st.session_state.setdefault("cl:master_addr", base.cluster.master_addr or "")
    st.session_state.setdefault("cl:master_port", base.cluster.master_port)
    st.session_state.setdefault("cl:run_root", base.cluster.run_root)
    cluster = {"master_addr": c1.text_input("master_addr", key="cl:master_addr", help="default: node 0") or None,
               "master_port": c2.number_input("master_port", key="cl:master_port", min_value=1, max_value=65535),
               "run_root": c3.text_input("run_root", key="cl:run_root", help="run directories on every node")}
    st.session_state.setdefault("cl:backend", base.cluster.backend)
    st.session_state.setdefault("cl:login", base.cluster.login)
    c1, c2 = st.columns(2)
    cluster["backend"] = c1.selectbox("backend", ["ssh", "slurm"], key="cl:backend",
                                      help=ClusterSpec.model_fields["backend"].description)
    slurm = None
    if cluster["backend"] == "slurm":
        cluster["login"] = c2.text_input("login node", key="cl:login", help=ClusterSpec.model_fields["login"].description)
        texts, cols = ui_state.section_text(base.slurm), st.columns(4)
        for k, (name, info) in enumerate(SlurmSpec.model_fields.items()):
            st.session_state.setdefault(f"cl:slurm.{name}", texts[name])
            widget = cols[k % 4].text_area if name == "extra_sbatch" else cols[k % 4].text_input
            texts[name] = widget(name, key=f"cl:slurm.{name}", help=info.description)
        slurm = ui_state.section_values(SlurmSpec, texts)
    slots["cluster"] = st.empty()

with st.sidebar:
    st.subheader("Job")
    name = st.text_input("name", value=base.name, key="job_name")
    version = st.selectbox("ms-swift version on the nodes", SUPPORTED_VERSIONS[::-1],
                           index=SUPPORTED_VERSIONS[::-1].index(base.swift_version)
                           if base.swift_version in SUPPORTED_VERSIONS else 0, key="swift_version")

spec, parse_errors = build_spec(base.model_copy(update={"name": name, "swift_version": version}), values,
                                list(nodes), cluster, slurm)
arch = pasted_arch(spec.train.model)
findings = sort_findings(check(spec, arch)) if not parse_errors else []
placed: set[int] = set()
for path, slot in slots.items():
    cluster_wide = ("cluster", "slurm", "spec")
    here = [f for f in findings if any(fp == path or (path == "cluster" and fp.startswith(cluster_wide))
                                       for fp in f.fields)]
    placed.update(id(f) for f in here)
    show_findings(slot, here, parse_errors.get(path) or (
        "; ".join(f"{p}: {m}" for p, m in parse_errors.items() if p.startswith(("cluster", "slurm")))
        if path == "cluster"
        else None))
if not parse_errors and (text := spec_to_yaml(spec)) != st.session_state.get("saved_yaml"):  # changed: autosave
    ui_state.save_draft(spec)
    st.session_state["saved_yaml"] = text

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
            report = estimate_spec(spec, arch=arch)
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
            for k, s in enumerate(suggest(spec, arch=arch)):
                st.button(f"Make it fit: {s.why} → {s.peak_gib:.1f} GiB", key=f"fit:{k}", on_click=apply_fix,
                          args=(spec, s.changes))

    st.subheader("Scripts")
    blocked = has_errors(findings) or bool(parse_errors)
    if blocked:
        st.warning(f"Launch and export are blocked by {len(errors) or len(parse_errors)} error(s) above.")
    c1, c2 = st.columns(2)
    c1.download_button("Download job YAML", spec_to_yaml(spec), file_name=f"{spec.name}.yaml", key="dl_yaml")
    bundle = None if blocked else render(spec, spec.name)
    c2.download_button("Download node scripts (zip)", bundle.zip_bytes() if bundle else b"", disabled=blocked,
                       file_name=f"{spec.name}.zip", key="dl_zip")
