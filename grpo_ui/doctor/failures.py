"""The doctor's rules on log lines: each kind of failure the logs show (signatures.py, found anywhere by events.py),
the process that failed first across the logs (rootcause.py), rewards that are not there, and the GRPO stalls that
leave no error behind (weight sync to the rollout servers, a vLLM sleep/wake that never returns), and checkpoints
left incomplete."""

from __future__ import annotations

import re

from grpo_ui.doctor import vllm_profile
from grpo_ui.doctor.events import Event
from grpo_ui.doctor.lines import parse
from grpo_ui.doctor.signatures import CAUSE, CONSEQUENCE, NOISE, REPORT, SAVE_FAILED, TRACEBACK
from grpo_ui.doctor.snapshot import Alert, Snapshot, overdue, rule
from grpo_ui.doctor.stacks import classify

MAX_EVIDENCE_LINES = 60
REWARD_NONE = "All reward functions returned None"
LAUNCHER_FIRST = re.compile(r"^node (\d+) \(([^,]+), ([^)]+)\) failed first")  # the launcher's job error
SAVE_LINE = re.compile(r"Saving model checkpoint to (\S+)")
LAST_CHECKPOINT = re.compile(r"last_model_checkpoint: (/\S+)")
SLEEP_LINE = re.compile(r"It took [\d.]+ seconds to (fall asleep|wake up tags (.*))\.$")
ACCESS_LINE = re.compile(r'"(?:GET|POST) (/[\w/]+) HTTP/[\d.]+" (\d+)')
SYNC_ENDPOINTS = ("/init_communicator/", "/update_named_param/", "/update_flattened_params/",
                  "/update_adapter_flattened_param/", "/update_adapter_param/")
CONNECT_TIMEOUT = re.compile(r"timed out .*?connect to \(([^,]+), (\d+)\)|failed to connect/validate to host "
                             r"[^:]+:(\d+)|port: (\d+).*EADDRINUSE|remote=\S+:(\d+)\) timed out")
# c10d socket.cpp: SocketImpl::waitForInput's warning while it waits (the timeout above follows when nothing comes)
POLL_TIMEOUT = re.compile(r"remote=\S+:(\d+)\) returned 0, likely a timeout")
ZERO_SHARD = re.compile(r"zero_pp_rank_(\d+)_mp_rank_\d+_(?:optim|model)_states\.pt$")
WORK_NCCL = re.compile(r"WorkNCCL\(SeqNum=(\d+), OpType=([A-Z_]+)")
TIMEOUT_MS = re.compile(r"Timeout\(ms\)=(\d+)")
OWN_RULES = {"NAN-METRICS"}  # signatures whose alert another rule writes (with the metrics beside the crash)
# TRL's vLLM client polling a rollout server's /health/ (trl extras/vllm_client.py: check_server), and its success
SERVER_RETRY = re.compile(r"Server is not up yet\. Retrying in ([\d.]+) seconds")
SERVER_UP = re.compile(r"Server is up!")
RETRIES_SHOWN = 3       # retries an excerpt must end in (what a user pastes when the trainer just waits)
RETRY_PATIENCE_S = 120  # seconds of retries before a followed run's wait is a finding (TRL gives up at 240 by default)


def bounded(lines: list[str]) -> list[str]:
    """At most MAX_EVIDENCE_LINES: the head (the error line, where it started) and the tail."""
    if len(lines) <= MAX_EVIDENCE_LINES:
        return lines
    head, tail = MAX_EVIDENCE_LINES // 3, MAX_EVIDENCE_LINES - MAX_EVIDENCE_LINES // 3 - 1
    return lines[:head] + [f"… {len(lines) - head - tail} lines left out …"] + lines[-tail:]


def group_port_timeout(s: Snapshot, line: str, waiting: bool = False) -> int | None:
    """The weight-sync group port a line says a socket timed out on (connecting, or waiting for an answer), if
    any; ``waiting``: also c10d's warning that a poll on it came back empty. Only rollout servers have a group
    port, so a timeout on one is the weight sync's whatever else the logs say of the mode."""
    m = CONNECT_TIMEOUT.search(line) or (POLL_TIMEOUT.search(line) if waiting else None)
    port = next((int(g) for g in m.groups() if g and g.isdigit()), None) if m else None
    return port if port in s.sync_ports else None


def all_events(s: Snapshot) -> list[Event]:
    return [e for events in s.events.values() for e in events]


def _precedes(a: Event, b: Event) -> bool:
    """Whether ``a`` came before ``b``: earlier in the same log, earlier by the clock, or (without clocks) in
    another log."""
    if a.log == b.log:
        return a.index < b.index
    if a.line.stamp and b.line.stamp:
        return a.line.stamp <= b.line.stamp
    return True


