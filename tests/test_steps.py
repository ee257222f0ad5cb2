"""The step indicator's states (grpo_ui.checks.steps) against every state the Configure page can show, and each
host's status (grpo_ui.backends.preflight.status): the page only draws these, so they must tell one story with it
(issue 26: "4. Checks done" while the checks were hidden, a sidebar field charged to the training settings,
"5. Scripts ready" beside "No GPU model chosen", "2. Cluster done" for an untested host, "✓ reached" for a host
whose preflight failed, an old preflight kept unmarked)."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grpo_ui.backends.preflight import HostFacts
from grpo_ui.backends.preflight.status import ConnectionTest, PreflightRun, cluster_checks, connection_of, host_status
from grpo_ui.checks.assess import assess
from grpo_ui.checks.steps import job_steps, step_of, steps
from grpo_ui.core.findings import finding
from grpo_ui.importer import import_scripts
from grpo_ui.spec.paths import with_changes
from grpo_ui.spec.presets import presets
from tests.pages import open_app
from tests.test_example_findings import EXAMPLES

FIRST = next(iter(presets().values()))
NO_GPU = with_changes(FIRST, {"cluster.nodes[0].gpu_model": None})
NO_MODEL = with_changes(FIRST, {"train.model": None})
BATCH = finding("GRPO-BATCH-DIV", "error", "train.num_generations", "m", "f", {"train.num_generations": 4})
NODES = finding("TRAINER-GPU-COUNT", "error", "cluster.nodes", "m", "f")
OOM = finding("MEMORY-OOM", "error", ("train.per_device_train_batch_size",), "m", "f")
OWN = finding("VERSION-FLAG-UNSUPPORTED", "error", "swift_version", "m", "f")  # a sidebar field: shown in the checks
UNKNOWN = finding("MEMORY-UNKNOWN-MODEL", "info", "train.model", "m", "f")
PASSED = {"localhost": "passed"}


def show(spec=FIRST, findings=(), parse=None, verdict="fits", held=False, overridden=False, hosts=None):
    return {s.number: (s.state, s.why) for s in steps(spec, list(findings), parse or {}, verdict, held, overridden,
                                                      PASSED if hosts is None else hosts)}


# (what the page shows, the step, its state, words its text must have)
STATES = [
    ("all done", {}, 6, "done", "ready"),
    ("no model", {"spec": NO_MODEL, "verdict": None}, 1, "todo", "No model chosen"),
    ("unknown model", {"findings": [UNKNOWN], "verdict": None}, 1, "todo", "config.json"),
    ("no GPU model", {"spec": NO_GPU, "verdict": None}, 1, "todo", "No GPU model chosen"),
    ("node cell unparsed", {"parse": {"cluster.nodes[0].gpus": "x"}, "held": True}, 2, "todo", "do not parse"),
    ("cluster error", {"findings": [NODES], "held": True}, 2, "todo", "1 error(s)"),
    ("host failed", {"hosts": {"gpu-a": "failed"}}, 2, "todo", "gpu-a failed"),
    ("host stale", {"hosts": {"gpu-a": "stale"}}, 2, "todo", "run preflight again"),
    ("host untested", {"hosts": {"localhost": "untested"}}, 2, "todo", "not checked"),
    ("training unparsed", {"parse": {"train.num_generations": "x"}, "held": True}, 3, "todo", "do not parse"),
    ("training error", {"findings": [BATCH], "held": True}, 3, "todo", "1 error(s)"),
    ("training error overridden", {"findings": [BATCH], "overridden": True}, 3, "done", "overridden"),
    ("checks hidden by a sidebar field", {"parse": {"env": "x"}, "held": True}, 4, "todo", "env (sidebar)"),
    ("checks hidden by a training field", {"parse": {"train.beta": "x"}, "held": True}, 4, "todo", "hidden"),
    ("OOM", {"findings": [OOM], "verdict": "oom", "held": True}, 4, "todo", "OOM"),
    ("errors", {"findings": [BATCH, NODES], "held": True}, 4, "todo", "after the error(s) in step 2 and 3"),
    ("an error of the checks' own", {"findings": [OWN], "held": True}, 4, "todo", "1 error(s)"),
    ("no verdict", {"spec": NO_GPU, "verdict": None}, 4, "todo", "no memory verdict yet: no GPU model chosen"),
    ("verdict unknown", {"spec": NO_GPU, "verdict": "unknown"}, 4, "todo", "no memory verdict yet"),
    ("overridden", {"findings": [BATCH], "overridden": True}, 4, "done", "1 error(s) overridden"),
    ("scripts blocked by errors", {"findings": [BATCH], "held": True}, 5, "blocked", "override"),
    ("scripts blocked by parsing", {"parse": {"train.beta": "x"}, "held": True}, 5, "blocked", "do not parse"),
    ("scripts wait for the GPU model", {"spec": NO_GPU, "verdict": None}, 5, "todo", "after steps 1, 4"),
    ("scripts ready", {"hosts": {"localhost": "untested"}}, 5, "done", "ready"),
    ("launch blocked", {"findings": [BATCH], "held": True}, 6, "blocked", "blocked"),
    ("launch waits for the hosts", {"hosts": {"localhost": "untested"}}, 6, "todo", "after step 2"),
]


@pytest.mark.parametrize("name,kwargs,number,state,words", STATES, ids=[s[0] for s in STATES])
def test_every_state_the_page_can_show(name, kwargs, number, state, words):
    got = show(**kwargs)[number]
    assert got[0] == state and words in got[1], got


def test_a_sidebar_field_that_does_not_parse_is_charged_to_no_settings_step():
    shown = show(parse={"env": "write NAME=value"}, held=True)
    assert shown[2][0] == shown[3][0] == "done" and "env (sidebar)" in shown[4][1]
    assert step_of("env") is None and step_of("cluster.nodes[1].gpus") == 2 and step_of("train.beta") == 3
    assert step_of("rollout.vllm_mode") == step_of("server.port") == 3 and step_of("slurm.partition") == 2


@settings(max_examples=300, deadline=None)
@given(spec=st.sampled_from([FIRST, NO_GPU, NO_MODEL]),
       findings=st.lists(st.sampled_from([BATCH, NODES, OOM, UNKNOWN]), unique=True),
       parse=st.dictionaries(st.sampled_from(["env", "name", "train.beta", "cluster.nodes[0].gpus", "slurm.qos"]),
                             st.just("bad"), max_size=2),
       verdict=st.sampled_from([None, "unknown", "fits", "tight", "oom"]), overridden=st.booleans(),
       hosts=st.dictionaries(st.sampled_from(["a", "b"]), st.sampled_from(
           ["passed", "warning", "failed", "stale", "untested"]), max_size=2))
def test_no_step_tells_another_story_than_the_page(spec, findings, parse, verdict, overridden, hosts):
    """For any state: steps are held exactly when the downloads are; a done step has nothing open before it that it
    waits for; checks are never done while hidden, without a verdict, or with an error neither fixed nor
    overridden; every open step says why."""
    findings = [] if parse else findings  # the page shows no findings while a field does not parse
    errors = [f for f in findings if f.severity == "error"]
    held = bool(parse) or bool(errors and not overridden)
    shown = show(spec, findings, parse, verdict, held, overridden and not parse, hosts)
    assert all(why for _, why in shown.values())
    assert (shown[5][0] == "blocked") == held == (shown[6][0] == "blocked")
    if shown[4][0] == "done":
        assert not parse and verdict not in (None, "unknown") and (not errors or overridden)
    if shown[5][0] == "done":
        assert all(shown[k][0] == "done" for k in (1, 3, 4))
    if shown[6][0] == "done":
        assert all(shown[k][0] == "done" for k in range(1, 6))
    if shown[2][0] == "done":
        assert all(c in ("passed", "warning") for c in hosts.values())


def test_the_steps_of_an_assessed_job_follow_its_findings_and_verdict():
    oom = with_changes(FIRST, {"train.lora_rank": 256, "rollout.vllm_gpu_memory_utilization": 0.9})
    shown = {s.number: (s.state, s.why) for s in job_steps(oom, assess(oom), {}, True, False, PASSED)}
    assert shown[4] == ("todo", "the estimate says OOM") and shown[5][0] == shown[6][0] == "blocked"
    no_gpu = {s.number: s.state for s in job_steps(NO_GPU, assess(NO_GPU), {}, False, False, PASSED)}
    assert assess(NO_GPU).verdict == "unknown" and no_gpu[4] == no_gpu[5] == "todo"  # never "ready" beside it


def test_one_error_is_counted_under_one_step():
    """ms-swift's grpo_7b.sh imported as shipped: its one error (ROLLOUT-SERVER-OUTSIDE, on rollout.vllm_server_host
    and cluster.external_rollout) was "1 error(s)" under Cluster, Training settings and Checks (issue 32, first-hour
    defect 6). It counts under Cluster, where the form shows it in full; the checks wait for that step; an OOM counts
    under the checks, where the estimate is drawn."""
    spec = import_scripts([("grpo_7b.sh", (EXAMPLES / "external_server_7b.sh").read_bytes())])[0]
    a = assess(spec)
    assert [f.id for f in a.errors] == ["ROLLOUT-SERVER-OUTSIDE"]
    shown = {s.number: s.why for s in job_steps(spec, a, {}, True, False, PASSED)}
    assert [k for k, why in shown.items() if "error(s)" in why and "after" not in why] == [2]
    assert shown[2] == "1 error(s)" and shown[4] == "after the error(s) in step 2"
    oom = with_changes(FIRST, {"train.lora_rank": 256, "rollout.vllm_gpu_memory_utilization": 0.9})
    shown = {s.number: s.why for s in job_steps(oom, assess(oom), {}, True, False, PASSED)}
    assert shown[3] == "done" and shown[4] == "the estimate says OOM"


def test_the_page_draws_exactly_the_states_the_library_returns(tmp_path, monkeypatch):
    monkeypatch.setenv("GRPO_UI_HOME", str(tmp_path))
    at = open_app()
    drawn = [m.value for m in at.markdown if "](#" in m.value and m.value.startswith(":material/")]
    expected = job_steps(FIRST, assess(FIRST), {}, False, False, {"localhost": "untested"})
    assert len(drawn) == 6
    for text, step in zip(drawn, expected, strict=True):
        assert f"**[{step.label}](#{step.anchor})**" in text and step.why in text


# --- each host's status: the worst of its last test and preflight, stale results marked ---------------------------

TWO = with_changes(FIRST, {"cluster.nodes": [{"host": "gpu-a", "gpus": [0]}, {"host": "gpu-b", "gpus": [0]}]})


def run_on(spec, *, errors=(), warnings=(), error_fact=None):
    facts = [HostFacts(n.host, reachable=True, python="3.11") for n in spec.cluster.nodes]
    if error_fact:
        facts[0].error = error_fact
    facts[0].findings = [finding(i, "error", "train.system", f"{spec.cluster.nodes[0].host}: {i}", "f") for i in errors]
    facts[0].findings += [finding(i, "warning", "cluster.run_root", "w", "f") for i in warnings]
    return PreflightRun.of(spec, facts, [f for fact in facts for f in fact.findings])


def test_a_reached_host_whose_preflight_failed_shows_the_failure():
    test = ConnectionTest(True, "gpu-a up 3 days", connection_of(TWO.cluster.nodes[0]))
    assert host_status(TWO, 0, test, None).text == "✓ reached"
    failed = host_status(TWO, 0, test, run_on(TWO, errors=["PREFLIGHT-PATH-MISSING"]))
    assert failed.check == "failed" and failed.text.startswith("✗ preflight: PREFLIGHT-PATH-MISSING")
    assert host_status(TWO, 1, None, run_on(TWO, errors=["PREFLIGHT-PATH-MISSING"])).text == "✓ preflight passed"
    assert host_status(TWO, 0, test, run_on(TWO, warnings=["PREFLIGHT-DISK"])).check == "warning"
    refused = ConnectionTest(False, "cannot connect to gpu-a:22", connection_of(TWO.cluster.nodes[0]))
    assert host_status(TWO, 0, refused, run_on(TWO)).text == "✗ cannot connect to gpu-a:22"  # the worst wins


def test_results_from_before_the_hosts_changed_are_marked_stale_not_shown_as_current():
    run = run_on(TWO, errors=["PREFLIGHT-NO-SWIFT"])
    moved = with_changes(TWO, {"cluster.nodes[1].host": "gpu-c"})
    assert run.stale(moved) == "the hosts changed since this preflight"
    assert run.stale(with_changes(TWO, {"train.beta": 0.0})) == "the draft changed since this preflight"
    stale = host_status(moved, 1, None, run)
    assert stale.check == "stale" and stale.text.startswith("? the hosts changed")
    assert cluster_checks(moved, {}, run) == {"gpu-a": "stale", "gpu-c": "stale"}
    old_test = ConnectionTest(True, "up", connection_of(TWO.cluster.nodes[1]) | {"user": "bob"})
    assert host_status(TWO, 1, old_test, None).check == "untested"  # tested as another user: says nothing now


def test_an_untested_local_node_is_not_a_done_cluster():
    assert cluster_checks(FIRST, {}, None) == {"localhost": "untested"}
    assert show(hosts=cluster_checks(FIRST, {}, None))[2][0] == "todo"
    assert cluster_checks(FIRST, {}, run_on(FIRST)) == {"localhost": "passed"}
