"""Hostile input: host-like fields refused by type with the field named, YAML refused before parsing when it is too
big, too deep or full of aliases (the parsers' own failure reproduced in a subprocess first), secrets kept out of
env, and a property test that runs the real remote commands (launch, status, watcher, preflight, stop) with hostile
strings in every field that reaches them and proves nothing in them is executed.

The remote commands run on the dashboard's own machine ('localhost', LocalRunner: bash with the same command text
SSH would carry); the sshd test hosts run them in test_launcher and test_faults."""

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from grpo_ui.backends.preflight import preflight
from grpo_ui.checks.rules import validate
from grpo_ui.jobs.follow import Watcher
from grpo_ui.jobs.service import Jobs
from grpo_ui.jobs.store import Store
from grpo_ui.spec.errors import SpecError
from grpo_ui.spec.swift_cli import train_command
from grpo_ui.spec.yaml_io import spec_from_yaml, spec_to_yaml, validate_spec
from tests.wait import wait_for

ROOT = Path(__file__).parent.parent


# host-like fields ----------------------------------------------------------------------------------------------

GOOD_HOSTS = ["gpu-a", "node07.cluster.example.com", "10.0.0.1", "fe80::1", "2001:db8::5", "::1", "localhost"]
BAD_HOSTS = ["10.0.0.1;touch /tmp/x", "$(id)", "`id`", "a b", "-oProxyCommand=sh", "host|x", "[::1]", "10.0.0.256",
             "1.2.3", "", "é.example", "a_b.example.com/x", "x" * 300]


def problems(data) -> list[tuple[str, str]]:
    try:
        validate_spec(data)
    except SpecError as e:
        return e.problems
    return []


@pytest.mark.parametrize("field", ["cluster.nodes[0].host", "cluster.nodes[0].address", "cluster.master_addr",
                                   "rollout.vllm_server_host"])
def test_host_like_fields_take_addresses_and_names_only_and_name_the_field(field):
    def data(value):
        node = {"host": value} if field.endswith(".host") else {"host": "gpu-a"}
        if field.endswith(".address"):
            node["address"] = value
        out = {"cluster": {"nodes": [node]}}
        if field == "cluster.master_addr":
            out["cluster"]["master_addr"] = value
        if field == "rollout.vllm_server_host":
            out["rollout"] = {"vllm_server_host": ["ok-host", value]}
        return out
    for good in GOOD_HOSTS + (["gpu_a.alias"] if field.endswith(".host") else []):  # aliases: the ssh host only
        assert problems(data(good)) == [], good
    for bad in BAD_HOSTS + (["gpu_a.alias"] if not field.endswith(".host") else []):
        (path, message), = problems(data(bad))
        assert path == field and ("item 1: " in message) == (field == "rollout.vllm_server_host"), (bad, message)
        assert "is not an IPv4/IPv6 address" in message or "without brackets" in message, message


def test_reserved_env_names_are_refused_where_they_are_set():
    for name in ("NODE_RANK", "MASTER_ADDR", "MASTER_PORT", "NNODES", "NPROC_PER_NODE", "GRPO_UI_RUN"):
        for where, data in (("env", {"env": {name: "1"}}),
                            ("cluster.nodes[0].env", {"cluster": {"nodes": [{"host": "a", "env": {name: "1"}}]}})):
            (path, message), = problems(data)
            assert path == where and f"{name} cannot be set in env" in message
    (path, message), = problems({"env": {"CUDA_VISIBLE_DEVICES": "0"}})
    assert path == "env" and "from each node's gpus" in message
    assert problems({"cluster": {"nodes": [{"host": "a", "env": {"CUDA_VISIBLE_DEVICES": "1"}}]}}) == []  # per node


def test_token_like_env_names_move_to_secret_env_and_their_values_go_nowhere():
    spec = validate_spec({"env": {"HF_TOKEN": "hf_s3cret", "WANDB_API_KEY": "k3y", "HF_HOME": "/cache"},
                          "cluster": {"nodes": [{"host": "a", "env": {"DB_PASSWORD": "pw", "MY_SECRET_X": "sx"}}]}})
    assert spec.env == {"HF_HOME": "/cache"} and spec.cluster.nodes[0].env == {}
    assert spec.secret_env == ["HF_TOKEN", "WANDB_API_KEY", "DB_PASSWORD", "MY_SECRET_X"]
    text = spec_to_yaml(spec)
    assert not any(v in text for v in ("hf_s3cret", "k3y", "pw\n", "sx"))
    moved = [f for f in validate(spec) if f.id == "ENV-SECRET-MOVED"]
    assert len(moved) == 1 and "HF_TOKEN" in moved[0].message and "Launch page" in moved[0].fix
    with pytest.raises(ValueError, match="HF_TOKEN look"):  # changed field by field: refused, not moved
        spec.env = {"HF_TOKEN": "x"}


