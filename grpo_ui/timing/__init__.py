"""Seconds per optimizer step of a resolved job, by phase, and the run's hours, GPU-hours and cost: pure functions,
no I/O. What the model takes (inputs.py, with the one adapter from a job), generation (rollout.py), the trainer's
forwards, backward and optimizer (training.py), weight sync, sleep and offload (transfer.py), collectives and copies
(links.py), the fitted efficiencies (efficiency.py), the completion length assumed when none is given (lengths.py),
the round put together (predict.py) and what it reports (report.py). Checked against published step times:
bench/time_accuracy.py, tests/data/time_measurements.jsonl."""
