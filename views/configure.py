"""Configure: the guided path in the order the work is done (model and GPUs → cluster → training settings → checks →
scripts → launch) under a step indicator that says what is missing. The form is generated from the spec's
declarations; findings sit beside their fields; the memory estimate, the step-time prediction and scripts are hidden
while the form does not parse, and errors (an OOM verdict too) hold export and launch unless overridden with a
reason."""

from __future__ import annotations

import html
import re

import streamlit as st

from grpo_ui.api.specs import (
    ARGS,
    COMMANDS,
    ESTIMATE_MARGIN,
    GROUPS,
    LAYOUT,
    PASTED,
    ArgDecl,
    Assessment,
    Beside,
    Bundle,
    Decl,
    ImportOutcome,
    JobSpec,
    ModelArch,
    Step,
    assess,
    beside_fields,
    catalog,
    duration,
    form,
    from_hf_config,
    hub_arch,
    import_files,
    job_steps,
    parallel_layout,
    parse_hf_config,
    render,
    spec_from_yaml,
    spec_to_yaml,
    with_changes,
)
from grpo_ui.api.workspace import Draft
from grpo_ui.core.findings import SEVERITY_ICON, by_id, sort_findings
from views import drafts, hosts
from views.memory_chart import memory_chart
from views.time_chart import time_chart


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


def autosave(draft: Draft, spec: JobSpec, text: str) -> bool:
    """Save the form's spec (``text``: its YAML) over the tab's draft when it changed; False (nothing saved) when
    another tab saved the draft since this tab loaded it."""
    if text != st.session_state["saved_yaml"]:
        if not drafts.save(draft, spec):
            return False
        st.session_state["saved_yaml"], st.session_state["draft_version"] = text, draft.version + 1
    return True


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


def field_widget(decl: Decl, base: JobSpec, where=st, label: str | None = None):
    """The field's widget in ``where`` (labelled with its name unless ``label``); its value outlives the widget being
    hidden (persist_state)."""
    value = field_value(decl, base)
    key, label, help_ = "f:" + decl.path, label or decl.name, help_text(decl)
    kind = form.widget_kind(decl)
    if kind == "checkbox":
        return where.checkbox(label, key=key, help=help_, persist_state="session")
    if kind == "select":
        unset = "(ms-swift default)" if isinstance(decl, ArgDecl) else "(not set)"
        return where.selectbox(label, form.choices(decl, [value]), key=key, help=help_, persist_state="session",
                               format_func=lambda v: unset if v is None else str(v))
    if kind == "lines":
        return where.text_area(label, key=key, help=help_, persist_state="session", height=80,
                               placeholder=f"e.g. {', '.join(decl.choices)}" if decl.choices else None)
    return where.text_input(label, key=key, help=help_, persist_state="session",
                            placeholder=f"e.g. {', '.join(decl.choices)}" if decl.choices else None)


def node_column(decl, base: JobSpec):
    """The node table's column for a node setting, from its declaration. A row added in the table starts blank (not
    "None"), with the first node's choices (role, GPU model) and its own gpus still to fill in."""
    kind, help_ = form.column_kind(decl), help_text(decl)
    first = getattr(base.cluster.nodes[0], decl.name) if base.cluster.nodes else None
    if kind == "select":
        options = form.choices(decl, [getattr(n, decl.name) for n in base.cluster.nodes])
        return st.column_config.SelectboxColumn(decl.name, help=help_, default=first,  # unset (None): an empty cell
                                                options=["" if o is None else o for o in options])
    if kind == "checkbox":
        return st.column_config.CheckboxColumn(decl.name, help=help_, default=bool(first))
    return st.column_config.TextColumn(decl.name, help=help_, required=decl.required, default="")


