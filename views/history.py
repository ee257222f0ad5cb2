"""History: past jobs with their config, final metrics, outcome, memory and step time (predicted at launch vs
measured); compare two runs; re-open a config."""

from __future__ import annotations

import difflib
import time

import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from grpo_ui.core.findings import error_list
from grpo_ui.jobs.memory_loop import comparison
from grpo_ui.jobs.service import HANDLE, override_note
from grpo_ui.jobs.specs import job_spec
from grpo_ui.jobs.store import MemoryAtLaunch
from grpo_ui.jobs.time_loop import comparison as time_comparison
from grpo_ui.jobs.time_loop import summary as time_summary
from grpo_ui.spec.yaml_io import spec_from_yaml
from views import drafts, readable, runs
from views.service import store
from views.yaml_code import yaml_code


def memory_columns(job: dict) -> dict:
    """The trainer GPU's estimated peak at launch and the highest measured peak (nvidia-smi or memory(GiB))."""
    est = db.memory_estimate(job.id)
    trainer = est.role("trainer") if isinstance(est, MemoryAtLaunch) else None
    peaks = [p.peak_gib for p in db.memory_peaks(job.id)]
    return {"estimate GiB": trainer and trainer.peak_gib, "measured GiB": round(max(peaks), 1) if peaks else None}


def time_columns(job: dict) -> dict:
    """Seconds per step and training hours, predicted at launch and measured (3 significant digits)."""
    c = time_comparison(db, job.id)
    return {"predicted s/step": _sig(c.predicted and c.predicted.step_s),
            "measured s/step": _sig(c.measured and c.measured["median_s"]),
            "predicted h": _sig(c.predicted_total_s and c.predicted_total_s / 3600),
            "measured h": _sig(c.measured_total_s and c.measured_total_s / 3600)}


def _sig(x: float | None) -> float | None:
    return float(f"{x:.3g}") if x else None


def final(metrics: dict, key: str):
    return readable.metric(metrics[key][-1][1]) if metrics.get(key) else None


st.title("History")
db = store()
jobs = db.jobs()
if not jobs:
    st.info("No jobs yet: every job launched from the Launch page (or `python -m grpo_ui launch job.yaml`) is listed "
            "here with its outcome, final metrics and memory.")
    runs.end_page()
rows = []
for j in jobs:
    m = db.metrics(j.id)
    rows.append({"job": j.id, "name": j.name, "state": j.state,
                 "started": time.strftime("%Y-%m-%d %H:%M", time.localtime(j.started or j.created)),
                 "minutes": round(((j.ended or time.time()) - (j.started or j.created)) / 60, 1),
                 "steps": int(m["max_steps"][-1][0]) if m.get("max_steps") else 0, "reward": final(m, "reward"),
                 "kl": final(m, "kl"), **memory_columns(j), **time_columns(j),
                 "alerts": ", ".join(a.alert_id for a in db.alerts(j.id)) or "—"})
blank_if_none = {**{c: lambda v: "—" if pd.isna(v) else f"{v:g}" for c in (
    "reward", "kl", "predicted s/step", "measured s/step", "predicted h", "measured h")},
                 **{c: lambda v: "—" if pd.isna(v) else f"{v:.1f}" for c in ("estimate GiB", "measured GiB")}}
st.dataframe(pd.DataFrame(rows).style.format(blank_if_none, precision=1), hide_index=True,
             width="stretch")  # numbers stay numbers: they sort as numbers

ids = [j.id for j in jobs]
pick = st.selectbox("Job", ids)
job = db.job(pick)
c1, c2 = st.columns(2)
with c1:
    st.markdown(f"**Outcome:** {job.state}")
    if job.error:
        st.error(error_list(job.error))
    if note := override_note(db, pick):
        st.warning(note)
    yaml_code(job.spec_yaml)
    if st.button("Re-open this config in Configure (as a new draft)"):
        drafts.create(pick, spec_from_yaml(job.spec_yaml))
        st.switch_page("views/configure.py")
with c2:
    metrics = db.metrics(pick)
    st.markdown("**Final metrics**")
    if metrics:
        st.json({k: readable.metric(v[-1][1]) for k, v in sorted(metrics.items())})
    else:
        st.caption("None: the job never logged a training step" + (
            " (it never started)." if job.state == "failed" and not db.meta(pick, HANDLE) else "."))
    st.markdown("**Memory per GPU: estimate at launch vs measured peak**")
    st.table(readable.memory_table(comparison(db, pick, job_spec(job))))
    pace = time_summary(db, pick, job_spec(job))
    st.markdown(f"**Step time:** measured {pace.median} per step (median), predicted {pace.predicted} "
                f"(measured / predicted {pace.ratio})")
    for line in pace.lines:
        st.caption(line)

st.subheader("Compare two runs")
pair = st.multiselect("Runs", ids, max_selections=2, default=ids[:2] if len(ids) > 1 else ids[:1])
if len(ids) < 2:
    st.info("Only one run so far: a comparison needs two. Launch another (e.g. re-open this config, change a "
            "setting, launch) and compare them here.")
elif len(pair) < 2:
    st.info("Pick two runs above to compare their metrics and configs.")
else:
    a, b = (db.metrics(x) for x in pair)
    keys = sorted(set(a) & set(b)) or ["reward"]
    key = st.selectbox("Metric", keys, index=keys.index("reward") if "reward" in keys else 0)
    fig = go.Figure()
    for run, m in zip(pair, (a, b), strict=True):
        if key in m:
            steps, values = zip(*m[key], strict=True)
            fig.add_scatter(x=steps, y=values, name=run, mode="lines+markers")
    fig.update_layout(height=320, xaxis_title="step", yaxis_title=key, margin=dict(l=10, r=10, t=10, b=10))
    st.plotly_chart(fig, width="stretch")
    ya, yb = (db.job(x).spec_yaml.splitlines() for x in pair)
    st.code("\n".join(difflib.unified_diff(ya, yb, pair[0], pair[1], lineterm="")) or "(same config)",
            language="diff")
