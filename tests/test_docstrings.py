"""Docstrings name what exists: every dotted ``grpo_ui.…`` name in a docstring of the library, the pages, the
benchmarks or the tests resolves to a module, or to an attribute of one (a class, a function, a method, a constant)."""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

ROOT = Path(__file__).parent.parent
NAME = re.compile(r"\bgrpo_ui(?:\.[A-Za-z_]\w*)+")


def docstrings(path: Path):
    tree = ast.parse(path.read_text(), str(path))
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            if doc := ast.get_docstring(node, clean=False):
                yield getattr(node, "lineno", 1), doc


def resolves(name: str) -> bool:
    """The longest importable module prefix, then attributes for the rest."""
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            found = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for attr in parts[cut:]:
            if not hasattr(found, attr):
                return False
            found = getattr(found, attr)
        return True
    return False


def named() -> list[tuple[str, str]]:
    """(where, name) of every dotted grpo_ui name in a docstring."""
    files = [p for folder in ("grpo_ui", "views", "bench", "tests") for p in (ROOT / folder).rglob("*.py")]
    return [(f"{p.relative_to(ROOT)}:{line}", name) for p in [*files, ROOT / "app.py"]
            for line, doc in docstrings(p) for name in NAME.findall(doc)]


def test_every_dotted_grpo_ui_name_in_a_docstring_resolves():
    found = named()
    assert len({name for _, name in found}) > 20  # the check sees the docstrings that name modules
    missing = [f"{where}: {name}" for where, name in found if not resolves(name.rstrip("."))]
    assert not missing, "docstrings name what does not exist:\n" + "\n".join(missing)


def test_a_stale_name_is_caught():
    assert resolves("grpo_ui.doctor.liveness") and resolves("grpo_ui.jobs.store.Store.update_memory_peaks")
    assert not resolves("grpo_ui.monitor.liveness") and not resolves("grpo_ui.jobs.store.Store.no_such_method")
