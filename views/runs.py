"""Each script run ends by saying so, for a browser to read: the browser tests wait on it, never on time.

A run that reaches its end draws a hidden element with the session's run count and what ran:
``<div class="grpo-ui-run" data-part="page" data-run="N">`` for the page, the fragment's name as ``data-part`` for a
live fragment, which reruns without the page around it (the element's container is hidden by CSS: no text, no space).
A browser that clicked or typed waits until the highest count of that part went past the one it saw before, and
Streamlit's ``data-test-script-state`` on stApp is ``notRunning``. Neither alone will do: after a click that state
still says ``notRunning`` until the server has started the run, and says so for a moment between the runs of an
``st.rerun()``; the count alone moves before Streamlit has
removed what the run no longer draws. A fragment rerunning by itself
every few seconds moves its own count, not the page's.

A run cut short by ``st.rerun()`` draws no marker (the run it starts does). ``st.stop()`` refuses every element after
it, so a page that ends early calls ``end_page()``, which draws the marker first.
"""

from __future__ import annotations

import functools
from typing import NoReturn

import streamlit as st

from views.boundary import error_boundary

MARKER_CLASS = "grpo-ui-run"
_HIDDEN = f"<style>.stElementContainer:has(.{MARKER_CLASS}){{display:none}}</style>"


def finished(part: str = "page") -> None:
    """Mark this run of ``part`` (the page, or a fragment's name) as finished: call it last."""
    count = st.session_state["run_marker_count"] = st.session_state.get("run_marker_count", 0) + 1
    st.html(f'<div class="{MARKER_CLASS}" data-part="{part}" data-run="{count}"></div>{_HIDDEN}')


def end_page() -> NoReturn:
    """End the page's run here (st.stop), marked as finished."""
    finished()
    st.stop()


def live_fragment(run_every: float):
    """A part of a page that reruns alone every ``run_every`` seconds, inside the error boundary, each run marked."""
    def decorate(fn):
        @st.fragment(run_every=run_every)
        @functools.wraps(fn)
        def run() -> None:
            with error_boundary():
                fn()
            finished(fn.__name__)
        return run
    return decorate
