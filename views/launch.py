"""Launch: the job's plan (resolved once: findings, the memory estimate, the rendered scripts per node with a diff
against node 0, the zip), secrets, and the launch of exactly that plan with per-node progress."""

from __future__ import annotations

import difflib
import time

import streamlit as st

from grpo_ui.core.findings import SEVERITY_ICON, error_list, sort_findings
from grpo_ui.jobs.service import LaunchError
from grpo_ui.launch.plan import LaunchPlan
from grpo_ui.spec.model import JobSpec, SpecError, spec_to_yaml
from views import drafts, runs
from views.service import jobs


def plan_for(spec: JobSpec, job_id: str) -> LaunchPlan:
    """The plan of this spec and job id, made once per change of either (it may read the model's config.json on
    node 0) and kept for the session, so what is shown is what is launched."""
    key = (spec_to_yaml(spec), job_id)
    kept = st.session_state.get("launch_plan")
    if not kept or kept[0] != key:
        kept = st.session_state["launch_plan"] = (key, jobs().plan(spec, job_id))
    return kept[1]


st.title("Launch")
draft = drafts.tab_draft()
spec = draft.spec
st.caption(f"Draft **{draft.name}** (this tab's, as saved on the Configure page)")
job_id = st.text_input("Job id (the run directory on every node)",
                       value=st.session_state.get("launch_id") or f"{spec.name}-{time.strftime('%Y%m%d-%H%M%S')}",
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
if plan.errors:
    st.warning("Fix the errors on the Configure page before launching, or override them with a reason.")
    override = drafts.override_reason(draft.id, "Override: why this is safe to run anyway (kept with the job, shown "
                                      "on Monitor and History)", key=f"launch_override:{draft.id}")
held = bool(plan.errors) and not override
where = (f"Slurm (sbatch on {spec.cluster.login})" if spec.cluster.backend == "slurm"
         else ", ".join(n.host for n in plan.nodes))
st.caption(f"{len(plan.role('trainer'))} trainer node(s), {len(plan.role('rollout'))} rollout server(s) on {where}; "
           f"run directory {plan.run_dir}")
for role in plan.estimate.get("roles", []):
    st.caption(f"Memory estimate kept with the job, {role['role']} GPU: peak {role['peak_gib']} GiB in the "
               f"{role['peak_phase']} phase ({role['verdict']})")
if "error" in plan.estimate:
    st.caption(f"No memory estimate: {plan.estimate['error']}")

names = sorted(bundle.files)
c1, c2 = st.columns([3, 1])
chosen = c1.selectbox("File", names, index=names.index("node_0.sh") if "node_0.sh" in names else 0)
c2.download_button("Download all (zip)", b"" if held else bundle.zip_bytes(), file_name=f"{job_id}.zip",
                   disabled=held, width="stretch")
text = bundle.files[chosen]
if chosen.startswith("node_") and chosen != "node_0.sh":
    diff = list(difflib.unified_diff(bundle.files["node_0.sh"].splitlines(), text.splitlines(), "node_0.sh", chosen,
                                     lineterm="", n=0))
    st.caption(f"Differences from node_0.sh: {sum(1 for d in diff if d[:1] in '+-' and d[:3] not in ('+++', '---'))}"
               " line(s)")
    st.code("\n".join(diff), language="diff")
st.code(text, language="yaml" if chosen.endswith(".yaml") else "bash", wrap_lines=True)
for flags, why in bundle.added:
    st.caption(f"{SEVERITY_ICON['info']} grpo-ui adds `{flags}`: {why}")
notes = [f for f in plan.findings if f.severity != "error"]
for f in sort_findings(notes + [f for f in bundle.findings if f.severity != "error" and f not in notes]):
    st.caption(f"{SEVERITY_ICON[f.severity]} {f.id}: {f.message}")

secrets = {name: st.text_input(f"{name} (secret: sent in a 0600 file, never stored)", type="password",
                               key=f"secret:{name}") for name in spec.secret_env}
check_first = st.checkbox("Run preflight on every node first (its errors stop the launch before anything starts)",
                          value=True, key="launch_preflight")
if st.button("Launch", type="primary", disabled=held):
    failure, steps = None, []  # progress arrives from one thread per host: collect it, show it here
    with st.status(f"Launching {job_id}…", expanded=True) as box:
        try:
            launched = jobs().launch(plan, secrets, lambda host, msg: steps.append(f"**{host}**: {msg}"),
                                     preflight=check_first, override=override)
            for line in steps:
                box.write(line)
            state = jobs().store.job(launched)["state"]
            box.update(label=f"{launched} is {'queued' if state == 'starting' else state}", state="complete")
            st.session_state["monitor_job"] = launched
        except LaunchError as e:
            box.update(label="Launch failed — nothing was left running", state="error")
            failure = str(e)
    if failure:
        st.error(error_list(failure))
if st.session_state.get("monitor_job"):
    st.page_link("views/monitor.py", label=f"Watch {st.session_state['monitor_job']} on the Monitor page", icon="📈")
