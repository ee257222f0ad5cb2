"""Execution backends: where and how a planned job runs (``base.Backend`` is the interface; ``ssh``, ``slurm`` and
``ray`` implement it, ``preflight`` checks the hosts, ``remote`` reaches them; grpo_ui.jobs.service runs jobs through
it)."""
