"""One module per `python -m grpo_ui <command>`: each has add_parser(subparsers) and run(args) -> exit code."""
