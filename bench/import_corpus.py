"""Import corpus score: for every script in tests/import_corpus/, the ms-swift fields (and env entries) whose value
differs between the script as bash runs it and grpo-ui's rendering of its import; target 0 everywhere.

Needs the ms-swift venvs (`make swift-venv swift3-venv`). Run: PYTHONPATH=. python bench/import_corpus.py
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from tests import swift_oracle


def main() -> None:
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        results = swift_oracle.evaluate(Path(tmp))
    for r in results:
        errors = [f.id for f in r.findings if f.severity == "error"]
        print(f"{r.case.name:45s} ms-swift {r.case.version:5s} differing fields: {len(r.differences)}"
              + (f"  import errors: {errors}" if errors else ""))
        for d in r.differences:
            print(f"    {d}")
    clean = sum(not r.differences for r in results)
    total = sum(len(r.differences) for r in results)
    print(f"corpus: {len(results)} scripts, {clean}/{len(results)} with 0 differing fields, {total} differing fields "
          f"in all ({time.perf_counter() - start:.1f} s)")


if __name__ == "__main__":
    main()