def show_beside(where, beside: Beside) -> None:
    """What goes beside a field (grpo_ui.api.specs.beside_fields), in ``where``: why it does not parse, then each
    finding in full or as a pointer to Checks."""
    lines = ([f"{SEVERITY_ICON['error']} {beside.parse_error}"] if beside.parse_error else []) + [
        f"{SEVERITY_ICON[f.severity]} **{f.id}**" + (f": {f.message} — *{f.fix}*" if full else " — see [4. Checks](#checks)")
        for f, full in beside.findings]
    if lines:
        where.markdown("\n\n".join(lines))


def config_json_import(spec: JobSpec) -> None:
    """Paste or upload the config.json of a model the catalogue does not know: kept with the draft (its YAML too),
    the estimate here and at launch reads the architecture from it."""
    model = spec.train.model
    with st.expander("Model architecture from its config.json", expanded=model not in spec.hf_configs):
        if model in spec.hf_configs:
            st.caption(f"The draft keeps the config.json given for {model}; give another one to replace it.")
        upload = st.file_uploader("config.json", type=["json"], key="config_json_file")
        text = st.text_area("…or paste it", key="config_json_text", height=120)
        if st.button("Use this config.json", disabled=not (upload or text.strip())):
            try:
                cfg = parse_hf_config(upload.getvalue().decode() if upload else text)
                from_hf_config(cfg)  # the fields the estimate needs are there
            except ValueError as e:
                st.error(str(e))
            else:
                apply_fix(spec, {"hf_configs": {**spec.hf_configs, model: cfg}})
                st.rerun()


def engine_picker(base: JobSpec) -> dict:
    """The training engine (swift rlhf, megatron rlhf, megatron rlhf in ms-swift's Ray mode): returns the engine and
    use_ray values it sets."""
    if "f:engine_choice" not in st.session_state:  # set before the widget, so the browser shows it too
        st.session_state["f:engine_choice"] = form.engine_choice(*(field_value(form.FIELDS_BY_PATH[p], base)
                                                                   for p in form.ENGINE_FIELDS))
    choice = st.radio("Training engine", list(form.ENGINE_CHOICES), key="f:engine_choice", horizontal=True,
                      format_func=lambda k: form.ENGINE_CHOICES[k][0],
                      help="swift rlhf: the transformers Trainer with DeepSpeed ZeRO or FSDP. megatron rlhf: "
                           "Megatron-Core's tensor, pipeline, context and expert parallelism (large and MoE models; "
                           "its sizes appear beside the GPUs below). Ray mode: megatron rlhf --use_ray, Ray placing "
                           "the trainers and vLLM on the cluster's GPUs (the Ray backend runs it).")
    return form.ENGINE_CHOICES[choice][1]


def layout_row(base: JobSpec, a: Assessment | None, beside: Beside) -> None:
    """Megatron's parallel sizes beside the training GPUs: the GPUs and the data-parallel size they leave (from the
    assessed job; a dash while the form does not parse), each size's widget, what must divide what and the findings
    on the sizes."""
    layout = parallel_layout(a.resolved) if a else None
    with st.container(border=True, key="megatron_layout"):
        st.markdown("**Megatron layout**", help="Each model replica spans TP·PP·CP GPUs; the training GPUs hold DP = "
                    "GPUs ÷ (TP·PP·CP) replicas. EP splits an MoE's experts, ETP each expert's matrices.")
        cols = st.columns([1.6, 1, 1, 1, 1, 1, 1.6])
        cols[0].metric("Training GPUs", layout.world if layout else "—", help=layout.gpus if layout else None)
        for col, (path, short) in zip(cols[1:-1], form.LAYOUT_FIELDS.items(), strict=True):
            field_widget(form.FIELDS_BY_PATH[path], base, col, label=short)
        cols[-1].metric("Data parallel (DP)", layout.dp if layout else "—",
                        help=f"{layout.dp_text} = {layout.dp}" if layout else None)
        if layout:
            st.caption(f"{layout.gpus} · DP = {layout.dp_text} = {layout.dp}  \n" + "  \n".join(
                f"{':green[✓]' if r.holds else ':red[✗]'} {r.text}" for r in layout.relations))
        show_beside(st, beside)


