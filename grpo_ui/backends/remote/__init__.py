"""Reaching the nodes: SSH (ssh.py), one runner interface for remote and local nodes (runner.py), the GPU reader
(gpu.py: nvidia-smi's rows and channels, NVML locally) and py-spy (pyspy.py)."""
