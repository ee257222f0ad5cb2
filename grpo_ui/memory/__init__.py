"""Per-GPU memory of a resolved job, every term and phase: pure functions, no I/O. What the estimate takes
(inputs.py, with the one adapter from a job), model states (states.py), dynamic memory (dynamic.py), vLLM
(vllm.py), the phases and verdict (estimate.py) and what it reports (report.py)."""