def ray_cluster_way(base: JobSpec) -> str:
    """The Ray backend's way to a cluster (a form.RAY_CLUSTERS key) as the session holds it: the draft's until the
    user picks one (set before the radio is drawn, so the browser shows it too)."""
    if "f:ray_cluster" not in st.session_state:
        st.session_state["f:ray_cluster"] = form.ray_cluster(field_value(form.FIELDS_BY_PATH["cluster.ray_address"],
                                                                         base))
    return st.session_state["f:ray_cluster"]


def ray_cluster_picker() -> None:
    """The Ray backend's way to a cluster: start one on the job's hosts (the address cleared), or a running one's Jobs
    API address."""
    st.radio("Ray cluster", list(form.RAY_CLUSTERS), key="f:ray_cluster", horizontal=True,
             format_func=lambda k: form.RAY_CLUSTERS[k][0],
             help="Start one: ray start on every node over SSH (node 0 the head), ended when the job ends unless "
                  "kept. A running cluster (yours, or KubeRay's): grpo-ui submits the job to its Jobs API and starts "
                  "nothing there; its nodes are the job's nodes.")


def apply_fix(spec: JobSpec, changes: dict) -> None:
    reset_to(with_changes(spec, changes))


@st.cache_resource(max_entries=64, show_spinner=False)
def assessed(text: str, from_hub: bool, _spec: JobSpec, _arch: ModelArch | None) -> Assessment:
    """The spec's one assessment, by its content (its YAML) and whether the hub gave the model's architecture: an
    unchanged spec is not assessed again, in any session of this process."""
    return assess(_spec, _arch)


@st.cache_resource(max_entries=16, show_spinner=False)
def charts(text: str, from_hub: bool, _a: Assessment) -> tuple[str | None, str | None]:
    """The assessed spec's memory and time charts (SVG), by the same key as its assessment: drawn once."""
    return (memory_chart(_a.memory) if _a.memory else None, time_chart(_a.time) if _a.time else None)


@st.cache_resource(max_entries=16, show_spinner=False)
def rendered(text: str, _a: Assessment, job_id: str) -> Bundle:
    """The assessed spec's scripts (for the downloads and the preview), by the spec's content and the job id."""
    return render(_a, job_id)


@st.cache_resource
def model_sizes() -> dict[str, float]:
    """The catalogue's checkpoints (Hub ids, what --model takes) and their parameters in billions (computed once per
    process)."""
    return {hub_id: arch.total_params() / 1e9 for hub_id, arch in catalog.hub_models().items()}


def model_picker(spec: JobSpec, where) -> None:
    """The catalogue's models with their sizes (type to search, or type any Hugging Face id or path)."""
    sizes = model_sizes()
    current = spec.train.model
    options = list(dict.fromkeys([current, *sizes])) if current else list(sizes)
    known = catalog.find_model(current) if current else None
    where.selectbox("Model", options, index=options.index(current) if current else None, key=f"pick_model:{current}",
                    accept_new_options=True, placeholder="Search the catalogue or type a Hugging Face id",
                    format_func=lambda n: f"{n} · {sizes[n]:.1f} B params" if n in sizes else (
                        f"{n} · {known.total_params() / 1e9:.1f} B params" if n == current and known else n),
                    on_change=lambda: apply_fix(spec, {"train.model": st.session_state[f"pick_model:{current}"]}),
                    help="Any --model ms-swift takes; the catalogue's are estimated from their architecture.")


