"""The one door of grpo-ui's faces: the pages (views/, app.py) and the commands (grpo_ui/commands/) use this package
and grpo_ui.core's types, nothing else of the library (import-linter checks it: pyproject.toml).

- ``workspace``: Workspace, one process's store and jobs service — plan, launch, preflight, follow, stop, re-attach
  — its drafts, each job as a JobView, the doctor's report on a job, calibration rows;
- ``jobs``: JobView (a stored job as pages and ``status`` show it: records, measured next to predicted, history
  row) and the record types they read (Job, JobState, Node, StoredAlert, …, Unavailable);
- ``specs``: the job spec read, changed, written and imported; its form; its one assessment and where the form shows
  each finding; the rendered scripts; the catalogue and the hub;
- ``cluster``: ~/.ssh/config's hosts, connection tests and host-key trust, preflight and what it says per host;
- ``diagnose``: the doctor's report on any logs.

A new backend or setting reaches the faces through these modules (a new kind of handle needs no change here: the
jobs service and JobView read jobs of every backend alike).
"""
