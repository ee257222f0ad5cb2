"""Launch: the job's plan (resolved once: findings, the memory estimate, the rendered scripts per node with a diff
against node 0 — in ms-swift's Ray mode its Ray config —, the zip; on Ray where the job runs and what is submitted),
secrets, and the launch of exactly that plan with per-node progress."""

from __future__ import annotations

import difflib

import streamlit as st

from grpo_ui.api.cluster import where
from grpo_ui.api.jobs import LaunchError, Unavailable, predictions_of
from grpo_ui.api.specs import (
    JobSpec,
    LaunchPlan,
    SpecError,
    credentials_needed,
    default_job_id,
    duration,
    scripts_text,
    spec_to_yaml,
    submission_text,
    undeclared,
)
from grpo_ui.core.findings import SEVERITY_ICON, error_list, sort_findings, unique
from views import drafts, runs
from views.service import workspace
from views.yaml_code import yaml_code


def plan_for(spec: JobSpec, job_id: str) -> LaunchPlan:
    """The plan of this spec and job id, made once per change of either (it may read the model's config.json on
    node 0) and kept for the session, so what is shown is what is launched."""
    key = (spec_to_yaml(spec), job_id)
    kept = st.session_state.get("launch_plan")
    if not kept or kept[0] != key:
        kept = st.session_state["launch_plan"] = (key, workspace().plan(spec, job_id))
    return kept[1]


st.title("Launch")
draft = drafts.tab_draft()
spec = draft.spec
st.caption(f"Draft **{draft.name}** (this tab's, as saved on the Configure page)")
job_id = st.text_input("Job id (the run directory on every node)",
                       value=st.session_state.get("launch_id") or default_job_id(spec),
                       key="launch_id")
try:
    plan = plan_for(spec, job_id)
except SpecError as e:
    st.error(str(e))
    runs.end_page()
bundle = plan.bundle

for f in plan.errors:
    st.error(f"{f.id}: {f.message} — {f.fix}")
override = None
if plan.assessment.blocked:
    st.warning("Fix the errors on the Configure page before launching, or override them with a reason.")
    override = drafts.override_reason(draft.id, "Override: why this is safe to run anyway (kept with the job, shown "
                                      "on Monitor and History)", key=f"launch_override:{draft.id}")
held = plan.assessment.held(override)
outside = [f"{h}:{p}" for h, p in plan.resolved.server_endpoints] if plan.resolved.server and not plan.role(
    "rollout") else []
if bundle.ray:  # ms-swift's Ray mode: Ray places the roles on the nodes' GPUs
    st.caption(f"ms-swift's Ray mode on {len(plan.nodes)} node(s); run directory {plan.run_dir}")
else:
    st.caption(f"{len(plan.role('trainer'))} trainer node(s), {len(plan.role('rollout'))} rollout server(s) on "
               f"{where(spec)}; run directory {plan.run_dir}")
if spec.cluster.backend == "ray":
    st.markdown("**What is submitted to Ray**")
    st.code(submission_text(plan.resolved, bundle.ray, plan.run_dir) if bundle.ray else scripts_text(plan),
            language=None, wrap_lines=True)
if outside:
    st.caption(f"{SEVERITY_ICON['info']} Rollout server(s) outside this job, which you start: {', '.join(outside)}. "
               f"The trainers wait {spec.rollout.vllm_server_timeout:.0f} s for each to answer /health/; preflight "
               "checks that it does.")
memory, timing = predictions_of(plan)
if isinstance(memory, Unavailable):
    st.caption(f"No memory estimate: {memory.why}")
else:
    for role in memory.roles:
        whose = " (your server's, outside this job)" if role.role == "rollout" and outside else ""
        st.caption(f"Memory estimate kept with the job, {role.role} GPU{whose}: peak {role.peak_gib:.1f} GiB in the "
                   f"{role.peak_phase} phase ({role.verdict})")
if isinstance(timing, Unavailable):
    st.caption(f"No step-time prediction: {timing.why}")
else:
    low, high = timing.range
    run = (f"; {timing.steps:,} steps, {duration(timing.total_h * 3600)}, {timing.gpu_hours:,.0f} GPU-hours"
           if timing.steps else "")
    st.caption(f"Step-time prediction kept with the job: {duration(timing.step_s)} per optimizer step (likely "
               f"{duration(low)} – {duration(high)}){run}")

names = sorted(bundle.files)
c1, c2 = st.columns([3, 1])
first = bundle.ray.config if bundle.ray else "node_0.sh"  # Ray mode: the Ray config, what ms-swift reads
chosen = c1.selectbox("File", names, index=names.index(first) if first in names else 0)
c2.download_button("Download all (zip)", b"" if held else bundle.zip_bytes(), file_name=f"{job_id}.zip",
                   disabled=held, width="stretch")
text = bundle.files[chosen]
if chosen.startswith("node_") and chosen != "node_0.sh":
    diff = list(difflib.unified_diff(bundle.files["node_0.sh"].splitlines(), text.splitlines(), "node_0.sh", chosen,
                                     lineterm="", n=0))
    st.caption(f"Differences from node_0.sh: {sum(1 for d in diff if d[:1] in '+-' and d[:3] not in ('+++', '---'))}"
               " line(s)")
    st.code("\n".join(diff), language="diff")
if chosen.endswith(".yaml"):
    yaml_code(text)
else:
    st.code(text, language="bash", wrap_lines=True)
for flags, why in bundle.added:
    st.caption(f"{SEVERITY_ICON['info']} grpo-ui adds `{flags}`: {why}")
for f in sort_findings(f for f in unique(plan.findings + bundle.findings) if f.severity != "error"):
    st.caption(f"{SEVERITY_ICON[f.severity]} {f.id}: {f.message}")

needs = {c.env: f"{why}: {c.what} reads it on the nodes" for c, why in credentials_needed(spec)}
secrets = {name: st.text_input(f"{name} (secret: sent in a 0600 file, never stored)", type="password",
                               key=f"secret:{name}", help=needs.get(name)) for name in spec.secret_env}
for c, why in undeclared(spec):
    st.warning(f"{why}: {c.what} reads **{c.env}** on the nodes, and this job does not declare it, so there is no "
               f"box for it here. Declare it (CREDENTIAL-UNDECLARED on the Configure page), or make sure every node "
               f"ran `{c.login}`; preflight checks.")
check_first = st.checkbox("Run preflight on every node first (its errors stop the launch before anything starts)",
                          value=True, key="launch_preflight")
if st.button("Launch", type="primary", disabled=held):
    failure, steps = None, []  # progress arrives from one thread per host: collect it, show it here
    with st.status(f"Launching {job_id}…", expanded=True) as box:
        try:
            launched = workspace().launch(plan, secrets, lambda host, msg: steps.append(f"**{host}**: {msg}"),
                                          preflight=check_first, override=override)
            for line in steps:
                box.write(line)
            state = workspace().job(launched).state
            box.update(label=f"{launched} is {'queued' if state == 'starting' else state}", state="complete")
            st.session_state["monitor_job"] = launched
        except LaunchError as e:
            box.update(label="Launch failed — nothing was left running", state="error")
            failure = str(e)
    if failure:
        st.error(error_list(failure))
if st.session_state.get("monitor_job"):
    st.page_link("views/monitor.py", label=f"Watch {st.session_state['monitor_job']} on the Monitor page", icon="📈")
