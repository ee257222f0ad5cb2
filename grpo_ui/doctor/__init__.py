"""Log analysis only: training metrics of any trainer (metrics.py), log tails (logs.py), the Snapshot of a run the
rules read (snapshot.py), the doctor that turns it into alerts and a report (diagnose.py, with its rules on log lines
in failures.py: the kinds of failure in signatures.py, found on any line of any excerpt by events.py once lines.py
has peeled off what printed it; the first failure across logs in rootcause.py), the silence a healthy run may keep
(liveness.py), each rank's py-spy stack (stacks.py), series for the extra charts (curves.py), a run's measured pace
(pace.py), and log files or pasted text of any run as a Snapshot (logfiles.py)."""
