"""Jobs over time: the SQLite store (store/: one class per concern, a versioned schema), drafts (drafts.py), the jobs
service that launches, polls and stops through a backend (service.py), following a running job's logs, metrics and
alerts (follow.py), GPU telemetry (telemetry.py) and the closed loops of the memory estimate (memory_loop.py) and the
step-time prediction (time_loop.py)."""
