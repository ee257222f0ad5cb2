"""Execution backends: where and how a planned job runs (``base.Backend`` is the interface; ``ssh`` and ``slurm``
implement it, and grpo_ui.jobs runs jobs through it)."""
