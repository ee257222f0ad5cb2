"""Reaching the nodes: SSH (ssh.py), one runner interface for remote and local nodes (runner.py), checks before a
launch (preflight.py), and starting, stopping and re-attaching jobs (launcher.py)."""
