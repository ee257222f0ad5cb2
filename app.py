"""grpo-ui: configure, validate, estimate, render, launch and watch ms-swift GRPO jobs. Run: make run"""

from __future__ import annotations

import hmac
import os

import streamlit as st

LOOPBACK = ("127.0.0.1", "localhost", "::1")


def password_ok() -> bool:
    """Bound to loopback: open. Bound elsewhere: a password from Streamlit secrets or GRPO_UI_PASSWORD is required."""
    if (st.get_option("server.address") or "127.0.0.1") in LOOPBACK:
        return True
    try:
        expected = st.secrets.get("password")
    except FileNotFoundError:
        expected = None
    expected = expected or os.environ.get("GRPO_UI_PASSWORD")
    if not expected:
        st.error("grpo-ui is bound to a non-loopback address but no password is set: set GRPO_UI_PASSWORD or "
                 "`password` in .streamlit/secrets.toml, or bind to 127.0.0.1.")
        return False
    if st.session_state.get("authenticated"):
        return True
    given = st.text_input("Password", type="password")
    if given and hmac.compare_digest(given, expected):
        st.session_state["authenticated"] = True
        st.rerun()
    elif given:
        st.error("Wrong password.")
    return False


st.set_page_config(page_title="grpo-ui", page_icon="🧪", layout="wide")
PAGES = [st.Page("pages/configure.py", title="Configure", icon=":material/tune:", default=True),
         st.Page("pages/cluster.py", title="Cluster", icon=":material/dns:"),
         st.Page("pages/launch.py", title="Launch", icon=":material/rocket_launch:"),
         st.Page("pages/monitor.py", title="Monitor", icon=":material/monitoring:"),
         st.Page("pages/history.py", title="History", icon=":material/history:")]
if password_ok():
    page = st.navigation(PAGES, position="hidden")
    with st.sidebar:
        st.markdown("### grpo-ui")
        for p in PAGES:
            st.page_link(p)
    page.run()
