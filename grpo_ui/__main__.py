"""Command line: `python -m grpo_ui <command> …` — validate, import, args, estimate, render, preflight, launch, …"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys

from grpo_ui import commands
from grpo_ui.spec import SpecError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m grpo_ui", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for mod in sorted(m.name for m in pkgutil.iter_modules(commands.__path__)):
        importlib.import_module(f"grpo_ui.commands.{mod}").add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.run(args)
    except SpecError as e:
        print(e, file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
