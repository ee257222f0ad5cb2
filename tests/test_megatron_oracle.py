"""megatron rlhf's own argument classes as the oracle (tests/megatron_oracle.py says what is real and what is stood in
for): every declared Megatron default is ms-swift's, every flag and value grpo-ui emits for megatron rlhf is one its
parser accepts, an imported script and its rendering parse to the same namespace, and grpo-ui's parse-time rules
refuse exactly what ms-swift's __post_init__ refuses (distributed initialisation stubbed: the world is the job's).
"""

from pathlib import Path

import pytest

from grpo_ui.checks.assess import assess
from grpo_ui.importer import import_uploads
from grpo_ui.launch.render import render, write_bundle
from grpo_ui.spec.model import ARGS, JobSpec
from grpo_ui.spec.paths import with_changes
from grpo_ui.spec.resolve import resolve
from grpo_ui.spec.swift_cli import format_value, stands_alone, train_command
from tests import megatron_oracle, swift_oracle
from tests.test_megatron_import import DATA, SCRIPT_CASES
from tests.test_megatron_rules import BASE, MEGATRON_CASES
from tests.test_swift_acceptance import sample_values
from tests.tiny_job import ASSETS

MEGATRON_ARGS = [d for d in ARGS if "megatron" in d.engines and d.section != "server"]  # server: swift rollout's
# The rules whose check runs when ms-swift builds its arguments (megatron_args.py __post_init__ and the parser);
# the others run in Megatron-Core's model-parallel setup or at trainer init, which the stub does not reach.
AT_PARSE = ("ENGINE-FLAG", "ENGINE-VALUE", "MEGATRON-GLOBAL-BATCH", "MEGATRON-GEN-BATCH", "MEGATRON-DP-ALIGN", "MEGATRON-UNSUPPORTED",
            "MEGATRON-RECOMPUTE", "MEGATRON-USE-VLLM")


@pytest.fixture(scope="module")
def report(megatron_python, tmp_path_factory):
    return megatron_oracle.probe([], defaults=True, standalone=True, cwd=tmp_path_factory.mktemp("defaults"))


@pytest.mark.slow
def test_declared_megatron_defaults_are_ms_swifts(report):
    version = report["version"]
    wrong = [(d.path, d.on("megatron").swift_default(version), report["defaults"].get(d.on("megatron").flag_for(
        version), "<missing>")) for d in MEGATRON_ARGS if d.on("megatron").accepted_in(version)]
    assert version.startswith("4.") and not [w for w in wrong if w[1] != w[2]], [w for w in wrong if w[1] != w[2]]


@pytest.mark.slow
def test_the_flags_that_stand_without_a_value_are_megatron_rlhfs(report):
    theirs = set(report["standalone"])
    wrong = [(d.path, stands_alone(d.on("megatron"))) for d in MEGATRON_ARGS
             if stands_alone(d.on("megatron")) != (d.flag in theirs)]
    assert len(theirs) > 50 and not wrong, wrong


def megatron_spec(changes: dict) -> JobSpec:
    return with_changes(JobSpec(), {**BASE, **changes})


def asked(spec: JobSpec, changes: dict) -> list[str]:
    """The command line the user asked for: grpo-ui's, plus the flags of ``changes`` grpo-ui left out because
    megatron rlhf does not take them (ENGINE-FLAG, ENGINE-VALUE: a finding, never a silently dropped flag)."""
    argv = train_command(spec).argv[1:]  # what follows `megatron rlhf`
    for path, value in changes.items():
        flag = "--" + path.split(".")[-1]
        if path.startswith(("train.", "rollout.")) and flag not in argv and value not in (None, []):
            argv += [flag, *format_value(value)]
    return argv