def gpu_picker(spec: JobSpec, where) -> None:
    """The GPU model of every node (nvidia-smi's name), with its memory: the estimate's capacity."""
    chosen = {n.gpu_model for n in spec.cluster.nodes}
    current = chosen.pop() if len(chosen) == 1 else None
    options = list(dict.fromkeys([*([current] if current else []), *catalog.gpus()]))
    key = f"pick_gpu:{current}"
    where.selectbox("GPU model (every node)", options, index=options.index(current) if current else None, key=key,
                    placeholder="Choose the GPU the nodes have", accept_new_options=True,
                    format_func=lambda g: f"{g} · {card.memory_gib:.0f} GiB" if (card := catalog.find_gpu(g)) else g,
                    on_change=lambda: apply_fix(spec, {f"cluster.nodes[{i}].gpu_model": st.session_state[key]
                                                       for i in range(len(spec.cluster.nodes))}),
                    help="As nvidia-smi names it; per node in the Cluster table below when they differ.")


def memory_metrics(report, spec: JobSpec) -> None:
    """The verdict and each GPU role's peak (its card's size in the label, the headroom below), in one row."""
    cols = st.columns(len(report.roles) + 1)
    cols[0].metric("Verdict", report.verdict.upper(),
                   help=f"FITS: the peak plus the estimate's measured error margin (+{ESTIMATE_MARGIN:.0%} of what it "
                        "models; 9 in 10 published runs stayed within it) fits the card. TIGHT: only without the "
                        "margin. OOM: not even the estimate fits.")
    outside = not spec.rollout_nodes()  # server mode without rollout nodes: the servers are the user's own
    for col, role in zip(cols[1:], report.roles, strict=False):
        card = f" · {role.capacity_gib:.0f} GiB card" if role.capacity_gib else ""
        who = " (your server's)" if role.role == "rollout" and outside else ""
        col.metric(f"{role.role} GPU peak{who}{card}", f"{role.peak_gib:.1f} GiB",
                   delta=None if role.headroom_gib is None else f"{role.headroom_gib:+.1f} GiB headroom",
                   delta_color="normal")
        if role.expected_gib - role.peak_gib > 0.05:
            col.caption(f"nvidia-smi will show about {role.expected_gib:.1f} GiB: torch keeps freed memory cached "
                        "(hatched in the chart) and gives it back before an OOM")


def as_code(value) -> str:
    """A value as inline code that a narrow card breaks only between words (after a dot or an underscore), never
    inside one: HTML, its markdown characters as entities."""
    text = "".join(f"&#{ord(c)};" if c in "_*`[]\\~" else c for c in html.escape(str(value)))
    return '<code style="overflow-wrap: normal">' + re.sub(r"(\.|&#95;)", r"\1<wbr>", text) + "</code>"


def change_list(changes: dict) -> None:
    """A card's changes, one `path` → `value` a line."""
    st.markdown("\n".join(f"- {as_code(path)} → {as_code(value)}" for path, value in changes.items()),
                unsafe_allow_html=True)


def fit_cards(options, spec: JobSpec) -> None:
    """Make-it-fit: each option as a card with the change it makes and the peak it leads to."""
    if not options:
        return
    st.markdown("**Make it fit** — each option alone, with the trainer GPU's peak it leads to:")
    for col, (k, s) in zip(st.columns(len(options)), enumerate(options), strict=True):
        with col.container(border=True):
            st.markdown(f"**{s.peak_gib:.1f} GiB** · {s.verdict.upper()}")
            change_list(s.changes)
            st.caption(s.why)
            st.button("Make it fit: apply", key=f"fit:{k}", on_click=apply_fix, args=(spec, s.changes))


def faster_cards(a: Assessment, spec: JobSpec) -> None:
    """Make it faster: each change that shortens the step and still passes, with the step and the memory verdict it
    leads to; or why there is none."""
    if not a.faster:
        if a.faster_none:
            st.caption(a.faster_none)
        return
    tight = any(f.verdict == "tight" for f in a.faster)
    st.markdown("**Make it faster** — each option alone, with the step time and the memory verdict it leads to; each "
                "passes ms-swift's rules and stays within the card" + (
                    " (TIGHT: not with the estimate's error margin)" if tight else "") + ":")
    for col, (k, f) in zip(st.columns(len(a.faster)), enumerate(a.faster), strict=True):
        with col.container(border=True):
            st.markdown(f"**{duration(f.step_s)}** per step (−{f.saving:.0%}) · {f.verdict.upper()}")
            change_list(f.changes)
            st.caption(f.why)
            st.button("Make it faster: apply", key=f"faster:{k}", on_click=apply_fix, args=(spec, f.changes))


