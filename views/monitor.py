"""Monitor: a job's state (and its place in the queue, or what it waits for), its page on the backend's dashboard,
progress and ETA, doctor alerts, the step time measured next to the prediction made at launch, metric charts, the
job's GPUs on the same time axis, and its logs — a Ray job's driver's and each node's (follow, search, first
error). The live part refreshes itself
without rerunning the page; following the job and sampling its GPUs is the jobs service's work, this page draws."""

from __future__ import annotations

import time

import plotly.graph_objects as go
import streamlit as st
from plotly.subplots import make_subplots

from grpo_ui.api.jobs import JobView, StepTimeSummary, first_error_index
from grpo_ui.core.errors import UserError
from grpo_ui.core.findings import SEVERITY_ICON, error_list
from views import readable, runs
from views.service import workspace

CHARTS = [("reward", ["reward"], "rewards/"), ("reward spread", ["reward_std", "frac_reward_zero_std"], None),
          ("KL", ["kl"], None), ("loss", ["loss"], None), ("grad norm", ["grad_norm"], None),
          ("completion length", ["completions/mean_length", "completions/max_length"], None),
          ("clipped ratio", ["completions/clipped_ratio"], None), ("learning rate", ["learning_rate"], None),
          ("run average s/step (ms-swift's train_speed)", ["seconds_per_step"], None)]


MEMORY_WINDOW_S = 7200  # memory per rank over the steps of the last two hours


def process_rows(view: JobView) -> list[dict]:
    """Which process of which node holds how much memory on each GPU (the latest listing per host)."""
    return [{"node": node, "GPU": p.gpu_index, "pid": p.pid, "GPU memory (MiB)": p.used_mib,
             "listed": time.strftime("%H:%M:%S", time.localtime(p.ts))} for node, p in view.gpu_processes()]


