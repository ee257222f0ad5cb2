"""Shared fixtures: where the ms-swift venv and the tiny model assets live (built by `make test`)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

SWIFT_VENV = Path(os.environ.get("GRPO_UI_SWIFT_VENV", Path.home() / ".cache/grpo-ui/swift-venv"))


@pytest.fixture(scope="session")
def swift_python() -> Path:
    """The ms-swift venv's python; a missing venv fails the test (run `make swift-venv`), it is never skipped."""
    py = SWIFT_VENV / "bin" / "python"
    if not py.exists():
        pytest.fail(f"ms-swift venv missing at {SWIFT_VENV}: run `make swift-venv` (make test does it)")
    return py


pytest_plugins = ["tests.hosts", "tests.slurm"]
