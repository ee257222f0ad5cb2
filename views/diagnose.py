"""Diagnose a log: paste or upload the logs of any run — whole or an excerpt, one per process (trainer nodes,
rollout servers) — or pick a job's node logs, and see what the doctor finds: the first error, each finding with its
evidence lines and fix. The same report as `python -m grpo_ui doctor` (grpo_ui.api.diagnose)."""

from __future__ import annotations

import streamlit as st

from grpo_ui.api.diagnose import Report, report_of_texts
from grpo_ui.core.findings import SEVERITY_ICON
from views.service import workspace

PASTE, UPLOAD, JOB = "Paste", "Upload files", "A job's node logs"
STATE_NOTE = {"unknown": "the logs do not show whether the run is still going (an excerpt)",
              "running": "the logs show the run's start and nothing that ended it",
              "failed": "the logs end in an error that stopped the run", "succeeded": "the run finished"}


def draw(found: Report) -> None:
    if found.headline:
        st.error(found.headline, icon=":material/error:")
    elif not found.alerts:
        st.success("No findings: nothing in these logs points at a failure or a stuck metric.")
    st.caption(f"Run state: **{found.state}** — {STATE_NOTE[found.state]}"
               + (f"; last logged step {found.last_step}." if found.last_step is not None else "; no step logged."))
    for a in found.ordered:
        with st.container(border=True):
            st.markdown(f"{SEVERITY_ICON[a.severity]} **{a.id}** — {a.title}"
                        + (f"  \n:gray[{a.where}]" if a.where else ""))
            st.write(a.explanation)
            if a.evidence:
                st.code(a.evidence, language=None, wrap_lines=True)
            st.markdown(f"**Fix:** {a.fix}")


st.title("Diagnose a log")
st.caption("Logs of any run, launched here or not: a whole log or the excerpt you would paste into an issue, one per "
           "process (trainer nodes, rollout servers: given together, the process that failed first is named). "
           "The same doctor as `python -m grpo_ui doctor LOG …` and the Monitor page.")
source = st.radio("Logs from", [PASTE, UPLOAD, JOB], horizontal=True, key="diagnose_source")
texts: dict[str, bytes | str] = {}
job_id = None
if source == PASTE:
    pasted = st.text_area("Log text", height=280, key="diagnose_paste",
                          placeholder="Paste a log or an excerpt: a traceback, NCCL or vLLM lines, metric lines …")
    if pasted.strip():
        texts = {"pasted log": pasted}
elif source == UPLOAD:
    files = st.file_uploader("Log files (one per node, rank or rollout server; logging.jsonl and py-spy dumps too)",
                             accept_multiple_files=True, key="diagnose_files")
    texts = {f.name: f.getvalue() for f in files or []}
else:
    jobs = workspace().all_jobs()
    if not jobs:
        st.info("No jobs yet: the jobs launched from the Launch page are listed here.")
    else:
        job_id = st.selectbox("Job", [j.id for j in jobs], key="diagnose_job",
                              format_func=lambda i: next(f"{i} — {j.name} ({j.state})" for j in jobs
                                                         if j.id == i))

if st.button("Diagnose", type="primary", disabled=not texts and job_id is None, key="diagnose_run"):
    st.session_state["diagnose_report"] = workspace().report(job_id) if source == JOB else report_of_texts(texts)
if found := st.session_state.get("diagnose_report"):
    draw(found)
