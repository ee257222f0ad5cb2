"""Every flag and enum value grpo-ui emits for ms-swift 4.x is accepted by ms-swift's own argument parser.

Runs the real parser (transformers' HfArgumentParser over ms-swift's RLHFArguments / RolloutArguments, exactly as
`swift rlhf` builds it) in the ms-swift venv, so a renamed flag or enum value breaks this test, not a user's job.
"""

import json
import subprocess
from types import UnionType
from typing import Literal, Union, get_args, get_origin

import pytest

from grpo_ui.spec.model import ARGS, JobSpec
from grpo_ui.spec.paths import with_changes
from grpo_ui.spec.swift_cli import rollout_command, train_command

PROBE = r"""
import json, sys
from transformers import HfArgumentParser
from swift.utils.utils import _patch_get_type_hints
from swift.arguments import RLHFArguments, RolloutArguments
from swift.version import __version__
parsers = {}
def parser(kind):
    if kind not in parsers:
        with _patch_get_type_hints():
            parsers[kind] = HfArgumentParser([RLHFArguments if kind == 'rlhf' else RolloutArguments])
    return parsers[kind]
out = []
for argv in json.load(sys.stdin):
    try:
        _, rest = parser(argv[0]).parse_known_args(argv[1:])
        out.append({'unknown': rest})
    except SystemExit:
        out.append({'error': 'argparse rejected it'})
print(json.dumps({'version': __version__, 'results': out}))
"""

BASE = {"train.model": "m", "train.dataset": ["d"], "train.reward_funcs": ["format"]}
SERVER = {"rollout.vllm_mode": "server", "rollout.vllm_server_host": ["h"]}


def sample_values(decl) -> list:
    """Non-default values for a field: every Literal choice, the other boolean, an in-bounds number, a string."""
    ann = decl.annotation
    if get_origin(ann) in (Union, UnionType):  # X | None
        ann = next(a for a in get_args(ann) if a is not type(None))
    if get_origin(ann) is Literal:
        return [v for v in get_args(ann) if v != decl.default]
    if ann is bool:
        return [not decl.default]
    if ann is int:
        return [max(decl.bounds.get("ge", 1), decl.bounds.get("gt", 0) + 1, 2) + (decl.default or 0)]
    if ann is float:
        return [0.5]
    if get_origin(ann) is list:
        item = get_args(ann)[0]
        return [{str: ["a", "b"], int: [8001], float: [1.0, 0.5]}[item]]
    return ["x"]


SWIFT_ARGS = [d for d in ARGS if "swift" in d.engines]  # megatron rlhf's own: tests/test_megatron_oracle.py


def cases():
    for d in SWIFT_ARGS:
        for value in sample_values(d):
            base = dict(BASE, **(SERVER if d.applies == "server" else {}))
            if d.path == "train.reward_weights":
                value = [1.0]
            yield d, with_changes(JobSpec(), {**base, d.path: value})


def run_probe(python, argvs):
    proc = subprocess.run([str(python), "-c", PROBE], input=json.dumps(argvs), capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_every_emitted_flag_and_value_parses_in_real_ms_swift(swift_python):
    labelled, retired = [], set()
    for decl, spec in cases():
        cmd = rollout_command(spec) if decl.section == "server" else train_command(spec)
        if not decl.accepted_in(spec.swift_version):  # e.g. a 3.x-only field: reported, never sent to 4.x
            assert [f.id for f in cmd.findings] == ["VERSION-FLAG-UNSUPPORTED"], decl.path
            assert f"--{decl.flag}" not in cmd.argv, decl.path
            retired.add(decl.path)
            continue
        assert not cmd.findings, (decl.path, cmd.findings)
        assert f"--{decl.flag}" in cmd.argv, decl.path  # the value under test really is on the command line
        labelled.append((decl.path, cmd.argv))
    assert {path for path, _ in labelled} | retired == {d.path for d in SWIFT_ARGS}
    report = run_probe(swift_python, [argv for _, argv in labelled])
    assert report["version"].startswith("4.")
    bad = [(path, argv, r) for (path, argv), r in zip(labelled, report["results"], strict=True) if r.get("error") or r["unknown"]]
    assert not bad, f"ms-swift {report['version']} rejects: " + "; ".join(f"{p}: {r}" for p, _, r in bad[:10])


@pytest.mark.slow
def test_the_probe_can_fail(swift_python):
    """The same probe rejects the 3.x flag name and a bad enum value, so the test above is not vacuous."""
    report = run_probe(swift_python, [["rlhf", "--train_type", "lora"], ["rlhf", "--truncation_strategy", "nonsense"],
                                      ["rlhf", "--tuner_type", "lora"]])
    unknown, bad_enum, good = report["results"]
    assert unknown["unknown"] == ["--train_type", "lora"]
    assert "error" in bad_enum
    assert good == {"unknown": []}
