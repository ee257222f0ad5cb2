"""Watching a running job: log tails (logs.py), training metrics (metrics.py), GPU telemetry (gpu.py), the doctor
that turns them into alerts (doctor.py), and the loop that ties them to SQLite (watch.py)."""
