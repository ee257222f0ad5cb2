"""py-spy on the nodes: where it is, and the shell command that dumps every rank's Python stack (the doctor reads
the dumps: grpo_ui.doctor.stacks)."""

from __future__ import annotations

import re

from grpo_ui.core import shell

TOOLS_DIR = ".grpo-ui-tools"  # under the cluster's run_root on each node: where preflight pip-installs py-spy


def py_spy_candidates(run_root: str, python_env: str | None) -> list[str]:
    """Where a node's py-spy may be, in order: grpo-ui's own tools prefix, the job's environment, PATH."""
    return [f"{run_root.rstrip('/')}/{TOOLS_DIR}/bin/py-spy"] + ([f"{python_env.rstrip('/')}/bin/py-spy"]
                                                                 if python_env else []) + ["py-spy"]


def find_py_spy(candidates: list[str]) -> str:
    """Shell code setting $spy to the first candidate that runs (empty when none does)."""
    words = " ".join(shell.path(c) if "/" in c else shell.quote(c) for c in candidates)
    return f'spy=; for c in {words}; do "$c" --version > /dev/null 2>&1 && {{ spy=$c; break; }}; done; '


def dump_command(token: str, candidates: list[str]) -> str:
    """Shell command for one node: a ``py-spy dump`` of every process carrying ``token`` (the backend's marker)
    that has RANK in its environment, each after a ``## rank R local_rank L pid P`` line. ``--nonblocking`` reads
    the stacks without pausing the process (a stopped or busy rank is read as it is, training is not slowed)."""
    return (find_py_spy(candidates) + '[ -n "$spy" ] || { echo "## py-spy not found (preflight installs it)"; '
            "exit 0; }; for d in /proc/[0-9]*; do e=$(tr '\\0' '\\n' < \"$d/environ\" 2>/dev/null) || continue; "
            f"printf '%s\\n' \"$e\" | grep -qxF {shell.quote(token)} || continue; "
            "r=$(printf '%s\\n' \"$e\" | sed -n 's/^RANK=//p'); [ -n \"$r\" ] || continue; "
            "l=$(printf '%s\\n' \"$e\" | sed -n 's/^LOCAL_RANK=//p'); p=${d#/proc/}; "
            "echo \"## rank $r local_rank $l pid $p\"; "
            'timeout 30 "$spy" dump --nonblocking --pid "$p" 2>&1; done')


def label_node(text: str, node: str) -> str:
    """Prefix every ``## rank …`` header of one node's dump output with the node's label."""
    return re.sub(r"^## ", f"## {node} ", text, flags=re.M)