def _heads_known(e: Event, events: list[Event]) -> bool:
    """Whether ``e`` is a line that heads a traceback (``heads``) and the traceback right after it ends in an
    exception with a finding of its own, which then tells the failure."""
    return e.sig.heads and any(c.log == e.log and c.exception and c.sig.role == CAUSE and c.sig is not TRACEBACK
                               and 0 < c.index - e.index <= len(c.traceback) + 2 for c in events)


def _oom_phase(e: Event) -> str:
    """Where an out-of-memory error struck, from the frames of its traceback."""
    phase, _ = classify([(fn.rsplit(".", 1)[-1], path) for path, _, fn in reversed(e.frames)])
    if phase in ("vLLM sleep/wake", "weight sync"):
        return (f" It struck in {phase}: at the switch from training to rollout, when vLLM takes its memory back "
                "while the trainer's model, gradients and optimizer states are still on the GPU (lower "
                "vllm_gpu_memory_utilization, offload_model/offload_optimizer, sleep_level 1).")
    return f" It struck in {phase}." if phase != "other" else ""


def _timeouts(same: list[Event]) -> str:
    """Which ranks timed out in which collective, from torch's watchdog lines."""
    ranks = sorted({e.rank for e in same if e.rank is not None})
    works = [m for e in same if (m := WORK_NCCL.search(e.line.body))]
    if not works:
        return f" Ranks that timed out: {', '.join(map(str, ranks))}." if ranks else ""
    seq, op = max(works, key=lambda m: len(m[2])).groups()  # a line cut by the terminal may cut the name short
    ms = next((int(m[1]) for e in same if (m := TIMEOUT_MS.search(e.line.body))), None)
    who = f"Rank{'s' if len(ranks) > 1 else ''} {', '.join(map(str, ranks))}" if ranks else "A rank"
    waited = f" {ms / 1000:.0f} s" if ms else ""
    return (f" {who} waited{waited} in {op} (collective #{seq}): the ranks missing from this list (in these logs "
            "or the other nodes') are the ones that never joined it.")


def _said(e: Event) -> str:
    """What the error says and where it was raised, for the explanation."""
    own = e.own_frame
    at = f" in {own[0]}:{own[1]} ({own[2]})" if own else ""
    where = {"save": " while saving a checkpoint", "sync": " during the weight sync to vLLM",
             "sleep": " right after vLLM's sleep/wake"}
    phase = next((text for name, text in where.items() if name in e.context and name not in e.sig.id.lower()), "")
    return f" It says: {e.line.body.strip()[:300]}{at}{phase}." if e.exception or phase else ""


def event_alert(e: Event, same: list[Event]) -> Alert:
    """The alert for a kind of failure, from its first event (and the others of its kind)."""
    explanation = e.sig.explanation
    if e.sig.id == "OOM":
        explanation += _oom_phase(e)
    elif e.sig.id == "NCCL-TIMEOUT":
        explanation += _timeouts(same)
    elif "profile" in e.context:
        lines = [e.line.raw, *e.detail]
        found = vllm_profile.profile([parse(line).body for line in lines], list(range(len(lines))))
        problem = found.problem()
        explanation += (f" Here {problem[0] if problem else 'the profile is off'} ({found.said()}), and the "
                        "engine's start-up traceback follows it, cut before its exception.")
    elif e.sig.id == "REWARD-FUNC-FAILED":
        own = e.own_frame
        at = f"{own[0].rsplit('/', 1)[-1]}:{own[1]} in {own[2]}" if own else "It"
        explanation = f"{at} raised {e.line.body.strip()[:300]}. " + explanation
    else:
        explanation += _said(e)
    logs = sorted({x.log for x in same})
    explanation += f" Seen {len(same)} time(s) in {', '.join(logs)}; first on {e.where}."
    return Alert(e.sig.id, e.sig.severity, e.sig.title, explanation, "\n".join(bounded(e.evidence().splitlines())),
                 e.sig.fix, e.where)