ESTIMATE_FIELDS = [d for d in form.FORM_FIELDS if d.section == "estimate"]


def time_panel(a: Assessment, spec: JobSpec, base: JobSpec, chart: str | None) -> None:
    """Time per optimizer step by phase (``chart``), the run's hours, GPU-hours and cost, what was assumed, the
    estimate settings that change it, and the Make it faster cards."""
    st.markdown("**Time per optimizer step**", help="Predicted from the GPUs' datasheets and the job's shape, with "
                "efficiencies fitted on published GRPO runs (bench/time_accuracy.py measures its error).")
    report = a.time
    if report is None:  # no GPU speed facts (a CPU host), an unknown model
        st.info(a.time_error)
    else:
        low, high = report.range
        run = report.total_h is not None
        cols = st.columns(4)
        wider = "" if report.length_given else " (wider while the completion length is assumed)"
        cols[0].metric("Per step", duration(report.step_s), help=f"Likely {duration(low)} – {duration(high)}{wider}: "
                       f"{report.range_meaning}.")
        cols[1].metric("Run", duration(report.total_h * 3600) if run else "—",
                       help=f"{report.steps:,} optimizer steps" if run else "Set the dataset's rows below, or "
                       "train.max_steps.")
        cols[2].metric("GPU-hours", f"{report.gpu_hours:,.0f}" if run else "—", help=f"{report.gpus} GPUs")
        cols[3].metric("Cost", f"{report.cost:,.0f}" if report.cost is not None else "—",
                       help="GPU-hours × estimate.price_per_gpu_hour")
        st.markdown(chart, unsafe_allow_html=True)
        st.caption("Assumes " + "; ".join(report.assumptions) + ".")
        if not report.length_given:
            st.caption(f"The completion length is the guess the step time depends on most: "
                       f"{report.details['mean_completion']:.0f} tokens assumed, so the range is "
                       f"{duration(low)} – {duration(high)}; give estimate.completion_tokens (below) from a similar "
                       "run's completions/mean_length.")
    with st.container(border=True):
        st.caption("What you expect of the run (unset: assumed, as said above)")
        cols = st.columns(3)  # three a row: each name on one line at 1440 px
        for k, decl in enumerate(ESTIMATE_FIELDS):
            field_widget(decl, base, cols[k % 3])
    faster_cards(a, spec)


def steps_indicator(shown: list[Step]) -> None:
    """Where the user stands (grpo_ui.checks.steps decides each step's state); each step links to where it is
    done."""
    marks = {"done": ":material/check_circle:", "todo": ":material/radio_button_unchecked:",
             "blocked": ":material/block:"}
    for col, step in zip(st.columns(len(shown)), shown, strict=True):
        why = f":green[{step.why}]" if step.state == "done" else f":orange[{step.why}]"
        col.markdown(f"{marks[step.state]} **[{step.label}](#{step.anchor})**  \n{why}")


def run_import(files: dict[str, bytes], version: str, keep_partial: bool = False) -> None:
    """Import the files as a new draft. The outcome replaces the last import's in the session (shown under the paste
    box, a refusal also at the top of the page with the choice to keep what could be read): nothing an earlier
    import said stays beside it."""
    outcome = import_files(files, version, keep_partial=keep_partial)
    st.session_state["last_import"] = {"files": files, "version": version, "outcome": outcome}
    if outcome.spec is not None:
        drafts.create(outcome.spec.name, outcome.spec)


