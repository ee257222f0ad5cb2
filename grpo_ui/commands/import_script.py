"""`import run.sh [node2.sh …] [--swift VERSION] [--keep-partial]`: existing launch scripts (swift rlhf, megatron rlhf,
Ray mode's run script with its config) or one ms-swift config → job YAML on stdout, findings on stderr. A script bash
or ms-swift would refuse writes no YAML (exit 1) unless --keep-partial."""

from __future__ import annotations

import sys
from pathlib import Path

from grpo_ui.api.specs import CONFIG_SUFFIXES, ImportRefused, SpecError, import_scripts, import_uploads, spec_to_yaml
from grpo_ui.core.findings import format_findings


def add_parser(sub) -> None:
    p = sub.add_parser("import", help="turn swift rlhf / megatron rlhf / swift rollout launch scripts (one per node), "
                                      "or one ms-swift config, into a job YAML")
    p.add_argument("scripts", nargs="+", help="shell scripts; several = the nodes of one job; or one YAML config")
    p.add_argument("--swift", metavar="VERSION", default="4.6", help="target ms-swift version (default 4.6)")
    p.add_argument("--keep-partial", action="store_true", help="write what could be read even when a script has a "
                   "flag without its value or text bash cannot parse (the YAML's import_errors says what is missing)")
    p.set_defaults(run=run)


def run(args) -> int:
    scripts = []
    for path in args.scripts:
        try:
            scripts.append((path, Path(path).read_bytes()))
        except OSError as e:
            raise SpecError([("scripts", f"cannot read {path}: {e.strerror}")]) from None
    # On the command line, config files a script names are read from its directory (the web page never does that);
    # one YAML alone is an ms-swift config (or a Ray config) imported as the command that runs it.
    try:
        if len(scripts) == 1 and scripts[0][0].endswith(CONFIG_SUFFIXES):
            spec, findings = import_uploads({Path(scripts[0][0]).name: scripts[0][1]}, args.swift,
                                            keep_partial=args.keep_partial)
        else:
            spec, findings = import_scripts(scripts, args.swift, local_dir=Path(args.scripts[0]).resolve().parent,
                                            keep_partial=args.keep_partial)
    except ImportRefused as e:
        print(format_findings(e.findings) + "\nNo YAML written: fix the script(s), or pass --keep-partial to keep "
              "what could be read.", file=sys.stderr)
        return 1
    sys.stdout.write(spec_to_yaml(spec))
    if findings:
        print(format_findings(findings), file=sys.stderr)
    return 1 if any(f.severity == "error" for f in findings) else 0
