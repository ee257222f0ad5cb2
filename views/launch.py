"""Launch: the rendered scripts per node with a diff against node 0, the zip, secrets, launch with per-node
progress, and stop."""

from __future__ import annotations

import difflib
import time

import streamlit as st

from grpo_ui import ui_state
from grpo_ui.backends.jobs import launcher_for
from grpo_ui.check import check
from grpo_ui.findings import SEVERITY_ICON, has_errors, sort_findings
from grpo_ui.remote.launcher import LaunchError
from grpo_ui.remote.ssh import Pool
from grpo_ui.render import render
from grpo_ui.spec import SpecError
from grpo_ui.store import Store


@st.cache_resource
def store_and_pool() -> tuple[Store, Pool]:
    return Store(), Pool()


st.title("Launch")
spec, notice = ui_state.open_draft()
if notice:
    st.warning(notice)
findings = sort_findings(check(spec))
errors = [f for f in findings if f.severity == "error"]
job_id = st.text_input("Job id (the run directory on every node)",
                       value=st.session_state.get("launch_id") or f"{spec.name}-{time.strftime('%Y%m%d-%H%M%S')}",
                       key="launch_id")
try:
    bundle = render(spec, job_id)
except SpecError as e:
    st.error(str(e))
    st.stop()

for f in errors:
    st.error(f"{f.id}: {f.message} — {f.fix}")
if errors:
    st.warning("Fix the errors on the Configure page before launching.")

names = sorted(bundle.files)
c1, c2 = st.columns([3, 1])
chosen = c1.selectbox("File", names, index=names.index("node_0.sh") if "node_0.sh" in names else 0)
c2.download_button("Download all (zip)", bundle.zip_bytes(), file_name=f"{job_id}.zip", disabled=has_errors(findings),
                   width="stretch")
text = bundle.files[chosen]
if chosen.startswith("node_") and chosen != "node_0.sh":
    diff = list(difflib.unified_diff(bundle.files["node_0.sh"].splitlines(), text.splitlines(), "node_0.sh", chosen,
                                     lineterm="", n=0))
    st.caption(f"Differences from node_0.sh: {sum(1 for d in diff if d[:1] in '+-' and d[:3] not in ('+++', '---'))}"
               " line(s)")
    st.code("\n".join(diff), language="diff")
st.code(text, language="yaml" if chosen.endswith(".yaml") else "bash")
for flags, why in bundle.added:
    st.caption(f"{SEVERITY_ICON['info']} grpo-ui adds `{flags}`: {why}")
for f in (f for f in bundle.findings if f.severity != "error"):
    st.caption(f"{SEVERITY_ICON[f.severity]} {f.id}: {f.message}")

secrets = {name: st.text_input(f"{name} (secret: sent in a 0600 file, never stored)", type="password",
                               key=f"secret:{name}") for name in spec.secret_env}
check_first = st.checkbox("Run preflight on every node first (its errors stop the launch before anything starts)",
                          value=True, key="launch_preflight")
if st.button("Launch", type="primary", disabled=bool(errors)):
    failure, steps = None, []  # progress arrives from one thread per host: collect it, show it here
    with st.status(f"Launching {job_id}…", expanded=True) as box:
        try:
            launched = launcher_for(spec, *store_and_pool()).launch(
                spec, job_id, secrets, lambda host, msg: steps.append(f"**{host}**: {msg}"), preflight=check_first)
            for line in steps:
                box.write(line)
            box.update(label=f"{launched} is running", state="complete")
            st.session_state["monitor_job"] = launched
        except LaunchError as e:
            box.update(label="Launch failed — nothing was left running", state="error")
            failure = str(e)
    if failure:
        st.error(failure)
if st.session_state.get("monitor_job"):
    st.page_link("views/monitor.py", label=f"Watch {st.session_state['monitor_job']} on the Monitor page", icon="📈")