def import_refused_banner(last: dict) -> None:
    """A refused import at the top of the page: what bash or ms-swift would refuse, and the two ways on."""
    with st.container(border=True):
        st.error("**Import refused: no draft was made.** " + " ".join(
            f"{f.message} — *{f.fix}*" for f in last["outcome"].refused))
        c1, c2, _ = st.columns([2, 1, 2])
        c1.button("Keep what could be read as a draft", key="keep_partial", on_click=run_import,
                  args=(last["files"], last["version"], True),
                  help="A new draft with what comes before the problem; it says at the top what is missing, and "
                       "launch is held until each missing field is filled in.")
        c2.button("Dismiss", key="dismiss_refused", on_click=lambda: st.session_state.update(last_import=None))


def import_outcome(outcome: ImportOutcome) -> None:
    """Under the paste box: why the last import made no draft, or the notes of the draft it made."""
    for f in outcome.refused:
        st.error(f"{f.message} — *{f.fix}*")
    if outcome.error:
        st.error(outcome.error)
    for note in outcome.notes:
        st.caption(f"{SEVERITY_ICON[note.severity]} {note.message}")


def partial_import_banner(spec: JobSpec) -> None:
    """A draft kept from a refused import says so at the top until every field it could not read is filled in."""
    fields = [p for p in spec.import_errors if p != "spec"]
    lines = [f"- `{p}`: {m}" for p, m in spec.import_errors.items()]
    st.error("**This draft is a partial import.** What the script says here could not be read; fill in "
             + (", ".join(f"`{p}`" for p in fields) or "the fields") + " (marked below) before launching:\n"
             + "\n".join(lines))
    if "spec" in spec.import_errors:
        st.button("I have checked the draft against the script", key="partial_checked", on_click=apply_fix,
                  args=(spec, {"import_errors": {k: v for k, v in spec.import_errors.items() if k != "spec"}}))


def override_box(draft_id: int, count: int) -> str | None:
    """An explicit override of blocking problems: the reason the user gives (kept with the job at launch), or None."""
    with st.expander(f"Override: export and launch despite {count} blocking problem(s)"):
        return drafts.override_reason(draft_id, "Why this is safe to run anyway (kept with the job, shown on Monitor "
                                      "and History)", key=f"override:{draft_id}")


# ---------------------------------------------------------------------------------------------------------------

st.title("Configure a GRPO job")
draft = drafts.tab_draft()
base = base_spec(draft)
notice_slot, conflict_slot, picker_slot = st.container(), st.empty(), st.sidebar.container()
steps_slot = st.container()

with st.sidebar:
    st.subheader("Import")
    uploads = st.file_uploader("Launch scripts (one per node, with the config YAML they name) or a job YAML: a new "
                               "draft", type=["sh", "bash", "yaml", "yml", "json", "txt"], accept_multiple_files=True)
    pasted = st.text_area("…or paste it", key="import_text", height=100)
    if st.button("Import", width="stretch", disabled=not (uploads or pasted.strip())):
        run_import({u.name: u.getvalue() for u in uploads} if uploads else {PASTED: pasted.encode()},
                   base.swift_version)
        if st.session_state["last_import"]["outcome"].spec is not None:
            st.rerun()
    if last := st.session_state.get("last_import"):
        import_outcome(last["outcome"])

st.subheader("1. Model and GPUs", anchor="model")
model_col, gpu_col = st.columns(2)
model_slot, config_slot = model_col.container(), model_col.container()
gpu_slot = gpu_col.container()
engine_values = engine_picker(base)
engine = engine_values["engine"]
engine_slots = {path: st.empty() for path in form.ENGINE_FIELDS}  # its findings: the job is assessed further down

