"""One module per `python -m grpo_ui <command>`: each has add_parser(subparsers) and run(args) -> exit code."""

from __future__ import annotations

import argparse

from grpo_ui.api.specs import SpecError, check_name


def job_id(text: str) -> str:
    """argparse type of --job-id: the one name validator (the id names a directory on every node)."""
    try:
        return check_name(text)
    except SpecError as e:
        raise argparse.ArgumentTypeError(e.problems[0][1]) from None
