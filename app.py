"""grpo-ui: configure, validate, estimate, render, launch and watch ms-swift GRPO jobs. Run: make run

Every request runs this script first. Bound to anything but loopback, a browser session that has not signed in gets
a navigation that holds only the sign-in form, under every page's address, so no page runs by its URL; error details
are then never sent to browsers. Every page runs inside one error boundary (views/boundary.py), and every run that
reaches its end says so to the browser (views/runs.py). The pages live in views/, not pages/: Streamlit serves a
pages/ directory by itself until st.navigation is first called.
"""

from __future__ import annotations

import logging
import os
import secrets

import streamlit as st

from grpo_ui.core.errors import log
from views import auth, runs
from views.boundary import error_boundary

VIEWS = [("configure", "Configure", ":material/tune:"), ("cluster", "Cluster", ":material/dns:"),
         ("launch", "Launch", ":material/rocket_launch:"), ("monitor", "Monitor", ":material/monitoring:"),
         ("history", "History", ":material/history:"), ("diagnose", "Diagnose a log", ":material/troubleshoot:")]
HOME = "home"  # the default page's own path: Configure at "/" (and at /configure)


def expected_password() -> str | None:
    try:
        expected = st.secrets.get("password")
    except FileNotFoundError:
        expected = None
    return expected or os.environ.get("GRPO_UI_PASSWORD")


def sign_in_page() -> None:
    st.title("grpo-ui")
    expected = expected_password()
    if not expected:
        st.error("grpo-ui is bound to a non-loopback address but no password is set: set GRPO_UI_PASSWORD or "
                 "`password` in .streamlit/secrets.toml, or bind to 127.0.0.1.")
        return
    with st.form("sign_in"):
        given = st.text_input("Password", type="password")
        submitted = st.form_submit_button("Sign in")
    if submitted:
        problem = auth.sign_in(st.session_state.setdefault("session_key", secrets.token_hex(16)), given, expected)
        if problem is None:
            st.session_state["authenticated"] = True
            st.rerun()
        st.error(problem)


def app_pages() -> list[st.Page]:
    first, *_ = VIEWS
    return [st.Page(f"views/{first[0]}.py", title=first[1], icon=first[2], url_path=HOME, default=True),
            *(st.Page(f"views/{name}.py", title=title, icon=icon, url_path=name,
                      visibility="hidden" if name == first[0] else "visible") for name, title, icon in VIEWS)]


def sign_in_pages() -> list[st.Page]:
    """The sign-in form under every address a page has, so a page's URL shows it (then the page, once signed in)."""
    return [st.Page(sign_in_page, title="Sign in", url_path=path, default=path == HOME)
            for path in (HOME, *(name for name, _, _ in VIEWS))]


if not log.handlers:  # tracebacks go to the server's console (stderr), never to a browser
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
    log.addHandler(handler)
st.set_page_config(page_title="grpo-ui", page_icon="🧪", layout="wide")
locked = auth.needs_password(st.get_option("server.address"))
if locked:
    st.set_option("client.showErrorDetails", "none")
if locked and not st.session_state.get("authenticated"):
    st.navigation(sign_in_pages(), position="hidden").run()
else:
    pages = app_pages()
    page = st.navigation(pages, position="hidden")
    with st.sidebar:
        st.markdown("### grpo-ui")
        for p in pages:
            if p.url_path != "configure":
                st.page_link(p)
    with error_boundary():
        page.run()
runs.finished()  # the browser tests wait for it (views/runs.py)
