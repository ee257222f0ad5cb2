"""Helpers of the page tests (Streamlit's AppTest): the app opened (optionally at a draft's address), the draft a
tab edits, a form field in its section, the downloads' state, what a page says in words and the cards' changes."""

from __future__ import annotations

import html
import re
from pathlib import Path

from streamlit.testing.v1 import AppTest

from grpo_ui.spec.model import ARGS_BY_PATH

ROOT = Path(__file__).parent.parent
APP = str(ROOT / "app.py")


def open_app(query: dict | None = None) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=60)
    at.query_params.update(query or {})
    return at.run()


def draft_of(at) -> str:
    """The draft id in the page's address."""
    value = at.query_params["draft"]
    return value[0] if isinstance(value, list) else value


def field(at, path):
    at.button_group(key="section").set_value(ARGS_BY_PATH[path].group).run()
    return at.text_input(key=f"f:{path}")


def downloads_disabled(at) -> list[bool]:
    return [b.proto.disabled for b in at.get("download_button")]


def texts(at) -> str:
    """Everything the page says in words (markdown, captions and the boxes), one element per line."""
    return "\n".join(e.value for kind in ("markdown", "caption", "info", "warning", "error", "success")
                     for e in at.get(kind) if isinstance(e.value, str))


def card_changes(at) -> list[str]:
    """The changes of each make-it-fit and make-it-faster card, as the reader sees them ("- path → value" lines)."""
    return [html.unescape(re.sub(r"<[^>]+>", "", m.value)) for m in at.markdown
            if m.value.startswith("- <code") and " → " in m.value]
