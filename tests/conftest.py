"""Shared fixtures: where the ms-swift venvs (4.6, 3.12's argument classes, 4.6 with Megatron) and the tiny model
assets live (built by `make test`); the test hosts, Slurm and the browser come from their own modules (pytest_plugins below)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

SWIFT_VENV = Path(os.environ.get("GRPO_UI_SWIFT_VENV", Path.home() / ".cache/grpo-ui/swift-venv"))
SWIFT3_VENV = Path(os.environ.get("GRPO_UI_SWIFT3_VENV", Path.home() / ".cache/grpo-ui/swift3-venv"))


def _python(venv: Path, target: str) -> Path:
    """A venv's python; a missing venv fails the test (`make TARGET` builds it, make test does), never skips."""
    py = venv / "bin" / "python"
    if not py.exists():
        pytest.fail(f"ms-swift venv missing at {venv}: run `make {target}` (make test does it)")
    return py


@pytest.fixture(scope="session")
def swift_python() -> Path:
    """ms-swift 4.6 (CPU torch): real GRPO runs and its argument parser."""
    return _python(SWIFT_VENV, "swift-venv")


@pytest.fixture(scope="session")
def swift3_python() -> Path:
    """ms-swift 3.12's argument classes (the import corpus's 3.x oracle)."""
    return _python(SWIFT3_VENV, "swift3-venv")


@pytest.fixture(scope="session")
def megatron_python() -> Path:
    """ms-swift 4.6 with megatron-core and mcore-bridge: megatron rlhf's own argument classes (tests/megatron_oracle.py)."""
    from tests.megatron_oracle import MEGATRON_VENV
    return _python(MEGATRON_VENV, "megatron-venv")


@pytest.fixture
def home(tmp_path, monkeypatch):
    """grpo-ui's data directory (its database and drafts) in tmp_path."""
    monkeypatch.setenv("GRPO_UI_HOME", str(tmp_path))
    return tmp_path


@pytest.fixture
def store_with_job(tmp_path, monkeypatch):
    """A store of the app's own (GRPO_UI_HOME and GRPO_UI_DB in tmp_path) holding job ``job-a``, the first preset, in
    the given state: ``store, spec = store_with_job("failed")``."""
    from grpo_ui.jobs.store import Store
    from grpo_ui.spec.presets import presets
    from grpo_ui.spec.yaml_io import spec_to_yaml

    def make(state: str):
        monkeypatch.setenv("GRPO_UI_HOME", str(tmp_path))
        monkeypatch.setenv("GRPO_UI_DB", str(tmp_path / "db.sqlite"))
        store, spec = Store(), next(iter(presets().values()))
        store.create_job("job-a", spec.name, spec_to_yaml(spec), state)
        return store, spec
    return make


def pytest_collection_modifyitems(items):
    """make test runs the suite on two pytest-xdist workers (-n 2 --dist loadgroup); the tests that share something
    machine-wide run on one worker, one after another: the system's Slurm daemons (one test cluster at a time), and
    the real Ray clusters of test_ray.py (a few GiB each: one at a time keeps the suite within a small CI machine)."""
    for item in items:
        if "slurm" in item.fixturenames:
            item.add_marker(pytest.mark.xdist_group("slurm"))
        elif item.module.__name__ == "tests.test_ray":
            item.add_marker(pytest.mark.xdist_group("ray"))


pytest_plugins = ["tests.hosts", "tests.slurm", "tests.browser"]
