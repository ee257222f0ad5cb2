"""Reaching the nodes: SSH (ssh.py), one runner interface for remote and local nodes (runner.py), checks before a
launch (preflight.py). Starting and following jobs over SSH is a backend (grpo_ui/backends/ssh.py)."""