def metric_figure(metrics: dict) -> go.Figure:
    fig = make_subplots(rows=3, cols=3, subplot_titles=[c[0] for c in CHARTS])
    for k, (_, keys, prefix) in enumerate(CHARTS):
        keys = keys + ([m for m in metrics if prefix and m.startswith(prefix) and m.endswith("/mean")])
        for key in keys:
            if key in metrics:
                steps, values = zip(*metrics[key], strict=True)
                fig.add_scatter(x=steps, y=values, name=key, mode="lines+markers", row=k // 3 + 1, col=k % 3 + 1)
    fig.update_layout(height=620, margin=dict(l=10, r=10, t=40, b=10), legend=dict(font=dict(size=9)))
    return fig


def curves_figure(charts: dict[str, dict]) -> go.Figure:
    """Rollout throughput, time per step by phase, memory per rank over steps (computed in grpo_ui.doctor.curves)."""
    fig = make_subplots(rows=1, cols=len(charts), subplot_titles=list(charts))
    for k, series in enumerate(charts.values()):
        for name, points in series.items():
            steps, values = zip(*points, strict=True)
            fig.add_scatter(x=steps, y=values, name=name, mode="lines+markers", row=1, col=k + 1)
    fig.update_layout(height=320, margin=dict(l=10, r=10, t=40, b=10), legend=dict(font=dict(size=9)))
    return fig


def gpu_figure(samples: list[dict], step_times: list[float]) -> go.Figure:
    fig = make_subplots(rows=2, cols=2, subplot_titles=["utilisation %", "memory used MiB", "power W", "temperature °C"],
                        shared_xaxes=True)
    series: dict[tuple, list[dict]] = {}
    for s in samples:
        series.setdefault((s["host"], s["gpu_index"]), []).append(s)
    for (host, gpu), rows in sorted(series.items()):
        x = [time.strftime("%H:%M:%S", time.localtime(r["ts"])) for r in rows]
        for k, key in enumerate(("util", "mem_used", "power", "temp")):
            fig.add_scatter(x=x, y=[r[key] for r in rows], name=f"{host}/{gpu}", legendgroup=f"{host}/{gpu}",
                            showlegend=k == 0, mode="lines", row=k // 2 + 1, col=k % 2 + 1)
    for t in step_times[-50:]:
        fig.add_vline(x=time.strftime("%H:%M:%S", time.localtime(t)), line_width=1, line_dash="dot",
                      line_color="grey")
    fig.update_layout(height=480, margin=dict(l=10, r=10, t=40, b=10))
    return fig


def step_time_panel(pace: StepTimeSummary) -> None:
    """Measured seconds per step (median and recent; the first step apart) next to the prediction made at launch,
    with the rollout share and completion length vs the cap (grpo_ui.jobs.time_loop)."""
    st.subheader("Step time")
    c1, c2, c3, c4 = st.columns(4)
    c1.metric("measured s/step (median)", pace.median)
    c2.metric("recent s/step", pace.recent)
    c3.metric("predicted s/step", pace.predicted)
    c4.metric("measured / predicted", pace.ratio)
    for line in pace.lines:
        st.caption(line)


def memory_table(view: JobView) -> None:
    """The estimate the job was launched with next to each GPU's measured peak (the watcher records the peaks)."""
    st.caption("Memory per GPU: the estimate at launch vs the measured peak")
    if why := view.no_memory_estimate():
        st.caption(f"No estimate at launch: {why}")
    st.table(readable.memory_table(view.memory_table()))


st.title("Monitor")
service = workspace()
listed = service.all_jobs()
if not listed:
    st.info("No jobs yet: launch one from the Launch page (or `python -m grpo_ui launch job.yaml`).")
    runs.end_page()
ids = [j.id for j in listed]
default = ids.index(st.session_state["monitor_job"]) if st.session_state.get("monitor_job") in ids else 0
job_id = st.selectbox("Job", ids, index=default, format_func=lambda i: f"{i} — {service.job(i).state}")
st.session_state["monitor_job"] = job_id
shown_state = service.job(job_id).state  # as the picker's label says it


@runs.live_fragment(run_every=3)
def live():
    result = service.follow(job_id)  # an ended job: once, for its last lines
    view = service.view(job_id)
    job = view.job
    if job.state != shown_state:
        st.rerun()  # the whole page, so the job picker's label shows the new state too
    stop_button(job)
    metrics = view.metrics()
    c1, c2, c3, c4 = st.columns(4)
    c1.metric("State", job.state)
    backend = view.backend_words()
    if backend and job.state.launched:
        position = backend.queue_position
        said = backend.detail + (f" — queue position {position}" if position else "")
        (st.info if job.state == "starting" and backend.reason else st.caption)(said)  # waiting: said plainly
    if link := view.link:
        st.markdown(f"[The job on {link[0]}]({link[1]})")
    steps = metrics.get("max_steps", [])
    pace = view.step_time()
    if steps:
        step, total = steps[-1][0], steps[-1][1]
        c2.metric(view.step_word, f"{step} / {total:.0f}")
        st.progress(min(step / total, 1.0) if total else 0.0)
        c3.metric("ETA", pace.eta or "—", help="the steps left × the recent measured pace")
    if "reward" in metrics:
        c4.metric("reward", f"{metrics['reward'][-1][1]:.4g}")
    if result and result.errors:
        st.warning("Unreachable now: " + "; ".join(result.errors))
    if job.error:
        st.error(error_list(job.error))
    if note := view.override_note:
        st.warning(note)
    if view.never_started:
        st.info("This job never started: the launch stopped before anything ran on the nodes (they were never "
                "reached, or preflight refused them), so there are no metrics, GPU samples or logs. Fix what is "
                "listed above and launch again from the Launch page.")
        return
    alerts = view.alerts()
    st.subheader(f"Alerts ({len(alerts)})")
    for a in alerts:
        with st.expander(f"{SEVERITY_ICON.get(a.severity, '')} {a.alert_id} — {a.message.split(':')[0]}",
                         expanded=a.severity == "error"):
            st.write(a.message)
            st.code(a.evidence or "")
            st.caption(f"Fix: {a.fix}")
    step_time_panel(pace)
    st.subheader("Training metrics")
    step_marks = view.step_times()
    if metrics:
        st.plotly_chart(metric_figure(metrics), width="stretch", key="metrics_chart")
        charts = view.extra_curves(MEMORY_WINDOW_S)
        if any(charts.values()):
            st.plotly_chart(curves_figure(charts), width="stretch", key="curves_chart")
    else:
        st.caption("No step logged yet.")
    stacks_panel(view)
    completions = view.completions(10)
    if completions:
        with st.expander(f"Latest sampled completions ({len(completions)})"):
            st.dataframe([{k: (v if isinstance(v, (int, float)) else str(v)[:300]) for k, v in row.items()}
                          for row in completions], hide_index=True, width="stretch")
    samples = view.gpu_samples(1800)
    st.subheader("GPUs")
    if samples:
        st.plotly_chart(gpu_figure(samples, [t for _, t in step_marks]), width="stretch", key="gpu_chart")
    else:
        st.caption("No GPU samples yet: they come from nvidia-smi on each node while the job runs, for the GPUs "
                   "the job owns there.")
    memory_table(view)
    procs = process_rows(view)
    if procs:
        st.caption("GPU memory by process (latest listing per node)")
        st.dataframe(procs, hide_index=True, width="stretch", key="gpu_processes")


def stop_button(job) -> None:
    """Stop the job on every node; the outcome stays shown (the page reruns once the job's state changes). Drawn in
    the live part, which a click reruns at once."""
    if job.state.launched and st.button("Stop this job on every node", type="primary"):
        try:
            outcome = service.stop(job_id)
            st.session_state["stopped"] = (job_id, "Stopped: " + ", ".join(f"{h}: {o}" for h, o in outcome.items()))
        except UserError as e:
            st.session_state["stopped"] = (job_id, str(e))
    stopped = st.session_state.get("stopped")
    if stopped and stopped[0] == job_id:
        (st.success if stopped[1].startswith("Stopped: ") else st.error)(stopped[1])


def stacks_panel(view: JobView) -> None:
    """Where each rank is (py-spy): dumped by the watcher on a suspected hang, or now on request."""
    with st.expander("Where each rank is (py-spy stacks)"):
        if view.job.state.launched and st.button("Dump every rank's stack now", key="dump_stacks"):
            try:
                service.dump_stacks(job_id)
            except UserError as e:
                st.error(str(e))
        stacks = view.stacks()
        if not stacks:
            st.caption("No stacks yet: they are dumped when the job looks hung.")
            return
        st.caption(f"Dumped at {time.strftime('%H:%M:%S', time.localtime(stacks.taken_at))}")
        st.dataframe([{"rank": s.label, "phase": s.summary, "innermost": " ← ".join(f for f, _ in s.frames[:4])}
                      for s in stacks.ranks], hide_index=True, width="stretch")


live()

@runs.live_fragment(run_every=3)
def logs():
    st.subheader("Logs")
    view = service.view(job_id)
    streams = view.log_streams()  # a Ray job's driver first, then each node with a log of its own
    if not streams:
        return
    c1, c2 = st.columns([2, 3])
    pick = c1.selectbox("Log", range(len(streams)), format_func=lambda k: streams[k].label, key="log_node")
    query = c2.text_input("Search this log's window", key="log_query")
    window = view.log_lines(streams[pick].stream, 5000)
    at = first_error_index([r[1] for r in window])  # never a line of ms-swift's argument dump
    first_error = window[at] if at is not None else None
    if first_error:
        with st.expander(f"First error, line {first_error[0]}"):
            st.code("\n".join(r[1] for r in window if first_error[0] - 5 <= r[0] <= first_error[0] + 30))
    lines = [r for r in window if query in r[1]][-300:] if query else window[-300:]
    st.code("\n".join(f"{r[0]:>6}  {r[1]}" for r in lines) or "(no lines yet)")


logs()

