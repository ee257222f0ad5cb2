"""History: past jobs with their backend, engine and parallel layout, config, final metrics, outcome, memory and
step time (predicted at launch vs measured); compare two runs; re-open a config."""

from __future__ import annotations

import difflib

import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from grpo_ui.api.jobs import significant
from grpo_ui.api.specs import spec_from_yaml
from grpo_ui.core.findings import error_list
from views import drafts, readable, runs
from views.service import workspace
from views.yaml_code import yaml_code

st.title("History")
service = workspace()
jobs = service.all_jobs()
if not jobs:
    st.info("No jobs yet: every job launched from the Launch page (or `python -m grpo_ui launch job.yaml`) is listed "
            "here with its outcome, final metrics and memory.")
    runs.end_page()
rows = [service.view(j.id).history_row() for j in jobs]
blank_if_none = {**{c: lambda v: "—" if pd.isna(v) else f"{v:g}" for c in (
    "reward", "kl", "predicted s/step", "measured s/step", "predicted h", "measured h")},
                 **{c: lambda v: "—" if pd.isna(v) else f"{v:.1f}" for c in ("estimate GiB", "measured GiB")}}
st.dataframe(pd.DataFrame(rows).style.format(blank_if_none, precision=1), hide_index=True,
             width="stretch")  # numbers stay numbers: they sort as numbers

ids = [j.id for j in jobs]
pick = st.selectbox("Job", ids)
view = service.view(pick)
job = view.job
c1, c2 = st.columns(2)
with c1:
    st.markdown(f"**Outcome:** {job.state}")
    row = rows[ids.index(pick)]
    st.caption(f"{row['engine']} on {row['backend']}: {row['layout']}")
    if job.error:
        st.error(error_list(job.error))
    if note := view.override_note:
        st.warning(note)
    yaml_code(job.spec_yaml)
    if st.button("Re-open this config in Configure (as a new draft)"):
        drafts.create(pick, spec_from_yaml(job.spec_yaml))
        st.switch_page("views/configure.py")
with c2:
    metrics = view.metrics()
    st.markdown("**Final metrics**")
    if metrics:
        st.json({k: significant(v[-1][1]) for k, v in sorted(metrics.items())})
    else:
        st.caption("None: the job never logged a training step" + (
            " (it never started)." if view.never_started else "."))
    st.markdown("**Memory per GPU: estimate at launch vs measured peak**")
    st.table(readable.memory_table(view.memory_table()))
    pace = view.step_time()
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
    a, b = (service.view(x).metrics() for x in pair)
    keys = sorted(set(a) & set(b)) or ["reward"]
    key = st.selectbox("Metric", keys, index=keys.index("reward") if "reward" in keys else 0)
    fig = go.Figure()
    for run, m in zip(pair, (a, b), strict=True):
        if key in m:
            steps, values = zip(*m[key], strict=True)
            fig.add_scatter(x=steps, y=values, name=run, mode="lines+markers")
    fig.update_layout(height=320, xaxis_title="step", yaxis_title=key, margin=dict(l=10, r=10, t=10, b=10))
    st.plotly_chart(fig, width="stretch")
    ya, yb = (service.job(x).spec_yaml.splitlines() for x in pair)
    st.code("\n".join(difflib.unified_diff(ya, yb, pair[0], pair[1], lineterm="")) or "(same config)",
            language="diff")
