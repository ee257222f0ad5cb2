"""The library's structure: import-linter's contracts (pyproject.toml, [tool.importlinter]) hold — each layer imports
only from the layers below it, no package's modules import in a circle, the library never imports Streamlit or the
pages, and the pages and the commands use only the one door (grpo_ui.api) and grpo_ui.core — and each check can
fail."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parent.parent


def test_the_import_contracts_hold():
    lint = Path(sys.executable).with_name("lint-imports")
    done = subprocess.run([str(lint), "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "0 broken" in done.stdout


def test_a_broken_contract_is_reported(tmp_path):
    """The check can fail: a copy of the contracts with the layers upside down is broken on this very tree."""
    config = (ROOT / "pyproject.toml").read_text()
    start = config.index("layers = [")
    end = config.index("]", start)
    layers = [line for line in config[start:end].splitlines()[1:] if line.strip()]
    flipped = config[:start] + "layers = [\n" + "\n".join(reversed(layers)) + "\n" + config[end:]
    (tmp_path / "flipped.toml").write_text(flipped)
    lint = Path(sys.executable).with_name("lint-imports")
    done = subprocess.run([str(lint), "--no-cache", "--config", str(tmp_path / "flipped.toml")], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode != 0 and "BROKEN" in done.stdout


def test_a_page_that_reaches_past_the_door_is_reported(tmp_path):
    """The faces' contract sees the pages: a page that reads the job store itself (as the Monitor did before the
    door), put in a package the contract covers, breaks it."""
    probe = tmp_path / "views_probe"
    probe.mkdir()
    (probe / "__init__.py").write_text("")
    (probe / "monitor.py").write_text("from grpo_ui.api.workspace import Workspace\nfrom grpo_ui.jobs.store import Store\n")
    config = (ROOT / "pyproject.toml").read_text()
    config = config.replace('root_packages = ["grpo_ui", "views"]', 'root_packages = ["grpo_ui", "views", "views_probe"]')
    config = config.replace('source_modules = ["views", ', 'source_modules = ["views", "views_probe", ')
    (tmp_path / "probe.toml").write_text(config)
    lint = Path(sys.executable).with_name("lint-imports")
    done = subprocess.run([str(lint), "--no-cache", "--config", str(tmp_path / "probe.toml")], cwd=ROOT,
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": f"{tmp_path}:{ROOT}"})
    assert done.returncode != 0 and "go through the one door" in done.stdout and "BROKEN" in done.stdout, done.stdout
    assert "views_probe.monitor -> grpo_ui.jobs.store" in done.stdout


def test_the_app_script_uses_the_door_too():
    """app.py (a script, outside any package import-linter can hold) imports the library's core and door only."""
    import ast
    tree = ast.parse((ROOT / "app.py").read_text())
    named = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
    library = {m for m in named if m.startswith("grpo_ui")}
    assert library and all(m.startswith(("grpo_ui.core", "grpo_ui.api")) for m in library), library
