"""The doctor's rules on log lines: how a run failed (root cause, out of memory, NCCL, rollout server, reward
function, disk, a missing package) and the GRPO stalls that leave no error behind (weight sync to the rollout
servers, a vLLM sleep/wake that never returns), and checkpoints left incomplete."""

from __future__ import annotations

import re

from grpo_ui.doctor.rootcause import CONSEQUENCE, RANK_PREFIX, TB_START, Failure, root_cause, traceback_span
from grpo_ui.doctor.snapshot import Alert, Snapshot, overdue, rule
from grpo_ui.doctor.stacks import classify
from grpo_ui.spec.resolve import GROUP_PORT

LOG_SIGNS = [
    ("OOM", "error", re.compile(r"CUDA out of memory|OutOfMemoryError|No available memory for the cache blocks|"
                                r"CUDA Error: out of memory"),
     "Out of GPU memory", "A rank ran out of GPU memory.",
     "Open the memory estimate on the Configure page and apply one of its make-it-fit changes (lower "
     "vllm_gpu_memory_utilization, sleep_level 1, ZeRO-3, smaller micro-batch)."),
    ("NCCL-TIMEOUT", "error", re.compile(r"Watchdog caught collective operation timeout|NCCL.*[Tt]imeout|"
                                         r"socket has timed out|ProcessGroupNCCL.*timed out"),
     "NCCL collective timed out", "A collective operation waited longer than its timeout: some rank stopped "
     "participating (hang, crash, or network).",
     "Find the node that went quiet first; check that every node runs identical arguments, ports are open between "
     "nodes (and to rollout servers on 51216+i), and raise ddp_timeout for long rollouts."),
    ("ROLLOUT-UNREACHABLE", "error", re.compile(r"Servers not reachable|did not answer /health/|"
                                                r"Failed to connect to vLLM server"),
     "Rollout server unreachable", "The trainer cannot reach a swift rollout server.",
     "Check the rollout node's log and that its HTTP port and group port (51216+i) are reachable from trainer "
     "rank 0; unset http_proxy/https_proxy."),
    ("DISK-FULL", "error", re.compile(r"No space left on device|os error 28|Errno 28"),
     "Disk full", "A write failed because the file system is full (often while saving a checkpoint).",
     "Free space on output_dir's file system or move output_dir to a larger volume; save_total_limit keeps only "
     "the last N checkpoints, save_only_model skips the optimizer states."),
    ("PACKAGE-MISSING", "error", re.compile(r"^(?:\[rank\d+\]: )?(?:ImportError|ModuleNotFoundError): |"
                                            r" is not installed\b"),
     "A package is missing in the job's environment", "ms-swift could not import what this configuration needs.",
     "Run preflight: it compares every node's packages with what the ms-swift version there requires; install the "
     "missing package (or turn the feature off) in python_env on every node."),
    ("TRACEBACK", "error", re.compile(r"Traceback \(most recent call last\)"), "A rank crashed with a traceback",
     "A Python exception ended a process.", "Read the traceback below; the first node that printed one is named."),
]
MAX_TB_LINES = 60
REWARD_NONE = "All reward functions returned None"
LAUNCHER_FIRST = re.compile(r"^node (\d+) \(([^,]+), ([^)]+)\) failed first")  # the launcher's job error
REWARD_FRAMES = re.compile(r", in (compute_rewards_per_func|_compute_rewards_per_func|score_completions)$")
FRAME_LINE = re.compile(r'^\s*File "(.+)", line (\d+), in (.+)$')
SAVE_LINE = re.compile(r"Saving model checkpoint to (\S+)")
LAST_CHECKPOINT = re.compile(r"last_model_checkpoint: (/\S+)")
SAVE_FRAME = re.compile(r", in (_save_checkpoint|save_model|_save|save_pretrained|_save_optimizer_and_scheduler)$")
SLEEP_LINE = re.compile(r"It took [\d.]+ seconds to (fall asleep|wake up tags (.*))\.$")
ACCESS_LINE = re.compile(r'"(?:GET|POST) (/[\w/]+) HTTP/[\d.]+" (\d+)')
SYNC_ENDPOINTS = ("/init_communicator/", "/update_named_param/", "/update_flattened_params/",
                  "/update_adapter_flattened_param/", "/update_adapter_param/")
CONNECT_TIMEOUT = re.compile(r"timed out .*?connect to \(([^,]+), (\d+)\)|failed to connect/validate to host "
                             r"[^:]+:(\d+)|port: (\d+).*EADDRINUSE|remote=\S+:(\d+)\) timed out")
