"""The library's structure: import-linter's contracts (pyproject.toml, [tool.importlinter]) hold — each layer imports
only from the layers below it, no package's modules import in a circle, and the library never imports Streamlit."""

from __future__ import annotations

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
