"""Findings about a job before anything runs: ms-swift's rules and field experience (rules/, one module per
concern), the Slurm spec checks (slurm.py), make-it-fit (fit.py), and all of them together (assess.py)."""
