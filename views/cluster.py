"""Cluster: the job's hosts, on Ray the cluster they run on (started on them or a running one, its ports, its
dashboard), SSH connection tests with explicit host-key trust, and the backend's preflight (on SSH hosts with their
GPU inventory — on Ray with their Ray version and, on a running cluster, the GPUs Ray counts —; on Slurm the
partition, the request and the shared run directory)."""

from __future__ import annotations

import streamlit as st

from grpo_ui.api.cluster import (
    PreflightRun,
    connection_of,
    dashboard_address,
    facts_row,
    ray_where,
    ssh_hosts,
    trust_host_key,
)
from grpo_ui.api.specs import form, with_changes
from grpo_ui.core.findings import SEVERITY_ICON, sort_findings
from views import drafts, hosts
from views.service import workspace


def save_nodes(draft, nodes: list[dict]) -> None:
    """The draft with these nodes, saved compare-and-set; the Configure page re-reads it."""
    if not drafts.save(draft, with_changes(draft.spec, {"cluster.nodes": nodes})):
        st.error("The draft was changed in another tab just now: nothing was saved; try again.")
        return
    drafts.forget_form()
    st.rerun()


def remove_node(draft, index: int) -> None:
    save_nodes(draft, [n.model_dump(exclude_unset=True) for k, n in enumerate(draft.spec.cluster.nodes) if k != index])


st.title("Cluster")
draft = drafts.tab_draft()
spec = draft.spec
st.caption(f"Draft **{draft.name}** — hosts come from the Configure page's Cluster part (saved as you edit).")
table = st.empty()  # drawn last: its status column shows the connection tests and preflight below
if spec.cluster.backend == "ray":
    c = spec.cluster
    st.subheader("Ray cluster")
    st.markdown(f"The job runs on {ray_where(c)}.")
    if c.ray_address:
        st.caption("grpo-ui submits the job to this cluster's Jobs API and starts nothing there; each node of the job "
                   "must be a node of that cluster (preflight asks it which nodes it has, with their GPUs).")
    else:
        st.caption(f"`ray start --head` on {c.nodes[0].host}: GCS on port {c.ray_port}, the dashboard and Jobs API on "
                   f"port {c.ray_dashboard_port}, bound to {c.nodes[0].routable} only; `ray start --address` on the "
                   "others, each node's GPUs as its Ray GPUs.")
    st.markdown(f"Ray dashboard: [{dashboard_address(c)}]({dashboard_address(c)})"
                + ("" if c.ray_address else " (while a job runs" + (", and after: kept)" if c.ray_keep else ")")))
    st.caption("The Ray settings are in the Configure page's 2. Cluster part.")

known = ssh_hosts()
aliases = [a for a in known if a not in {n.host for n in spec.cluster.nodes}]
c1, c2 = st.columns([3, 1])
alias = c1.selectbox("Add a host from ~/.ssh/config", aliases or ["(no aliases found)"], disabled=not aliases)
if c2.button("Add", disabled=not aliases, width="stretch"):
    first = spec.cluster.nodes[0]  # the new host as the first one is: same GPUs, GPU model and Python
    save_nodes(draft, [n.model_dump(exclude_unset=True) for n in spec.cluster.nodes] + [
        {"host": alias, **first.model_dump(include={"gpus", "gpu_model", "python_env"}, exclude_unset=True),
         **({"address": known[alias]} if known[alias] != alias else {})}])  # what the other nodes reach it at

st.subheader("Connections")
for i, node in enumerate(spec.cluster.nodes):
    cols = st.columns([2, 1, 4, 1])
    cols[0].write(f"**{node.host}** ({node.role})")
    if len(spec.cluster.nodes) > 1 and cols[3].button("Remove", key=f"remove:{i}"):
        remove_node(draft, i)
    if node.is_local:
        cols[2].write("runs locally, no SSH")
        continue
    if cols[1].button("Test", key=f"test:{i}"):
        hosts.tests()[node.host], unknown = workspace().check_connection(node)
        if unknown:
            st.session_state.setdefault("host_keys", {})[node.host] = unknown
    test = hosts.tests().get(node.host)
    if test is not None and test.node == connection_of(node):
        if test.ok:
            cols[2].success(test.detail)
        elif test.ok is False:
            cols[2].error(test.detail)
        elif (key := st.session_state.get("host_keys", {}).get(node.host)) is not None:
            cols[2].warning(f"Unknown host key {key.key.get_name()} **{key.fingerprint}**. Compare it with "
                            "`ssh-keygen -lf /etc/ssh/ssh_host_*_key.pub` on the machine before trusting it.")
            if cols[2].button("Trust this key", key=f"trust:{i}"):
                trust_host_key(key.hostname, key.port, key.key)
                hosts.tests().pop(node.host)
                st.rerun()

st.subheader("Preflight")
if st.button("Run preflight on every host", type="primary"):
    with st.status("Preflight…", expanded=True) as box:
        steps: list[str] = []  # progress arrives from one thread per host: collect it, show it here
        facts, findings = workspace().preflight(spec, lambda host, msg: steps.append(f"{host}: {msg}"))
        for line in steps:
            box.write(line)
        box.update(label="Preflight done", state="error" if any(f.severity == "error" for f in findings)
                   else "complete")
    hosts.keep_preflight(draft.id, PreflightRun.of(spec, facts, findings))
if (run := hosts.preflight_run(draft.id)) is not None:
    if stale := run.stale(spec):
        st.warning(f"**Stale:** {stale}; the results below are from then. Run preflight again.")
    if run.facts:
        st.dataframe([facts_row(f, spec.cluster.backend) for f in run.facts], hide_index=True, width="stretch")
    for f in sort_findings(run.findings):
        st.markdown(f"{SEVERITY_ICON[f.severity]} **{f.id}** ({', '.join(f.fields)}): {f.message} — *{f.fix}*")
    if not run.findings:
        st.success("Every host passed preflight.")

others = form.node_columns(spec)[len(form.LEADING_COLUMNS):]  # what no node sets is left out
table.dataframe([{"#": row.pop(form.ROW), "status": hosts.status(spec, draft.id, k).text, **row}
                 for k, row in enumerate(form.node_rows(spec))], hide_index=True, width="stretch",
                column_order=["#", *form.LEADING_COLUMNS, "status", *others],
                column_config={"status": st.column_config.TextColumn(
                    "status", width="large", help="The worst of this host's latest connection test and preflight; "
                    "'?' when they were made before the cluster or the draft changed")})