ZERO_SHARD = re.compile(r"zero_pp_rank_(\d+)_mp_rank_\d+_(?:optim|model)_states\.pt$")


def traceback_at(lines: list[str], i: int) -> tuple[list[str], str | None]:
    """The traceback that starts at ``lines[i]`` (bounded, without a tqdm bar glued in front) and the rank that
    printed it."""
    span, rank = traceback_span(lines, i)
    prefix = RANK_PREFIX.match(lines[i])[0] if RANK_PREFIX.match(lines[i]) else ""
    out = [prefix + lines[i][lines[i].index(TB_START):]] + [lines[k] for k in span[1:]]
    return _bounded(out), None if rank is None else str(rank)


def _bounded(lines: list[str]) -> list[str]:
    """At most MAX_TB_LINES: the head (where it started) and the tail (the exception)."""
    if len(lines) <= MAX_TB_LINES:
        return lines
    head, tail = MAX_TB_LINES // 3, MAX_TB_LINES - MAX_TB_LINES // 3 - 1
    return lines[:head] + [f"… {len(lines) - head - tail} lines left out …"] + lines[-tail:]


def _oom_phase(lines: list[str], i: int) -> str:
    """Where an out-of-memory error struck, from the frames of the traceback it ends (innermost first)."""
    start = next((k for k in range(i, -1, -1) if TB_START in lines[k]), None)
    if start is None:
        return ""
    frames = [(m[3].rsplit(".", 1)[-1], m[1]) for t in traceback_at(lines, start)[0]
              if (m := FRAME_LINE.match(RANK_PREFIX.sub("", t)))]
    phase, _ = classify(frames[::-1])
    if phase in ("vLLM sleep/wake", "weight sync"):
        return (f" It struck in {phase}: at the switch from training to rollout, when vLLM takes its memory back "
                "while the trainer's model, gradients and optimizer states are still on the GPU (lower "
                "vllm_gpu_memory_utilization, offload_model/offload_optimizer, sleep_level 1).")
    return f" It struck in {phase}." if phase != "other" else ""


def _failure(s: Snapshot) -> Failure | None:
    return root_cause(s.logs) if s.job_state == "failed" else None


@rule
def log_signatures(s):
    failed = _failure(s)
    for aid, sev, rx, title, expl, fix in LOG_SIGNS:
        if aid == "TRACEBACK" and failed:
            continue  # NODE-FAILED names the first failure and its error line
        hits = [(node, i, line) for node, lines in s.logs.items() for i, line in enumerate(lines) if rx.search(line)]
        if hits:
            node, i, line = hits[0]
            where = node
            context = [line]
            if aid == "TRACEBACK":
                context, rank = traceback_at(s.logs[node], i)
                where += f", rank {rank}" if rank else ""
            if aid == "OOM":
                expl += _oom_phase(s.logs[node], i)
            nodes = sorted({h[0] for h in hits})
            yield Alert(aid, sev, title, expl + f" Seen on {', '.join(nodes)}; first on {where}.",
                        "\n".join(context), fix, where)


@rule
def node_failed(s):
    if s.job_state != "failed":
        return
    f = _failure(s)
    first = LAUNCHER_FIRST.match(s.job_error or "")
    if f and first and not f.node.startswith(f"node {first[1]} ") and CONSEQUENCE.search(f"{f.exit} {f.error}"):
        f = None  # that rank only lost its peer; the node the launcher saw fail first left no error in its log
    if f:
        how = f" ({f.exit})" if f.exit else ""
        seen = f" The launcher saw: {s.job_error.splitlines()[0]}." if s.job_error else ""
        yield Alert("NODE-FAILED", "error", f"{f.where} failed first{how}",
                    f"Error line: {f.error.strip()}. Other ranks' errors after it are consequences (peers closing "
                    f"connections, torchrun stopping the others).{seen}",
                    "\n".join(f.context + [f.error]),
                    "Fix the cause shown in its log (the lines before the error), then relaunch from History.",
                    f.where)
    elif s.job_error:
        where = f"node {first[1]} ({first[2]}), {first[3]}" if first else ""
        yield Alert("NODE-FAILED", "error", s.job_error.splitlines()[0] if first else "A node exited with an error",
                    "The job failed; the node that failed first is named, with the end of its log, and the other "
                    "nodes were stopped." + (" Its log ends without an error: it was killed from outside (a signal, "
                                             "the OOM killer, a stop)." if first and s.logs else ""),
                    s.job_error, "Fix the cause shown in its log, then relaunch from History.", where)


