"""Watching a running job: log tails (logs.py), training metrics (metrics.py), GPU telemetry (gpu.py: nvidia-smi's rows and channels; telemetry.py: a job's channels on each of its nodes), the doctor
that turns them into alerts (doctor.py, with its rules on log lines in failures.py, the root cause of a failure in
rootcause.py, the silence a healthy run may keep in liveness.py, each rank's py-spy stack in stacks.py and its input,
the Snapshot, in snapshot.py), series for the extra charts (curves.py), log files of any run as a Snapshot for the
`doctor` command (logfiles.py), and the loop that ties them to SQLite (watch.py)."""