@pytest.mark.slow
def test_every_megatron_flag_and_value_parses_unless_a_rule_refuses_it(megatron_python, tmp_path):
    """Each Megatron argument at each non-default value: ms-swift's parser takes the command line, or grpo-ui
    refuses that value with an error on that field (megatron rlhf's fewer tuner types, whole epochs)."""
    cases = []
    for d in MEGATRON_ARGS:
        for value in sample_values(d):
            changes = {d.path: [1.0] if d.path == "train.reward_weights" else value}
            spec = megatron_spec(changes)
            refused = any(f.severity == "error" and d.path in f.fields for f in assess(spec).findings)
            cases.append((d.path, value, refused, asked(spec, changes)))
    report = megatron_oracle.probe([{"argv": argv} for *_, argv in cases], cwd=tmp_path)
    wrong = [(path, value, r.get("error") or r["unknown"]) for (path, value, refused, _), r in
             zip(cases, report["results"], strict=True) if bool(r.get("error") or r["unknown"]) and not refused]
    assert len(cases) > 60 and not wrong, wrong


def tiny(argv: list[str]) -> list[str]:
    """A command line (after `megatron rlhf`) on the tiny local model (what mcore-bridge reads when ms-swift builds
    its arguments), with the model type and template that model needs."""
    out = list(argv)
    out[out.index("--model") + 1] = str(ASSETS / "model")
    return out + ["--model_type", "qwen2", "--template", "qwen"]


@pytest.mark.slow
def test_rejections_match_ms_swifts_own_checks(megatron_python, tmp_path):
    """For every rule that mirrors a check ms-swift makes while building its arguments: the spec that triggers it is
    refused by ms-swift's MegatronRLHFArguments, the near-identical quiet one is built without error; the clean base
    spec too."""
    jobs, expect = [], []
    for rule_id in AT_PARSE:
        for changes, refused in zip(MEGATRON_CASES[rule_id], (True, False), strict=True):
            spec = megatron_spec(changes)
            if not refused and any(f.severity == "error" for f in assess(spec).findings):
                continue  # the quiet case of a rule may trip another (then ms-swift refuses it for that one)
            jobs.append({"argv": tiny(asked(spec, changes)), "post_init": True,
                         "world": resolve(spec).world_size})
            expect.append((rule_id, refused))
    jobs.append({"argv": tiny(asked(megatron_spec({}), {})), "post_init": True, "world": 8})
    expect.append(("base", False))
    results = megatron_oracle.probe(jobs, cwd=tmp_path)["results"]
    wrong = [(rule_id, refused, r.get("post_init")) for (rule_id, refused), r in zip(expect, results, strict=True)
             if (r.get("post_init") != "ok") != refused]
    assert len(expect) >= 2 * len(AT_PARSE) - 2 and not wrong, wrong


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(SCRIPT_CASES))
def test_an_imported_script_and_its_rendering_parse_the_same(case, megatron_python, tmp_path):
    names = SCRIPT_CASES[case]
    spec, _ = import_uploads({Path(n).name: (DATA / n).read_bytes() for n in names})
    stubs = swift_oracle.make_stubs(tmp_path / "stubs")
    for n in names:
        (tmp_path / Path(n).name).write_bytes((DATA / n).read_bytes())
    recorded = [r for n in names for r in swift_oracle.run_script(tmp_path / Path(n).name, tmp_path, stubs)
                if r.program == "megatron"]
    spec = with_changes(spec, {"cluster.run_root": str(tmp_path / "runs")})
    out = tmp_path / "rendered"
    write_bundle(render(spec, "job"), out)
    rendered = [r for script in sorted(out.glob("node_*.sh")) for r in swift_oracle.run_rendered(script, tmp_path, stubs)]
    parsed = megatron_oracle.probe([{"argv": r.argv} for r in recorded + rendered], cwd=tmp_path)["results"]
    mine, theirs = parsed[:len(recorded)], parsed[len(recorded):]
    assert len(mine) == len(theirs) >= 1
    for a, b in zip(mine, theirs, strict=True):
        assert not a.get("error") and not b.get("error") and a["unknown"] == b["unknown"]
        assert a["ns"] == b["ns"], {k: (a["ns"][k], b["ns"].get(k)) for k in a["ns"] if a["ns"][k] != b["ns"].get(k)}