# YAML limits ---------------------------------------------------------------------------------------------------

DEEP_FLOW = "train: " + "[" * 100_000 + "]" * 100_000 + "\n"
DEEP_BLOCK = "".join(" " * k + "a:\n" for k in range(1000))
ALIAS_BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{c}: &{c} [{', '.join([f'*{p}'] * 9)}]\n" for p, c in zip("abcdefgh", "bcdefghi", strict=True)) + "extra_args: *i\n"

PARSE_DIRECTLY = """
import sys, yaml
loader = getattr(yaml, sys.argv[1])
try:
    yaml.load(sys.stdin.read(), Loader=loader)
    print("parsed")
except BaseException as e:
    print("raised", type(e).__name__)
"""


@pytest.mark.parametrize("loader", ["CSafeLoader", "SafeLoader"])
def test_deep_yaml_breaks_the_parsers_themselves(loader):
    """The hazard, reproduced in a subprocess: PyYAML's own loaders on 100k nested brackets. The pure-Python loader
    recurses until RecursionError; libyaml's recursion ends in a segfault in builds without a nesting limit (the
    issue's report); the libyaml 0.2.6 bundled here stops at 1000 levels with a ScannerError. Either way the text
    never reaches the spec, and the app must not depend on which build it runs on."""
    out = subprocess.run([sys.executable, "-c", PARSE_DIRECTLY, loader], input=DEEP_FLOW, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode < 0 or out.stdout.startswith("raised"), (out.returncode, out.stdout, out.stderr[-500:])


CHECK_IN_SUBPROCESS = """
import sys
from grpo_ui.spec.errors import SpecError
from grpo_ui.spec.yaml_io import spec_from_yaml
try:
    spec_from_yaml(sys.stdin.read(), "upload.yaml")
    print("loaded")
except SpecError as e:
    print(e)
"""


@pytest.mark.parametrize("text, problem", [(DEEP_FLOW, "nested more than 32 levels deep (line 1)"),
                                           (DEEP_BLOCK, "nested more than 32 levels deep (line 33)"),
                                           (ALIAS_BOMB, "anchors and aliases"),
                                           ("x: " + "a" * (1 << 20) + "\n", "more than a job spec needs")])
def test_yaml_is_refused_before_parsing_when_too_deep_aliased_or_big(text, problem):
    out = subprocess.run([sys.executable, "-c", CHECK_IN_SUBPROCESS], input=text, capture_output=True, text=True,
                         timeout=60, cwd=ROOT)
    assert out.returncode == 0 and out.stdout.startswith("upload.yaml: 1 problem(s)") and problem in out.stdout, (
        out.stdout[-300:], out.stderr[-1000:])


def test_the_cli_and_the_draft_refuse_deep_yaml_with_a_clear_message(tmp_path, monkeypatch):
    (tmp_path / "job.yaml").write_text(DEEP_FLOW)
    out = subprocess.run([sys.executable, "-m", "grpo_ui", "validate", str(tmp_path / "job.yaml")],
                         capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert out.returncode == 2 and "nested more than 32 levels deep" in out.stderr and "Traceback" not in out.stderr
    monkeypatch.setenv("GRPO_UI_HOME", str(tmp_path))
    (tmp_path / "draft.yaml").write_text(DEEP_FLOW)
    from grpo_ui.jobs.drafts import open_draft
    from grpo_ui.jobs.store import Store
    draft, notice = open_draft(Store())
    spec = draft.spec
    assert "nested more than 32 levels deep" in notice and list(tmp_path.glob("draft-unreadable-*"))
    assert spec_from_yaml(spec_to_yaml(spec)) == spec


def test_uploads_are_size_checked_before_parsing():
    """What the Import button gets (grpo_ui.importer reads only these bytes): too big or too deep is refused before
    anything parses it; a token in an uploaded YAML's env leaves only its name behind."""
    from grpo_ui.importer import import_uploads
    with pytest.raises(SpecError, match="too large for a launch script"):
        import_uploads({"big.sh": b"#" * (1 << 20) + b"\n"}, "4.6")
    with pytest.raises(SpecError, match="nested more than 32 levels deep"):
        import_uploads({"deep.yaml": DEEP_FLOW.encode()}, "4.6")
    spec, _ = import_uploads({"job.yaml": b"env: {HF_TOKEN: hf_x}\n"}, "4.6")
    assert spec.secret_env == ["HF_TOKEN"] and "hf_x" not in spec_to_yaml(spec)
    assert [f.id for f in validate(spec) if f.id == "ENV-SECRET-MOVED"] == ["ENV-SECRET-MOVED"]


# every field that reaches a remote command: the real commands, hostile values ----------------------------------

NASTY = ["'", '"', "$(touch pwned)", "`touch pwned`", ";touch pwned;", "|touch pwned", "&&touch pwned",
         "\ntouch pwned\n", "$HOME", "${IFS}", "*", "?", "~", " -rf ", "\t", "\\", "!", "#", "{a,b}", "$'\\x41'",
         "%s", "{{ x }}", "{% raw %}", "é中🙂", "-", "--model", "> pwned", "< .profile"]  # no '/': values are also directory names
HOSTILE = st.lists(st.sampled_from(NASTY), min_size=1, max_size=4).map(lambda parts: "d" + "".join(parts))

RECORDER = """#!/bin/bash
printf '%s\\0' "$@" > "$REC/argv"
env -0 > "$REC/env"
sleep 1
"""


@settings(max_examples=3, deadline=None, suppress_health_check=list(HealthCheck))
@example(value="d$(touch pwned)`touch pwned`;touch pwned;'\"\ntouch pwned\n")
@example(value="d#")  # ms-swift's dataset syntax: a file named d# is read as d#, not as d with an empty sample
@given(value=HOSTILE)
def test_hostile_values_reach_every_remote_command_as_data(tmp_path_factory, value):
    """One hostile string (it is also a directory name) in the python env, run root, workdir, output dir, model,
    dataset path, env values and the secret: launch, status, the GPU sampler, the watcher's pass, preflight and stop
    all run, swift gets exactly the values, and no `touch pwned` anywhere ran."""
    tmp = tmp_path_factory.mktemp("hostile")
    env_dir, run_root, workdir = tmp / f"env{value}", tmp / f"runs{value}", tmp / f"work{value}"
    (env_dir / "bin").mkdir(parents=True)
    (env_dir / "bin" / "swift").write_text(RECORDER)
    (env_dir / "bin" / "swift").chmod(0o755)
    workdir.mkdir()
    (workdir / value).write_text("{}\n")  # the dataset, where preflight must look for it
    (tmp / "rec").mkdir()
    spec = validate_spec({
        "name": "hostile", "secret_env": ["API_TOKEN"],
        "train": {"model": "m" + value, "dataset": ["./" + value], "reward_funcs": ["format"], "num_generations": 2,
                  "per_device_train_batch_size": 2, "output_dir": value, "system": value},
        "rollout": {"use_vllm": False, "vllm_mode": None}, "env": {"USER_VALUE": value, "REC": str(tmp / "rec")},
        "cluster": {"run_root": str(run_root), "workdir": str(workdir), "master_port": 20000 + os.getpid() % 9000,
                    "nodes": [{"host": "localhost", "python_env": str(env_dir), "env": {"NODE_VALUE": value}}]}})
    jobs = Jobs(Store(tmp / "db.sqlite"), telemetry=True)  # its sampler runs in the node's python env
    job = jobs.launch(jobs.plan(spec, f"h-{uuid.uuid4().hex[:8]}"), secrets={"API_TOKEN": value})
    try:
        assert wait_for(lambda: jobs.refresh(job) == "succeeded")
        argv = (tmp / "rec" / "argv").read_bytes().split(b"\0")[:-1]
        env = dict(e.split(b"=", 1) for e in (tmp / "rec" / "env").read_bytes().split(b"\0")[:-1])
        assert [a.decode() for a in argv] == train_command(spec).argv
        assert {k: env[k.encode()].decode() for k in ("USER_VALUE", "NODE_VALUE", "API_TOKEN")} == dict.fromkeys(
            ("USER_VALUE", "NODE_VALUE", "API_TOKEN"), value)
        assert (run_root / job / "exit_code.0").read_text().strip() == "0"
        assert not list((run_root / job).glob("*secrets*"))
        assert Watcher(jobs).poll(job).errors == []
        facts, _ = preflight(spec, jobs.pool)
        assert facts[0].error is None and {k: facts[0].paths.get(k) for k in ("./" + value, "workdir")} == {
            "./" + value: True, "workdir": True}
        assert jobs.stop(job, grace=2) == {"localhost": "gone"}
    finally:
        jobs.stop(job, grace=2)
    assert not [*tmp.rglob("pwned"), *Path.home().glob("pwned"), *Path.cwd().glob("pwned")]