def signature_events(s: Snapshot) -> list[Event]:
    """The events log_signatures writes an alert for: the first of each kind of failure. A consequence (a
    collective timing out, a dead vLLM engine, an unreachable server) is left out when a failure of its own came
    before it; noise and death reports are NODE-FAILED's."""
    events = all_events(s)
    firsts = [e for e in events if e.sig.role in (CAUSE, REPORT)]
    failed = s.root_cause
    done, out = set(OWN_RULES), []
    for e in events:
        if e.sig.id in done or e.sig.role in (NOISE, REPORT):
            continue
        if e.sig.role == CONSEQUENCE and (any(_precedes(c, e) for c in firsts) or _heads_known(e, events)):
            continue
        if e.sig is TRACEBACK and failed and failed.event is e:
            continue  # NODE-FAILED names it with its error line
        if group_port_timeout(s, e.line.raw):
            continue  # WEIGHT-SYNC-STALL names the port
        done.add(e.sig.id)
        out.append(e)
    return out


@rule
def log_signatures(s):
    """One alert per kind of failure the logs show, from its first line (signature_events)."""
    events = all_events(s)
    for e in signature_events(s):
        yield event_alert(e, [x for x in events if x.sig.id == e.sig.id])


def _retrying(lines: list[str]) -> tuple[int, float, int] | None:
    """Of a log whose last word from TRL's vLLM client is a retry: (retries, seconds waited, first retry's line)."""
    retries = [(i, float(m[1])) for i, line in enumerate(lines) if (m := SERVER_RETRY.search(line))]
    if not retries or any(SERVER_UP.search(line) for line in lines[retries[-1][0]:]):
        return None
    return len(retries), sum(wait for _, wait in retries), retries[0][0]


@rule
def rollout_server_not_up(s):
    """The trainer waits for a rollout server that never answers: TRL's vLLM client retrying its health check
    (printed at INFO level, so no error line tells) until the log ends — an excerpt that ends in a few retries, or
    a followed run that has waited RETRY_PATIENCE_S: a warning, as TRL has not given up yet. Left to log_signatures
    once the client gave up with an error."""
    if any(e.sig.id == "ROLLOUT-UNREACHABLE" for e in all_events(s)):
        return
    for node, lines in s.logs.items():
        found = _retrying(lines)
        if found is None:
            continue
        count, waited, first = found
        if count < RETRIES_SHOWN or (not s.excerpt and waited < RETRY_PATIENCE_S):
            continue
        yield Alert("ROLLOUT-UNREACHABLE", "warning", "The trainer waits for a vLLM server that does not answer",
                    f"TRL's vLLM client asked the rollout server's /health/ {count} time(s), about {waited:.0f} s "
                    "in all, and got no answer: no `trl vllm-serve` is running at vllm_server_host / "
                    "vllm_server_port, it is still loading the model, or a proxy or firewall is in the way. The "
                    "trainer gives up after vllm_server_timeout (240 s by default).",
                    "\n".join(bounded([lines[first].strip(), f"… {count - 1} more retries, the last:",
                                        next(line for line in reversed(lines) if SERVER_RETRY.search(line)).strip()]
                                       if count > 1 else [lines[first].strip()])),
                    "Start the server first, on GPUs the trainer does not use (CUDA_VISIBLE_DEVICES=… trl vllm-serve "
                    "--model …), wait for its 'Application startup complete', and point the trainer at it "
                    "(vllm_server_host, vllm_server_port; unset http_proxy for it); or use vllm_mode colocate.",
                    node)
        return


def _after(s: Snapshot, first) -> str:
    """What the other logs show after the first failure."""
    later = []
    for node, events in s.events.items():
        e = next((x for x in events if x.sig.role != NOISE and x is not first.event), None)
        if node != first.node and e:
            later.append(f"{e.where}: {e.sig.title}")
    return f" After it: {'; '.join(later[:6])}." if later else ""


def _failed_evidence(f, shown: bool) -> str:
    """The lines that show where a run failed first: its error line and the lines before it; when the error has a
    finding of its own, only the lines before it that the finding does not show already (one report, no line
    twice)."""
    if not shown:
        return "\n".join([f.error.strip(), "… the lines before it:", *f.context] if f.context else [f.error])
    quoted = {line.strip() for line in f.event.evidence().splitlines()}
    rest = [line for line in f.context if line.strip() and line.strip() not in quoted
            and parse(line).text.strip() not in quoted]
    return "\n".join(["… the lines before its error:", *rest]) if rest else ""


