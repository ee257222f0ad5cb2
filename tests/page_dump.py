"""What pages show, as data: each page run once in Streamlit's AppTest and every element it drew, in page order, as
JSON (its kind, and its label, value, rows or chart titles). The upgrade test runs it under two releases' trees over
the same jobs and compares the dumps.

    PYTHONPATH=TREE python tests/page_dump.py TREE OUT.json configure monitor …

``configure`` is the app's default page, run through app.py (its links need the app's navigation); ``diagnose`` is
dumped after asking for the report of the first stored job's node logs.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def _element(node) -> dict | None:
    kind = type(node).__name__
    if hasattr(node, "children"):  # a block: the page, a column, an expander, a container …
        out = {"kind": kind, "label": getattr(node, "label", None), "children": []}
        for child in node.children.values():
            if (drawn := _element(child)) is not None:
                out["children"].append(drawn)
        return out if out["children"] or out["label"] else None
    proto = getattr(node, "proto", None)
    if kind in ("Dataframe", "Table"):
        return {"kind": kind, "rows": node.value.astype(str).to_dict("records")}
    if kind == "Metric":
        return {"kind": kind, "label": node.label, "value": node.value}
    if kind == "UnknownElement" and proto is not None and getattr(node, "type", "") == "plotly_chart":
        spec = json.loads(proto.spec)
        return {"kind": "plotly_chart", "titles": sorted(a["text"] for a in spec["layout"].get("annotations", [])),
                "traces": sorted({d.get("name") or "" for d in spec["data"]})}
    if kind == "UnknownElement":
        return {"kind": getattr(node, "type", kind)}
    label, value = getattr(node, "label", None), getattr(node, "value", None)
    if kind in ("Selectbox", "Radio", "Multiselect"):
        return {"kind": kind, "label": label, "options": list(node.options), "value": str(value)}
    return {"kind": kind, "label": label, "value": None if value is None else str(value)}


def dump(tree: Path, page: str) -> dict:
    from streamlit.testing.v1 import AppTest
    script = tree / "app.py" if page == "configure" else tree / "views" / f"{page}.py"  # the app's default page
    at = AppTest.from_file(str(script), default_timeout=120).run()
    if page == "diagnose":
        at.radio(key="diagnose_source").set_value("A job's node logs").run()
        at.button(key="diagnose_run").click().run()
    return {"exception": [str(e.value) for e in at.exception], "main": _element(at.main),
            "sidebar": _element(at.sidebar)}


if __name__ == "__main__":
    tree, out, pages = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3:]
    out.write_text(json.dumps({page: dump(tree, page) for page in pages}, indent=1, default=str))
