"""Command line: `python -m grpo_ui <command> …` — validate, import, args, estimate, render, preflight, launch, …"""

from __future__ import annotations

import argparse
import importlib
import logging
import pkgutil
import sys
from pathlib import Path

from grpo_ui import commands
from grpo_ui.core.errors import UserError, describe, log
from grpo_ui.core.private import data_dir_path, home, private_file


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m grpo_ui", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for mod in sorted(m.name for m in pkgutil.iter_modules(commands.__path__)):
        importlib.import_module(f"grpo_ui.commands.{mod}").add_parser(sub)
    return parser


def error_log() -> Path:
    """errors.log in grpo-ui's data directory, where the tracebacks of internal errors go (never the terminal); a
    UserError naming the directory when it cannot be written there."""
    try:
        return private_file(home() / "errors.log")
    except OSError as e:
        raise UserError(f"grpo-ui's data directory {data_dir_path()} cannot be written ({e.strerror or e}): make it "
                        "writable, or point GRPO_UI_HOME at a directory of your own") from None


def main(argv: list[str] | None = None) -> int:
    """Run one command; a user's mistake prints its message (exit 2), anything else an error id whose traceback
    goes to errors.log in grpo-ui's data directory (exit 3)."""
    args = build_parser().parse_args(argv)
    try:
        path = error_log()
    except UserError as e:
        print(e, file=sys.stderr)
        return 2
    log.addHandler(logging.FileHandler(path))  # tracebacks of internal errors: here, never on the terminal
    log.propagate = False
    try:
        return args.run(args)
    except UserError as e:
        print(e, file=sys.stderr)
        return 2
    except Exception as e:  # noqa: BLE001 - never a traceback on the terminal
        print(f"{describe(e)} (log: {path})", file=sys.stderr)
        return 3


if __name__ == "__main__":
    sys.exit(main())
