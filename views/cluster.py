"""Cluster: the job's hosts, SSH connection tests with explicit host-key trust, and the backend's preflight (on SSH
hosts with their GPU inventory; on Slurm the partition, the request and the shared run directory)."""

from __future__ import annotations

import paramiko
import streamlit as st

from grpo_ui import form
from grpo_ui.findings import SEVERITY_ICON, sort_findings
from grpo_ui.jobs import backend_for
from grpo_ui.plan import make_plan
from grpo_ui.remote.ssh import Pool, SshError, UnknownHostKey, ssh_config_path, trust_host_key
from grpo_ui.spec import with_changes
from views import drafts


@st.cache_resource
def pool() -> Pool:
    return Pool()


def ssh_aliases() -> list[str]:
    path = ssh_config_path()
    if not path.exists():
        return []
    return sorted(h for h in paramiko.SSHConfig.from_path(str(path)).get_hostnames() if not set(h) & set("*?!"))


st.title("Cluster")
draft = drafts.tab_draft()
spec = draft.spec
st.caption(f"Draft **{draft.name}** — hosts come from the Configure page's Cluster part (saved as you edit).")
st.dataframe([{"#": row.pop(form.ROW), **row} for row in form.node_rows(spec)], hide_index=True, width="stretch")

aliases = [a for a in ssh_aliases() if a not in {n.host for n in spec.cluster.nodes}]
c1, c2 = st.columns([3, 1])
alias = c1.selectbox("Add a host from ~/.ssh/config", aliases or ["(no aliases found)"], disabled=not aliases)
if c2.button("Add", disabled=not aliases, width="stretch"):
    nodes = [n.model_dump(exclude_unset=True) for n in spec.cluster.nodes] + [{"host": alias,
                                                                                "gpus": spec.cluster.nodes[0].gpus}]
    if not drafts.save(draft, with_changes(spec, {"cluster.nodes": nodes})):
        st.error("The draft was changed in another tab just now: nothing was added; try again.")
    else:
        drafts.forget_form()  # the Configure page re-reads the draft
        st.rerun()

st.subheader("Connections")
for i, node in enumerate(spec.cluster.nodes):
    cols = st.columns([2, 1, 4])
    cols[0].write(f"**{node.host}** ({node.role})")
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
        facts, findings = backend_for(spec, pool()).prepare(make_plan(spec, "preflight"),
                                                            lambda host, msg: steps.append(f"{host}: {msg}"))
        for line in steps:
            box.write(line)
        box.update(label="Preflight done", state="error" if any(f.severity == "error" for f in findings)
                   else "complete")
    st.session_state["preflight"] = (facts, findings)
if "preflight" in st.session_state:
    facts, findings = st.session_state["preflight"]
    st.dataframe([{"host": f.host, "python": f.python, "ms-swift": f.versions.get("ms-swift"),
                   "torch": f.versions.get("torch"), "vllm": f.versions.get("vllm"), "driver": f.driver,
                   "CUDA driver / torch": f"{f.driver_cuda or '—'} / {f.torch_cuda or 'CPU build'}" if f.python else None,
                   "GPUs": ", ".join(f"{g['gpu_index']}: {g['name']} ({g['mem_used']:.0f}/{g['mem_total']:.0f} MiB)"
                                     for g in f.gpus) or "none",
                   "disk free GiB": None if f.disk_free_gib is None else round(f.disk_free_gib),
                   "error": f.error or ""} for f in facts], hide_index=True, width="stretch")
    for f in sort_findings(findings):
        st.markdown(f"{SEVERITY_ICON[f.severity]} **{f.id}** ({', '.join(f.fields)}): {f.message} — *{f.fix}*")
    if not findings:
        st.success("Every host passed preflight.")
