"""The one error boundary of every page and live fragment: a user's mistake (bad input, an unreachable host, a
database in the way) shows its own message; anything else is logged with its traceback on the server, and the
browser gets only an error id (grpo_ui.core.errors)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import streamlit as st

from grpo_ui.core.errors import describe


@contextmanager
def error_boundary() -> Iterator[None]:
    try:
        yield
    except Exception as e:  # noqa: BLE001 - the boundary; st.rerun/st.stop are BaseExceptions and pass through
        st.error(describe(e))