@rule
def node_failed(s):
    if s.job_state != "failed":
        return
    f = s.root_cause
    first = LAUNCHER_FIRST.match(s.job_error or "")
    if f and first and not f.node.startswith(f"node {first[1]} ") and f.role > 0:
        f = None  # that rank only lost its peer; the node the launcher saw fail first left no error in its log
    if (f and s.source == "logs" and len(s.logs) == 1 and not f.summary and f.event
            and f.event.sig.role in (CAUSE, CONSEQUENCE) and f.event.sig is not TRACEBACK):
        return  # one excerpt whose first error has its own finding: nothing to add
    relaunch = "relaunch from History" if s.source == "job" else "start the run again (resume from its last " \
                                                                  "complete checkpoint)"
    if f:
        how = f" ({f.exit})" if f.exit else ""
        what = f": {f.event.sig.title}" if f.event and f.event.sig.role != REPORT else ""
        seen = f" The launcher saw: {s.job_error.splitlines()[0]}." if s.job_error else ""
        shown = f.event in signature_events(s)  # its error line and traceback are that finding's evidence
        said = (f"Its error is the {f.event.sig.id} finding, with its lines." if shown
                else f"Error line: {f.error.strip()[:400]}.")
        yield Alert("NODE-FAILED", "error", f"{f.where} failed first{how}{what}",
                    f"{said} Errors after it in other ranks and processes are consequences (peers closing "
                    f"connections, collectives timing out, torchrun stopping the others).{_after(s, f)}{seen}",
                    _failed_evidence(f, shown),
                    ("See the finding for this error for its fix" if what else "Find why it died in the lines "
                     "before the error (a signal: the OOM killer — dmesg on that host — or a crash in native "
                     "code)") + f"; then {relaunch}.", f.where)
    elif s.job_error:
        where = f"node {first[1]} ({first[2]}), {first[3]}" if first else ""
        yield Alert("NODE-FAILED", "error", s.job_error.splitlines()[0] if first else "A node exited with an error",
                    "The job failed; the node that failed first is named, with the end of its log, and the other "
                    "nodes were stopped." + (" Its log ends without an error: it was killed from outside (a signal, "
                                             "the OOM killer, a stop)." if first and s.logs else ""),
                    s.job_error, f"Fix the cause shown in its log, then {relaunch}.", where)


@rule
def reward_none(s):
    """A reward function that returns None/NaN: ms-swift warns, then counts it as 0."""
    none = [(node, line) for node, lines in s.logs.items() for line in lines if REWARD_NONE in line]
    if none:
        node, line = none[0]
        yield Alert("REWARD-NONE", "error", "A reward function returns None or NaN",
                    f"ms-swift warned {len(none)} time(s) that every reward function returned None (NaN counts as "
                    "None) for a completion; it then scores the completion 0 (a NaN-ignoring sum), so the run trains "
                    "on rewards that are not there and rewards/<name>/mean drops out of the metrics.",
                    line[:600], "Make the reward function return a float for every completion (0.0 when it cannot "
                    "score one) and log why it could not; test it on a few completions from completions.jsonl.", node)


def _group_port_line(s: Snapshot) -> tuple[str, str, int] | None:
    """(node, line, port) of the first line that says a socket timed out on a weight-sync group port; c10d's
    warnings that a poll came back empty only where no such timeout is there (the excerpt ends before it)."""
    for waiting in (False, True):
        for node, lines in s.logs.items():
            for line in lines:
                if port := group_port_timeout(s, line, waiting):
                    return node, line, port
    return None


@rule
def weight_sync_stall(s):
    """The trainer or the rollout server times out on a rollout server's weight-sync group port (the group cannot
    be opened, or stops answering); in server mode also: the run went silent right after the last weight-sync
    request the rollout server answered."""
    if found := _group_port_line(s):
        node, line, port = found
        yield Alert("WEIGHT-SYNC-STALL", "error", "Weight sync to the rollout server cannot connect",
                    f"A socket timed out on the rollout server's weight-sync group port {port} (the group that sends "
                    "new weights to vLLM after each step, set up through a store on that port): the port is blocked "
                    "between the nodes, already taken by an old server, or the other side stopped answering.",
                    line.strip()[:600],
                    f"Open port {port} (vllm_server_group_port, 51216 by default, one per server) from the "
                    "trainer nodes to the rollout node, stop stale `swift rollout` processes, and check "
                    "NCCL_SOCKET_IFNAME on both sides; preflight tests the port from every trainer node.", node)
        return
    if not s.server_mode:
        return
    late = overdue(s)
    if not late:
        return
    for node, lines in s.logs.items():
        calls = [m[1] for line in lines if (m := ACCESS_LINE.search(line))]
        if calls and calls[-1] in SYNC_ENDPOINTS:
            yield Alert("WEIGHT-SYNC-STALL", "error", "The run stalled during weight sync",
                        f"The last request the rollout server answered was {calls[-1]} and nothing has moved for "
                        f"{late[0] / 60:.0f} min (allowed {late[1] / 60:.0f} min): the NCCL broadcast of the new "
                        "weights is stuck between the trainer and vLLM.", "\n".join(lines[-5:]),
                        "Check NCCL between the trainer rank 0 and the rollout GPUs (NCCL_SOCKET_IFNAME, "
                        "NCCL_IB_DISABLE, P2P across PCIe switches), the group port, and lower "
                        "SWIFT_UPDATE_WEIGHTS_BUCKET_SIZE for large models.", node)
            return


