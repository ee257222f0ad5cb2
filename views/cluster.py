"""Cluster: the job's hosts, SSH connection tests with explicit host-key trust, and the backend's preflight (on SSH
hosts with their GPU inventory; on Slurm the partition, the request and the shared run directory)."""

from __future__ import annotations

import paramiko
import streamlit as st

from grpo_ui.backends.preflight import HostFacts
from grpo_ui.backends.remote.ssh import Pool, SshError, UnknownHostKey, ssh_config_path, trust_host_key
from grpo_ui.core.findings import SEVERITY_ICON, sort_findings
from grpo_ui.spec import form
from grpo_ui.spec.paths import with_changes
from views import drafts
from views.service import jobs


@st.cache_resource
def pool() -> Pool:
    return Pool()


def ssh_hosts() -> dict[str, str]:
    """The aliases of ~/.ssh/config (no patterns) and the host name each stands for."""
    path = ssh_config_path()
    if not path.exists():
        return {}
    config = paramiko.SSHConfig.from_path(str(path))
    return {h: config.lookup(h).get("hostname", h) for h in sorted(config.get_hostnames()) if not set(h) & set("*?!")}


def save_nodes(draft, nodes: list[dict]) -> None:
    """The draft with these nodes, saved compare-and-set; the Configure page re-reads it."""
    if not drafts.save(draft, with_changes(draft.spec, {"cluster.nodes": nodes})):
        st.error("The draft was changed in another tab just now: nothing was saved; try again.")
        return
    drafts.forget_form()
    for key in [k for k in st.session_state if str(k).startswith("conn:")]:  # tests are by row: rows moved
        del st.session_state[key]
    st.rerun()


def facts_row(f: HostFacts) -> dict:
    """A host's preflight facts as the table shows them: "—" for what is not known, "not reached" for its GPUs when
    preflight could not reach it (not "none", which says it has no GPU)."""
    gpus = ", ".join(f"{g['gpu_index']}: {g['name']} ({g['mem_used']:.0f}/{g['mem_total']:.0f} MiB)" for g in f.gpus)
    row = {"host": f.host, "python": f.python, "ms-swift": f.versions.get("ms-swift"), "torch": f.versions.get("torch"),
           "vllm": f.versions.get("vllm"), "driver": f.driver,
           "CUDA driver / torch": f"{f.driver_cuda or '—'} / {f.torch_cuda or 'CPU build'}" if f.python else None,
           "GPUs": gpus or ("none" if f.reachable else "not reached"),
           "disk free GiB": None if f.disk_free_gib is None else f"{f.disk_free_gib:.0f}"}
    return {k: "—" if v is None else v for k, v in row.items()} | {"error": f.error or ""}


def remove_node(draft, index: int) -> None:
    save_nodes(draft, [n.model_dump(exclude_unset=True) for k, n in enumerate(draft.spec.cluster.nodes) if k != index])


st.title("Cluster")
draft = drafts.tab_draft()
spec = draft.spec
st.caption(f"Draft **{draft.name}** — hosts come from the Configure page's Cluster part (saved as you edit).")
table = st.empty()  # drawn last: its status column shows the connection tests and preflight below

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
        try:
            res = pool().get(node.host, node.user, node.port, node.identity_file).run("hostname && uptime", 15)
            st.session_state[f"conn:{i}"] = ("ok", res.out.strip())
        except UnknownHostKey as e:
            st.session_state[f"conn:{i}"] = ("unknown", e)
        except SshError as e:
            st.session_state[f"conn:{i}"] = ("error", str(e))
    status = st.session_state.get(f"conn:{i}")
    if status:
        kind, value = status
        if kind == "ok":
            cols[2].success(value)
        elif kind == "error":
            cols[2].error(value)
        else:
            cols[2].warning(f"Unknown host key {value.key.get_name()} **{value.fingerprint}**. Compare it with "
                            "`ssh-keygen -lf /etc/ssh/ssh_host_*_key.pub` on the machine before trusting it.")
            if cols[2].button("Trust this key", key=f"trust:{i}"):
                trust_host_key(value.hostname, value.port, value.key)
                st.session_state.pop(f"conn:{i}")
                st.rerun()

st.subheader("Preflight")
if st.button("Run preflight on every host", type="primary"):
    with st.status("Preflight…", expanded=True) as box:
        steps: list[str] = []  # progress arrives from one thread per host: collect it, show it here
        facts, findings = jobs().preflight(spec, lambda host, msg: steps.append(f"{host}: {msg}"))
        for line in steps:
            box.write(line)
        box.update(label="Preflight done", state="error" if any(f.severity == "error" for f in findings)
                   else "complete")
    st.session_state["preflight"] = (facts, findings)
if "preflight" in st.session_state:
    facts, findings = st.session_state["preflight"]
    st.dataframe([facts_row(f) for f in facts], hide_index=True, width="stretch")
    for f in sort_findings(findings):
        st.markdown(f"{SEVERITY_ICON[f.severity]} **{f.id}** ({', '.join(f.fields)}): {f.message} — *{f.fix}*")
    if not findings:
        st.success("Every host passed preflight.")


def host_status(i: int, host: str) -> str:
    """What the latest connection test or preflight said about node ``i`` (✗ and the error, ✓, or empty)."""
    conn = st.session_state.get(f"conn:{i}")
    facts = {f.host: f for f in st.session_state.get("preflight", ([], []))[0]}
    if host in facts and facts[host].error:
        return f"✗ {facts[host].error}"
    if conn and conn[0] != "ok":
        return "✗ " + (conn[1] if conn[0] == "error" else "unknown host key: trust it below")
    return "✓ reached" if conn or host in facts else ""


table.dataframe([{"#": row.pop(form.ROW), "status": host_status(k, row["host"]), **row}
                 for k, row in enumerate(form.node_rows(spec))], hide_index=True, width="stretch",
                column_config={"status": st.column_config.TextColumn("status", help="The latest connection test or "
                                                                     "preflight of this host", width="large")})
