"""Jobs over time: the SQLite store (store.py), drafts (drafts.py), the jobs service that launches, polls and stops
through a backend (service.py), following a running job's logs, metrics and alerts (follow.py), GPU telemetry
(telemetry.py) and the memory estimate's closed loop (memory_loop.py)."""
