"""What each ms-swift release requires of vllm, trl, transformers, torch, deepspeed and peft (grpo_ui/knowledge/data/compat.yaml,
each row citing its source), and the versions on a node that break those requirements."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import yaml

TABLE = Path(__file__).parent / "data" / "compat.yaml"
CLAUSE = re.compile(r"^\s*(>=|<=|==|!=|<|>)\s*([\w.]+)\s*$")


@dataclass(frozen=True)
class Conflict:
    package: str
    installed: str
    wanted: str   # the range, e.g. ">=4.33,<5.20.0"
    why: str      # where the range comes from
    known_bad: bool = False


@cache
def table() -> dict:
    return yaml.safe_load(TABLE.read_text())["swift"]


def version_tuple(text: str) -> tuple[int, ...]:
    """'5.19.0' → (5, 19, 0); '2.13.0+cpu' / '0.8.5.post1' / '4.6.0.dev0' keep their leading numbers."""
    return tuple(int(x) for x in re.findall(r"\d+", text.split("+")[0].split(".dev")[0])[:3])


def satisfies(installed: str, spec: str) -> bool:
    """``installed`` within a range such as ">=4.33,<5.20.0" (compared on up to three numbers, padded)."""
    have = version_tuple(installed)
    for clause in spec.split(","):
        m = CLAUSE.match(clause)
        if not m:
            continue
        want = version_tuple(m[2])
        a, b = have + (0,) * (3 - len(have)), want + (0,) * (3 - len(want))
        if not {"<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b, "==": a == b, "!=": a != b}[m[1]]:
            return False
    return True


def row_for(swift: str) -> dict | None:
    """The table's row of the installed ms-swift's minor version (None when the table has no row for it)."""
    found = re.match(r"(\d+)\.(\d+)", swift or "")
    return table().get(f"{found[1]}.{found[2]}") if found else None


def conflicts(versions: dict[str, str | None]) -> list[Conflict]:
    """The installed packages (name → version, None when missing) outside what the installed ms-swift requires."""
    row = row_for(versions.get("ms-swift") or "")
    if not row:
        return []
    out = [Conflict(pkg, have, want, row["source"]) for pkg, want in row["requires"].items()
           if (have := versions.get(pkg)) and not satisfies(have, want)]
    for bad in row.get("known_bad", []):
        pkg = next(k for k in bad if k != "why")
        if (have := versions.get(pkg)) and satisfies(have, bad[pkg]):
            out.append(Conflict(pkg, have, bad[pkg], bad["why"], known_bad=True))
    return out