@rule
def vllm_sleep_stuck(s):
    """Colocate mode with sleep_level: vLLM fell asleep (or woke only its weights) and then nothing moved."""
    late = overdue(s)
    if not late:
        return
    for node, lines in s.logs.items():
        events = [(line, m) for line in lines if (m := SLEEP_LINE.search(line))]
        if not events:
            continue
        line, m = events[-1]
        if m[1] == "fall asleep":
            state = "vLLM fell asleep for the training phase and never logged its wake-up"
        elif "kv_cache" not in (m[2] or "") and "None" not in (m[2] or ""):
            state = "vLLM woke its weights but never its KV cache (the weight load in between did not finish)"
        else:
            continue
        yield Alert("VLLM-SLEEP-STUCK", "error", "vLLM sleep/wake stuck between phases",
                    f"{state}; nothing has moved for {late[0] / 60:.0f} min (allowed {late[1] / 60:.0f} min).",
                    line.strip(), "Try sleep_level 0 (or 1 instead of 2), update vLLM to the version the ms-swift "
                    "release recommends (preflight compares them), and keep offload_model off while testing.", node)
        return


def _listing(s: Snapshot):
    """Checkpoint directories whose files show a save that did not finish."""
    for path, files in s.checkpoints.items():
        names = {f.rsplit("/", 1)[-1] for f in files}
        ranks = {int(m[1]) for f in files if (m := ZERO_SHARD.search(f))}
        world = s.settings.get("world_size")
        if ranks and world and len(ranks) < world:
            yield Alert("CHECKPOINT-INCOMPLETE", "error", "A checkpoint was written by some ranks only",
                        f"{path} holds ZeRO shards of rank(s) {sorted(ranks)} of {world}: the other ranks wrote "
                        "theirs elsewhere (a node-local output_dir) or never finished.", "\n".join(sorted(files)),
                        "Use an output_dir on a file system every node shares (or save_on_each_node true and "
                        "collect the shards before resuming).", path)
        elif files and "trainer_state.json" not in names:
            yield Alert("CHECKPOINT-INCOMPLETE", "error", "A checkpoint is incomplete",
                        f"{path} has no trainer_state.json (written last by the trainer): the save stopped part-way "
                        "and the checkpoint cannot be resumed from.", "\n".join(sorted(files)),
                        "Delete it, find why the save stopped (disk full, the process killed), and resume from "
                        "the previous checkpoint.", path)


@rule
def checkpoint_incomplete(s):
    """A checkpoint directory without trainer_state.json or with ZeRO shards from fewer ranks than the run has;
    else a failure that struck while saving (its traceback in the save, or after 'Saving model checkpoint' with
    no step logged since) — unless the failure itself is a failed save, which log_signatures reports."""
    if s.checkpoints:
        yield from _listing(s)
        return
    events = all_events(s)
    if any(e.sig is SAVE_FAILED for e in events):
        return
    failed = s.root_cause
    saving = next((e for e in events if "save" in e.context and e.sig.role == CAUSE), None)
    if saving is None and failed and failed.event:
        lines = s.logs.get(failed.node, [])
        saves = [i for i, line in enumerate(lines[:failed.event.index]) if SAVE_LINE.search(line)]
        if saves and not any("{'loss'" in line for line in lines[saves[-1] + 1:failed.event.index]):
            saving = failed.event  # the run failed after starting a save and before logging another step
    if saving is None:
        return
    lines = s.logs[saving.log]
    saves = [m[1] for line in lines[:saving.index] if (m := SAVE_LINE.search(line))]
    named = saves[-1] if saves else next((m[1] for line in lines if (m := LAST_CHECKPOINT.search(line))),
                                         "the checkpoint being written")
    yield Alert("CHECKPOINT-INCOMPLETE", "error", "The last checkpoint save never finished",
                f"The run failed while saving {named} ({saving.sig.title}): that checkpoint is partial (or "
                "missing) and cannot be resumed from.",
                "\n".join(bounded([saving.line.text] + ([f"… while saving: Saving model checkpoint to {saves[-1]}"]
                                                        if saves else []) + (saving.traceback or saving.before))),
                "Do not resume from it; fix the failure (see its own finding) and resume from the previous "
                "checkpoint.", saving.where)
