"""Log analysis only: training metrics (metrics.py), log tails (logs.py), the Snapshot of a run the rules read
(snapshot.py), the doctor that turns it into alerts (diagnose.py, with its rules on log lines in failures.py, the
root cause of a failure in rootcause.py, the silence a healthy run may keep in liveness.py, each rank's py-spy stack
in stacks.py), series for the extra charts (curves.py), a run's measured pace (pace.py) and log files of any run as a
Snapshot (logfiles.py)."""
