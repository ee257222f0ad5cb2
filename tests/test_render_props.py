"""Shell safety, property-based: any string in any field reaches swift exactly as typed, or is refused by name.

Each example puts hostile strings (quotes, $(), backticks, newlines, unicode, leading dashes, empty strings) in every
string field at once, renders the node script, checks `bash -n`, runs it with `swift` replaced by a recorder on PATH,
and compares the argv and environment it received with the intended ones. 1000 examples = 1000 per field. Host-like
fields take only host names and addresses: a string that is neither is refused with the field named.
"""

import os
import subprocess

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from grpo_ui.launch.render import render
from grpo_ui.spec.errors import SpecError
from grpo_ui.spec.model import ARGS, JobSpec
from grpo_ui.spec.names import check_host
from grpo_ui.spec.paths import with_changes
from grpo_ui.spec.resolve import resolve
from grpo_ui.spec.swift_cli import train_command

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
       python_env=TEXT, run_root=NONBLANK, workdir=NONBLANK)
def test_any_string_reaches_swift_exactly(tmp_path_factory, model, dataset, system, output_dir, extra, env_value,
                                          master, python_env, run_root, workdir):
    tmp = tmp_path_factory.mktemp("rec")
    (tmp / "bin").mkdir()
    (tmp / "bin" / "swift").write_text(RECORDER)
    (tmp / "bin" / "swift").chmod(0o755)
    try:
        check_host(master.strip())
    except ValueError:
        with pytest.raises(SpecError, match=r"cluster\.master_addr: .* is not an IPv4/IPv6 address"):
            with_changes(JobSpec(), {"cluster.master_addr": master})
        master = None
    workdir = tmp / "work" / workdir.replace("/", "_")  # the script cd's there: it must exist
    workdir.mkdir(parents=True, exist_ok=True)
    run_root = "runs/" + run_root.replace("/", "_")  # relative: under the login's home ($HOME is tmp here)
    every_text_field = {d.path: ("x" + extra if d.annotation in (str, str | None) else ["x" + extra, extra + "y"])
                        for d in ARGS if d.section == "train" and "swift" in d.engines
                        and d.annotation in (str, str | None, list[str])}
    spec = with_changes(JobSpec(), {
        **every_text_field,  # every free-text ms-swift argument (host-like ones are refused above, not quoted)
        "train.model": model, "train.dataset": [dataset, "second"], "train.system": system,
        "train.output_dir": output_dir, "extra_args": ["--extra", extra], "env": {"USER_VALUE": env_value},
        "cluster.master_addr": master, "cluster.run_root": run_root, "cluster.workdir": str(workdir), "cluster.nodes": [{"host": "localhost", "gpus": [0], "python_env": python_env,
                                                             "env": {"NODE_VALUE": env_value}}]})
    argv, env = record(tmp, render(spec, "job-1").files["node_0.sh"])
    assert argv == train_command(spec).argv
    assert env["USER_VALUE"] == env_value and env["NODE_VALUE"] == env_value
    assert env["MASTER_ADDR"] == resolve(spec).master_addr and env["NODE_RANK"] == "0"
    assert os.path.isfile(os.path.join(tmp, run_root, "job-1", "exit_code.0"))  # the run dir is where it says
    assert not os.path.exists("/tmp/grpo-ui-pwned")
