"""Shell safety, property-based: any string in any field reaches swift exactly as typed.

Each example puts hostile strings (quotes, $(), backticks, newlines, unicode, leading dashes, empty strings) in every
string field at once, renders the node script, checks `bash -n`, runs it with `swift` replaced by a recorder on PATH,
and compares the argv and environment it received with the intended ones. 1000 examples = 1000 per field.
"""

import os
import subprocess

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from grpo_ui.render import render
from grpo_ui.spec import JobSpec, with_changes
from grpo_ui.swift_cli import train_command

NASTY = st.sampled_from(["'", '"', "$(touch /tmp/grpo-ui-pwned)", "`id`", "\n", "-x", "--model", "", " ", "\\", "${HOME}",
                         "é中文🙂", "a'b\"c", "$'\\n'", "!", "#", ";", "&&", "|", "*", "~", "\t"])
TEXT = st.lists(st.one_of(NASTY, st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=12)),
                max_size=4).map("".join)
NONBLANK = TEXT.filter(lambda s: s.strip())

RECORDER = """#!/bin/bash
printf '%s\\0' "$@" > "$REC_DIR/argv"
env -0 > "$REC_DIR/env"
"""


def record(tmp, script_text):
    (tmp / "script.sh").write_text(script_text)
    syntax = subprocess.run(["bash", "-n", str(tmp / "script.sh")], capture_output=True, text=True)
    assert syntax.returncode == 0, syntax.stderr
    env = {"PATH": f"{tmp / 'bin'}:/usr/bin:/bin", "HOME": str(tmp), "REC_DIR": str(tmp), "LC_ALL": "C.UTF-8"}
    proc = subprocess.run(["bash", str(tmp / "script.sh")], capture_output=True, env=env, timeout=30)
    assert proc.returncode == 0, proc.stderr
    argv = (tmp / "argv").read_bytes().split(b"\0")[:-1]
    pairs = [e.split(b"=", 1) for e in (tmp / "env").read_bytes().split(b"\0")[:-1]]
    return [a.decode("utf-8", "surrogateescape") for a in argv], {
        k.decode(): v.decode("utf-8", "surrogateescape") for k, v in pairs}


@settings(max_examples=1000, deadline=None, suppress_health_check=list(HealthCheck))
@given(model=TEXT, dataset=NONBLANK, system=TEXT, output_dir=TEXT, extra=TEXT, env_value=TEXT, master=TEXT,
       python_env=TEXT)
def test_any_string_reaches_swift_exactly(tmp_path_factory, model, dataset, system, output_dir, extra, env_value,
                                          master, python_env):
    tmp = tmp_path_factory.mktemp("rec")
    (tmp / "bin").mkdir()
    (tmp / "bin" / "swift").write_text(RECORDER)
    (tmp / "bin" / "swift").chmod(0o755)
    spec = with_changes(JobSpec(), {
        "train.model": model, "train.dataset": [dataset, "second"], "train.system": system,
        "train.output_dir": output_dir, "extra_args": ["--extra", extra], "env": {"USER_VALUE": env_value},
        "cluster.master_addr": master, "cluster.run_root": str(tmp / "runs"), "train.reward_funcs": ["format"],
        "cluster.nodes": [{"host": "localhost", "gpus": [0], "python_env": python_env}]})
    argv, env = record(tmp, render(spec, "job-1").files["node_0.sh"])
    assert argv == train_command(spec).argv
    assert env["USER_VALUE"] == env_value
    assert env["MASTER_ADDR"] == spec.master_addr() and env["NODE_RANK"] == "0"
    assert not os.path.exists("/tmp/grpo-ui-pwned")
