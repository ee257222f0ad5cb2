"""Per-GPU memory of a resolved job, every term and phase (estimate.py): pure functions, no I/O."""