st.subheader("2. Cluster", anchor="cluster")
with st.container(border=True):
    st.caption(f"One row per machine. role trainer runs {COMMANDS[engine]}; role rollout runs swift rollout "
               "(server mode; in Ray mode, the rollout's own GPUs). Hosts from ~/.ssh/config can be added on the "
               "Cluster page.")
    nodes = st.data_editor(form.node_rows(base), key="nodes", num_rows="dynamic", width="stretch",
                           column_order=form.node_columns(),
                           column_config={**{d.name: node_column(d, base) for d in form.NODE_FIELDS}, form.ROW: None})
    # The job as the form holds it now (each widget's value is in the session before it is drawn), assessed once
    # before the fields are drawn, so what is said of a field is drawn right after it (only the engine's, drawn
    # above the node table the job needs, goes into placeholders).
    backend, version = (field_value(form.FIELDS_BY_PATH[path], base) for path in ("cluster.backend", "swift_version"))
    ray_way = ray_cluster_way(base) if backend == "ray" else None
    offered = form.sections(base, version, engine)  # the other engine's (Megatron's) only when set
    if st.session_state.get("section") not in offered:
        st.session_state["section"] = offered[0]
    cluster_fields = {part: [d for d in form.FORM_FIELDS if d.section == part and d.applies in (None, backend)
                             and (d.path not in form.RAY_SETTINGS or ray_way and d.path in form.RAY_CLUSTERS[ray_way][1])]
                      for part in ("cluster", "slurm")}  # settings for the other backend (or way to Ray): hidden
    section_fields = [d for d in ARGS if d.group == st.session_state["section"] and d.path not in form.apart(engine)
                      and form.on_form(d, base, version, engine)]
    job_fields = [d for d in form.FORM_FIELDS if d.section == "job" and d.path not in form.ENGINE_FIELDS]
    values = {d.path: field_value(d, base) for d in form.FORM_FIELDS} | engine_values  # a hidden one: as last set
    if ray_way == "start":
        values["cluster.ray_address"] = ""
    spec, parse_errors = form.build_spec(base, values, list(nodes))
    text = spec_to_yaml(spec)
    arch, hub_error = (None, None) if parse_errors else hub_arch(spec)
    a = None if parse_errors else assessed(text, arch is not None, spec, arch)  # values, findings, memory, time
    findings = by_id(sort_findings(a.findings)) if a else []
    beside = beside_fields(a.findings if a else [], ["cluster", *form.ENGINE_FIELDS, LAYOUT,
                                                     *(d.path for d in section_fields + job_fields)], parse_errors)
    for path, slot in engine_slots.items():
        show_beside(slot, beside[path])
    if engine == "megatron":
        layout_row(base, a, beside[LAYOUT])
    if ray_way:
        ray_cluster_picker()
    for part, shown in cluster_fields.items():
        if part == "slurm" and shown:
            st.markdown("**Slurm**")
        cols = st.columns(4)
        for k, decl in enumerate(shown):
            field_widget(decl, base, cols[k % 4])
    show_beside(st, beside["cluster"])

st.subheader("3. Training settings", anchor="training")
# Only the chosen section's widgets are drawn (each Streamlit widget costs time that grows with the whole form);
# the others keep their values in the session.
st.segmented_control("Section", offered, format_func=GROUPS.get, key="section", required=True,  # its value: above
                     persist_state="session", label_visibility="collapsed")
cols = st.columns(3)
for k, decl in enumerate(section_fields):
    with cols[k % 3]:
        field_widget(decl, base)
        show_beside(st, beside[decl.path])

with st.sidebar:
    st.subheader("Job")
    for decl in job_fields:
        field_widget(decl, base)
        show_beside(st, beside[decl.path])

with notice_slot:
    if (last := st.session_state.get("last_import")) and last["outcome"].refused:
        import_refused_banner(last)
    if spec.import_errors:
        partial_import_banner(spec)
if draft.version != st.session_state["draft_version"] or not parse_errors and not autosave(draft, spec, text):
    with conflict_slot:
        drafts.changed_elsewhere(draft, spec)
