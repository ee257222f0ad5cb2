"""The suite's one wait: poll a condition until it holds. The bound only catches what is broken (a loaded machine
waits longer, it never fails sooner), and the caller says what it expected when the bound passes."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_for(condition: Callable[[], T], timeout: float = 30.0, every: float = 0.2) -> T:
    """The first truthy value ``condition()`` returns, asked every ``every`` seconds; once ``timeout`` seconds have
    passed, its last (falsy) value."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value or time.monotonic() >= deadline:
            return value
        time.sleep(every)