@rule
def reward_failures(s):
    """A reward function that returns None/NaN (ms-swift warns, then counts it as 0) or raises."""
    none = [(node, line) for node, lines in s.logs.items() for line in lines if REWARD_NONE in line]
    if none:
        node, line = none[0]
        yield Alert("REWARD-NONE", "error", "A reward function returns None or NaN",
                    f"ms-swift warned {len(none)} time(s) that every reward function returned None (NaN counts as "
                    "None) for a completion; it then scores the completion 0 (a NaN-ignoring sum), so the run trains "
                    "on rewards that are not there and rewards/<name>/mean drops out of the metrics.",
                    line[:600], "Make the reward function return a float for every completion (0.0 when it cannot "
                    "score one) and log why it could not; test it on a few completions from completions.jsonl.", node)
    for node, lines in s.logs.items():
        for i, line in enumerate(lines):
            if TB_START not in line:
                continue
            tb, rank = traceback_at(lines, i)
            body = [RANK_PREFIX.sub("", t) for t in tb]
            if not any(REWARD_FRAMES.search(t) for t in body):
                continue
            frames = [m for t in body if (m := FRAME_LINE.match(t))]
            own = next((m for m in reversed(frames) if "site-packages" not in m[1]), frames[-1] if frames else None)
            at = f"{own[1]}:{own[2]} in {own[3]}" if own else "the reward function"
            yield Alert("REWARD-FUNC-FAILED", "error", "A reward function raised an exception",
                        f"{at} raised {body[-1].strip()}; ms-swift does not catch errors of reward functions, so "
                        "the rank stops and the run fails.", "\n".join(tb),
                        "Fix the reward function (or catch its errors and return 0.0 for that completion); run it "
                        "on a few rows of the dataset before launching.", node + (f", rank {rank}" if rank else ""))
            return


def _sync_ports(s: Snapshot) -> set[int]:
    return set(s.group_ports) | {GROUP_PORT + k for k in range(8)}


@rule
def weight_sync_stall(s):
    """Server mode: the trainer cannot open or finish the weight-sync group on a rollout server's group port, or
    the run went silent right after the last weight-sync request the rollout server answered."""
    if not s.server_mode:
        return
    ports = _sync_ports(s)
    for node, lines in s.logs.items():
        for line in lines:
            m = CONNECT_TIMEOUT.search(line)
            port = next((int(g) for g in m.groups() if g and g.isdigit()), None) if m else None
            if port in ports:
                yield Alert("WEIGHT-SYNC-STALL", "error", "Weight sync to the rollout server cannot connect",
                            f"The trainer timed out on the rollout server's weight-sync group port {port} (the NCCL "
                            "group that sends new weights to vLLM after each step): the port is blocked between the "
                            "nodes, or already taken by an old server.", line.strip()[:600],
                            f"Open port {port} (vllm_server_group_port, 51216 by default, one per server) from the "
                            "trainer nodes to the rollout node, stop stale `swift rollout` processes, and check "
                            "NCCL_SOCKET_IFNAME on both sides; preflight tests the port from every trainer node.",
                            node)
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


@rule
def checkpoint_incomplete(s):
    """A save that never finished (the run failed after 'Saving model checkpoint'), a checkpoint directory without
    trainer_state.json, or ZeRO optimizer shards from fewer ranks than the run has."""
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
    failed = _failure(s)
    if not failed or s.checkpoints:
        return
    lines = s.logs.get(failed.node, [])
    at = lines.index(failed.error) if failed.error in lines else len(lines)
    starts = [i for i in range(at) if TB_START in lines[i]]
    trace = traceback_at(lines, starts[-1])[0] if starts else []
    in_save = any(SAVE_FRAME.search(RANK_PREFIX.sub("", t)) for t in trace)
    saves = [(i, m[1]) for i, line in enumerate(lines[:at]) if (m := SAVE_LINE.search(line))]
    if saves and any("{'loss'" in line for line in lines[saves[-1][0] + 1:at]):
        saves = []  # a later step was logged: that save finished
    if in_save or saves:
        named = saves[-1][1] if saves else next((m[1] for line in lines if (m := LAST_CHECKPOINT.search(line))),
                                                "the checkpoint being written")
        yield Alert("CHECKPOINT-INCOMPLETE", "error", "The last checkpoint save never finished",
                    f"The run failed while saving {named}: that checkpoint is partial (or missing) and cannot be "
                    "resumed from.", (lines[saves[-1][0]].strip() + "\n…\n" if saves else "") + failed.error.strip(),
                    "Do not resume from it; fix the failure (see NODE-FAILED) and resume from the previous "
                    "checkpoint.", failed.where)
