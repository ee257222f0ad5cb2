"""The doctor on real Ray failures (tests/data/captured/ray_*.log, made by ray_failures.py there with Ray 2.60): a
remote task's error is read through Ray's RayTaskError wrapper down to the error the task raised, and an actor whose
worker died is told by the raylet's own line, printed before the driver's ActorDiedError."""

from pathlib import Path

from grpo_ui.doctor.diagnose import report
from grpo_ui.doctor.logfiles import snapshot

CAPTURED = Path(__file__).parent / "data" / "captured"


def test_ray_task_error_is_read_down_to_the_error_the_task_raised():
    found = report(snapshot([CAPTURED / "ray_task_error.log"]))
    assert found.headline.startswith("first error: ray_task_error.log: Out of GPU memory — RuntimeError: CUDA out of")
    assert "OOM" in {a.id for a in found.alerts}
    assert "RayTaskError" not in found.headline


def test_ray_actor_died_is_told_by_the_raylet_line_before_it():
    found = report(snapshot([CAPTURED / "ray_actor_died.log"]))
    assert "A worker died or was killed while executing a task" in found.headline
    assert found.headline.startswith("first error: ray_actor_died.log, raylet: the process died")