with picker_slot:
    drafts.draft_picker(draft, spec)
model_picker(spec, model_slot)
gpu_picker(spec, gpu_slot)

st.subheader("4. Checks", anchor="checks")
report = None
if parse_errors:  # what is below would describe an older form: hidden, never the last verdict
    st.error("Fix the fields that do not parse — " + "; ".join(f"{p}: {m}" for p, m in parse_errors.items())
             + ". The checks, the memory estimate, the step time and the scripts are hidden until then.")
else:
    st.markdown("**GPU memory per device**")
    report = a.memory
    memory_svg, time_svg = charts(text, arch is not None, a)
    if report is None:  # an unknown model or GPU, an unreadable DeepSpeed/FSDP config
        st.info(a.memory_error)
    else:  # the metrics across the page's width: nothing of them is cut at 1440 px
        memory_metrics(report, spec)
    left, right = st.columns([3, 2])
    with right:
        st.markdown("**Findings**")
        if not findings:
            st.success("No findings: ms-swift's checks pass for this configuration.")
        for f in findings:
            with st.expander(f"{SEVERITY_ICON[f.severity]} {f.id} — {', '.join(f.fields)}", expanded=f.severity == "error"):
                st.write(f.message)
                st.caption(f"Fix: {f.fix}")
                if f.apply:
                    st.button("Apply fix", key=f"fix:{f.id}", on_click=apply_fix, args=(spec, f.apply))
    with left:
        if report:
            for note in dict.fromkeys(n for r in report.roles for n in r.notes):
                where = " Choose it in [1. Model and GPUs](#model)." if note.startswith("No GPU model chosen") else ""
                st.caption(f"{SEVERITY_ICON['warning']} {note}{where}")
            st.markdown(memory_svg, unsafe_allow_html=True)
    if report:
        fit_cards(a.suggestions, spec)
    time_panel(a, spec, base, time_svg)
if a and spec.train.model and (a.resolved.arch is None or spec.train.model in spec.hf_configs):  # unknown, or known from it
    with config_slot:
        if hub_error:
            st.caption(f"{SEVERITY_ICON['warning']} {hub_error}")
        config_json_import(spec)

st.subheader("5. Scripts", anchor="scripts")
blockers = len(parse_errors) or len([f for f in findings if f.severity == "error"])
override = None
if parse_errors:
    st.warning("No scripts: the form has fields that do not parse (above).")
elif blockers:
    st.warning(f"Export and launch are blocked by {blockers} error(s) in the checks above: fix them (most offer a "
               "one-click fix), or override with a reason.")
    override = override_box(draft.id, blockers)
c1, c2 = st.columns(2)
held = bool(parse_errors) or a.held(override)
c1.download_button("Download job YAML", text, file_name=f"{spec.name}.yaml", key="dl_yaml",
                   disabled=held)
with steps_slot:
    steps_indicator(job_steps(spec, a, parse_errors, held, bool(override), hosts.checks(spec, draft.id)))
bundle = None if parse_errors or held else rendered(text, a, spec.name)
c2.download_button("Download node scripts (zip)", bundle.zip_bytes() if bundle else b"", disabled=held,
                   file_name=f"{spec.name}.zip", key="dl_zip")
if bundle:
    first = "node_0.sh" if "node_0.sh" in bundle.files else sorted(bundle.files)[0]
    preview = st.expander(f"{first} (the Launch page shows every file)", key="script_preview", on_change="rerun")
    if preview.open:  # drawn when opened: a closed one sends nothing, and loads no highlighter
        preview.code(bundle.files[first], language="bash", wrap_lines=True)

st.subheader("6. Launch", anchor="launch")
if held:
    st.caption("Launch is blocked until the checks pass (or an override reason is given above).")
st.page_link("views/launch.py", label="Review every node's script and launch on the Launch page", icon=":material/rocket_launch:",
             disabled=held)
