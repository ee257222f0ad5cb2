"""The errors in a log, wherever they stand: ``scan`` finds each line that tells of a failure (a signature's message,
or the exception line that ends a Python traceback — also one whose traceback is cut off or mangled) and says what
it is (signatures.py), who printed it (rank, process), when, and where the code was when it failed: in a reward
function, a checkpoint save, the weight sync to vLLM, vLLM's sleep/wake, DeepSpeed, the argument checks.

A line printed at WARNING level that a signature names (c10d's rendezvous socket timing out, for one) is the first
sign of a failure only when the failure follows: it counts when an error line comes after it in the same log before
any sign of progress, and is dropped otherwise, so a healthy run's warnings raise nothing.

Works on any excerpt: no torchrun header, logging.jsonl or job spec needed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from grpo_ui.doctor import signatures as sig
from grpo_ui.doctor import vllm_profile
from grpo_ui.doctor.lines import Line, parse
from grpo_ui.doctor.signatures import CAUSE, CONSEQUENCE, NOISE, REPORT, Signature

TB_START = "Traceback (most recent call last)"  # Python's (with a colon), and IPython's header (after the type)
TB_CHAIN = ("During handling of the above exception", "The above exception was the direct cause")
LAUNCHER_FILES = re.compile(r"torch/distributed/(?:run|launcher|elastic)|runpy\.py$|/bin/torchrun$")
# an exception line as Python prints it: the (dotted) class, or a bare Exception (raise Exception(...)); Ray's
# RayTaskError names the class the remote task raised in parentheses (ray/exceptions.py: RayTaskError.__str__)
EXCEPTION = re.compile(r"^(?P<type>(?:[A-Za-z_]\w*\.)*(?:[A-Z]\w*(?:Error|Exception|Exit|Interrupt|Failure)|Exception))"
                       r"(?:\((?P<inner>(?:[A-Za-z_]\w*\.)*[A-Z]\w*)\))?(?::\s?(?P<message>.*))?$")
# an exception class named inside a line that is not an exception line: the paste mangled the traceback's last
# line (glued to the code line before it, the class repeated inside its message, words in front of it)
EXCEPTION_INSIDE = re.compile(r"(?<![\w.])(?P<type>(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception))\b(?::\s?(?P<message>.*))?")
# a frame's code line that raises an exception with a message written out (``raise ValueError("No available …"``)
RAISE = re.compile(r"^\s+raise (?P<type>(?:[A-Za-z_]\w*\.)*[A-Z]\w*)\(\s*f?(?P<quote>[\"'])(?P<message>.*)")
STRING_LITERAL = re.compile(r"""[rbfRBF]*(["'])((?:\\.|(?!\1).)*)\1""")
# a frame as Python prints it, and as IPython (8+) does in a notebook: "File /x/y.py:12, in f(a)", "Cell In[5], line 3"
FRAME = re.compile(r'^\s*File "(?P<file>.+)", line (?P<line>\d+), in (?P<function>.+)$|'
                   r"^\s*File (?P<ipy_file>\S+):(?P<ipy_line>\d+), in (?P<ipy_function>[^(\s]+)|"
                   r"^(?P<cell>Cell In\[\d+\]), line (?P<cell_line>\d+)")
IPY_CODE = re.compile(r"^-*>\s*\d+\s")  # IPython's line of a frame that ran: "----> 3 trainer.train()"
IPY_HEADER = re.compile(r"^[\w.]+ +Traceback \(most recent call last\)$")  # IPython's: the type, then this
NATIVE_FRAME = re.compile(r"^\s*(?:frame #\d+: |#\d+ |\d+ 0x[0-9a-f]+ )(?P<function>.+)$|^\S+\((?P<symbol>[^)]*)\)")
CARET = re.compile(r"^\s*[\^~]+\s*$")
PY_WARNING = re.compile(r"^\S+:\d+: \w*Warning: ")  # warnings.warn's line: path:line: UserWarning: …
# signs that a process was still working after a line: a metric line (a dict, verl's step line), a step bar, a
# request served, vLLM's throughput report
PROGRESS = re.compile(r"['\"](?:loss|train_loss|eval_loss)['\"]:\s|Train:\s+\d+%\||\bstep:\d+ - |\" 200 OK$|"
                      r"Avg prompt throughput")
ANNOUNCE_REACH = 300  # lines within which a warning's failure must follow
ARGS_DUMP_START = re.compile(r"\bargs: \w+Arguments\($")
ARGS_DUMP_LINE = re.compile(r"^[A-Za-z_][\w.]*=.*,?$")
NCCL_RANK = re.compile(r"\[(?:PG [^\]]*)?Rank (\d+)\]")
LOCAL_RANK = re.compile(r"local_rank: (\d+)")
EXIT_CODE = re.compile(r"exitcode: (-?\d+)")
SIGNALS = {1: "SIGHUP", 2: "SIGINT", 4: "SIGILL", 6: "SIGABRT", 7: "SIGBUS", 8: "SIGFPE", 9: "SIGKILL",
           11: "SIGSEGV", 13: "SIGPIPE", 15: "SIGTERM"}

# Where the code was: function names (frames) and words (the message, the lines around) of each phase.
REWARD_FRAMES = re.compile(r"^(?:_?compute_rewards(?:_per_func)?|_?score_completions|_calculate_rewards|"
                           r"compute_score|_compute_reward\w*)$")
REWARD_WORDS = re.compile(r"\b\w*reward\w*\(\)")
REWARD_MODULE = re.compile(r"/rewards?(?:_\w+)?/")  # a package's reward code: verl's reward_manager/, reward_score/
# TRL before its _calculate_rewards: the step that generates and scores calls the user's reward functions itself
SCORING_STEP = re.compile(r"^(?:_generate_and_score_completions|_prepare_inputs)$")
INSTALLED = re.compile(r"site-packages|dist-packages|/lib/python")
SAVE_FRAMES = re.compile(r"(?:^|::|\.)(?:_save_checkpoint|save_model|_save|save_pretrained|save_checkpoint|"
                         r"_save_optimizer_and_scheduler|save_state|get_state_dict|save_16bit_model|"
                         r"_zero3_consolidated_16bit_state_dict|save_file|_save_to_state_dict|writeRecord|"
                         r"PyTorchStreamWriter\w*)\b")
SAVE_WORDS = re.compile(r"on_model_save|Saving model checkpoint|save_checkpoint|consolidated_16bit_state_dict|"
                        r"The weights trying to be saved|"  # transformers modeling_utils: save_pretrained (shared tensors)
                        r"Some tensors share memory|trying to save a non contiguous tensor|"  # safetensors torch.py
                        r"Error while serializing")  # safetensors_rust: a write that failed
# the weight sync's functions: TRL's (_move_model_to_vllm, vllm_client's update_named_param / init_communicator),
# ms-swift's (_fast_infer_update_weights, vllm_client's update_flattened_params / update_adapter_*), OpenRLHF's
# (ppo_actor.py: _broadcast_to_vllm), verl's and vLLM workers' (update_weights, sync_weights)
SYNC_FRAMES = re.compile(r"^(?:update_weights?|update_named_param|update_flattened_params|update_adapter_\w+|"
                         r"init_communicator|_move_model_to_vllm|_sync_\w*weights?\w*|sync_weights|"
                         r"_fast_infer_update_weights|broadcast_weights?|_?broadcast_to_vllm)$")
SYNC_WORDS = re.compile(r"\bupdate[_ ]weights?\b|update_named_param|update_flattened_params|init_communicator|"
                        r"/update_\w+/|\bweight[_ ]sync|sync_weights|_move_model_to_vllm|_broadcast_to_vllm|"
                        r"Server \d+ (?:init|update[\w ]*) failed")  # ms-swift rlhf_trainers/vllm_client.py
# weights loaded into a running vLLM from outside it: a weight loader reached through a collective RPC into its
# workers (vLLM v1 engine core: a utility call's failure reads "Call to collective_rpc method failed: …"); start-up
# loads the checkpoint through load_model instead
WEIGHT_LOADING = re.compile(r"\b\w*weight_loader\b|\bload_weights\b")
STARTUP_LOAD_FRAMES = re.compile(r"^(?:load_model|initialize_model|_init_executor|init_device)$")
# a parameter name with the prefix a training wrapper gives it (torch.compile, FSDP, activation checkpointing, PEFT):
# only a live training model carries it, so vLLM refusing it is the weight sync sending the wrapped model's names
WRAPPED_NAME = re.compile(r"'(?:[\w.]*\.)?(?:_orig_mod|_fsdp_wrapped_module|_checkpoint_wrapped_module|"
                          r"base_model\.model)(?:\.[\w.]*)?'")
SLEEP_WORDS = re.compile(r"seconds to (?:fall asleep|wake up)|Sleep mode freed|\bwake_up\(|\.sleep\(level")
# argument classes, and ms-swift's CLI, which looks the sub-command up (swift/cli/main.py: cli_main's
# route_mapping[method_name] raises KeyError for `swift grpo`)
ARGS_FILES = re.compile(r"/arguments?/|_args\.py$|arguments\.py$|_config\.py$|swift/cli/main\.py$")
DEEPSPEED_WORDS = re.compile(r"\bZeRO\b|ZeRO\w*(?:Exception|Error)|DeepSpeed|deepspeed|"
                             r"\{'id': \d+, 'status': '(?:NOT_AVAILABLE|AVAILABLE|INFLIGHT)'|"  # ZeRO-3 ds_summary()
                             r"Gradient computed twice for this partition")  # ZeRO-1/2 stage_1_and_2.py
# vLLM's KV-cache set-up (v0 worker/executor, v1 gpu_worker/kv_cache_utils): profiling the memory, sizing the
# cache and allocating it
KV_SETUP_FRAMES = re.compile(r"^(?:determine_num_available_blocks|determine_available_memory|profile_run|"
                             r"_initialize_kv_caches|initialize_cache|_allocate_kv_cache|initialize_kv_cache\w*|"
                             r"get_kv_cache_configs?|_?check_enough_kv_cache_memory|_init_cache_engine)$")
NEAR = 8          # lines around an error that tell what the run was doing
SLEEP_NEAR = 30   # a crash this close after vLLM's sleep/wake lines happened at the switch
MAX_TRACEBACK = 400


@dataclass
class Event:
    """One error line of one log and what it means."""

    log: str                 # the log's label (file or node)
    index: int               # its line in that log
    line: Line
    sig: Signature
    exception: bool = False  # the exception line of a traceback (or a bare one)
    frames: list[tuple[str, str, str]] = field(default_factory=list)  # (file, line, function) outermost first
    context: frozenset[str] = frozenset()  # reward / save / sync / sleep (in_sleep) / deepspeed / args
    detail: list[str] = field(default_factory=list)  # lines after it that belong to it
    traceback: list[str] = field(default_factory=list)  # the traceback it ends
    before: list[str] = field(default_factory=list)  # without a traceback: the lines before it

    @property
    def rank(self) -> int | None:
        if self.line.rank is not None:
            return self.line.rank
        m = NCCL_RANK.search(self.line.body)
        return int(m[1]) if m else None

    @property
    def local_rank(self) -> int | None:
        m = LOCAL_RANK.search(self.line.body)
        return int(m[1]) if m else None

    @property
    def exit(self) -> str | None:
        """How the process ended, where the line says: "exit code 1", "signal 11 (SIGSEGV)"."""
        m = EXIT_CODE.search(self.line.body)
        if not m:
            return None
        code = int(m[1])
        return f"signal {-code} ({SIGNALS.get(-code, '?')})" if code < 0 else f"exit code {code}"

    @property
    def where(self) -> str:
        parts = [self.log]
        if self.line.process:
            parts.append(self.line.process)
        if self.rank is not None:
            parts.append(f"rank {self.rank}")
        elif self.local_rank is not None:
            parts.append(f"local rank {self.local_rank}")
        return ", ".join(parts)

    @property
    def own_frame(self) -> tuple[str, str, str] | None:
        """The innermost frame outside installed packages (the user's code: a reward plugin, a script)."""
        return next((f for f in reversed(self.frames) if not INSTALLED.search(f[0])), None)

    def evidence(self) -> str:
        """The error line first, then what belongs to it, then the traceback or the lines before it."""
        out = [self.line.text.strip(), *self.detail]
        if self.traceback:
            out += ["… its traceback:", *self.traceback]
        elif self.before:
            out += ["… the lines before it:", *self.before]
        return "\n".join(out)


def args_dump_lines(lines: list[str]) -> set[int]:
    """Indexes of the lines of ms-swift's ``args: RLHFArguments(`` dump (one ``key=value,`` per line, then ``)``)."""
    out: set[int] = set()
    inside = False
    for i, line in enumerate(lines):
        inside = inside or bool(ARGS_DUMP_START.search(line))
        if inside:
            out.add(i)
            inside = line.strip() != ")"
    return out


def frame_of(body: str) -> tuple[str, str, str] | None:
    """(file, line, function) of a traceback's frame line; None for other lines."""
    m = FRAME.match(body)
    if m is None:
        return None
    if m["cell"]:
        return m["cell"], m["cell_line"], "<cell>"
    return (m["file"], m["line"], m["function"].strip()) if m["file"] else (m["ipy_file"], m["ipy_line"],
                                                                             m["ipy_function"])


def _continues(body: str) -> bool:
    """Whether a line inside a traceback continues it: a frame's code (indented), carets, a blank, IPython's arrow."""
    return body[:1] in (" ", "\t") or not body.strip() or bool(CARET.match(body) or IPY_CODE.match(body))


def _same_rank(ln: Line, rank: int | None) -> bool:
    return rank is None or ln.rank is None or ln.rank == rank


def _traceback(parsed: list[Line], i: int) -> tuple[list[int], list[int], list[tuple[str, str, str]]]:
    """The traceback that ends at the exception line ``parsed[i]``: its lines (frames, code, carets, back to its
    'Traceback' line or as far as the excerpt goes, and through the exceptions chained before it; another rank's
    lines left out), the chained exception lines, and the frames, outermost first."""
    rank = parsed[i].rank
    span, chained, frames = [], [], []
    k, expect_exception = i - 1, False
    while k >= 0 and i - k <= MAX_TRACEBACK:
        body = parsed[k].body
        if not _same_rank(parsed[k], rank):
            k -= 1
            continue
        if frame := frame_of(body):
            frames.append(frame)
        elif TB_START in body:
            span.append(k)
            j = k - 1
            while j >= 0 and (not _same_rank(parsed[j], rank) or not parsed[j].body.strip()):
                span += [j] if _same_rank(parsed[j], rank) else []
                j -= 1
            if j < 0 or not parsed[j].body.strip().startswith(TB_CHAIN):
                span = [x for x in span if x > j]  # blank lines before the first 'Traceback' are not its
                break
            span.append(j)
            k, expect_exception = j - 1, True
            continue
        elif expect_exception and EXCEPTION.match(body):
            chained.append(k)
            expect_exception = False
        elif not _continues(body):
            break
        span.append(k)
        k -= 1
    return sorted(span), sorted(chained), frames[::-1]


def _next_line(parsed: list[Line], i: int) -> int | None:
    """The next non-blank line of ``parsed[i]``'s rank after it."""
    rank = parsed[i].rank
    return next((k for k in range(i + 1, min(len(parsed), i + 50))
                 if _same_rank(parsed[k], rank) and parsed[k].body.strip()), None)


def _chained_on(parsed: list[Line], i: int) -> bool:
    """Whether the exception line ``parsed[i]`` hands over to an exception chained after it that the excerpt shows
    (a chain cut before its next exception line leaves this one the last error told)."""
    k = _next_line(parsed, i)
    if k is None or not parsed[k].body.strip().startswith(TB_CHAIN):
        return False
    j = _next_line(parsed, k)  # Python's 'Traceback' line, or Ray's 'ray::Actor.method()' of a remote chain
    if j is None:
        return False
    if EXCEPTION.match(parsed[j].body):
        return True
    _, stop = _frame_run(parsed, j + 1, parsed[i].rank)
    return stop is not None and bool(EXCEPTION.match(parsed[stop].body))


def _frame_run(parsed: list[Line], start: int, rank: int | None) -> tuple[list[tuple[str, str, str]], int | None]:
    """The frames from ``parsed[start]`` on (frames, their code, carets; other ranks' lines skipped) and the index
    of the first line of the rank that does not continue them (None: the excerpt ends first)."""
    frames = []
    for k in range(start, min(len(parsed), start + MAX_TRACEBACK)):
        ln = parsed[k]
        if not _same_rank(ln, rank):
            continue
        if frame := frame_of(ln.body):
            frames.append(frame)
        elif not _continues(ln.body):
            return frames, k
    return frames, None


def _cut_traceback(parsed: list[Line], i: int) -> list[tuple[str, str, str]] | None:
    """The frames of a traceback that starts at ``parsed[i]`` and never reaches its exception line (the excerpt
    ends, or other output follows); None when it does reach one."""
    frames, stop = _frame_run(parsed, i + 1, parsed[i].rank)
    return None if stop is not None and EXCEPTION.match(parsed[stop].body) else frames


def _remote_exception_follows(parsed: list[Line], i: int, klass: str) -> bool:
    """Whether the remote traceback Ray prints after its ``RayTaskError(klass)`` line at ``parsed[i]`` reaches the
    exception line of that class (ray/exceptions.py: RayTaskError's header, then the task's own traceback)."""
    _, stop = _frame_run(parsed, i + 1, parsed[i].rank)
    m = EXCEPTION.match(parsed[stop].body) if stop is not None else None
    return bool(m) and m["type"].rsplit(".", 1)[-1] == klass.rsplit(".", 1)[-1]


def _starts_frames(parsed: list[Line], i: int) -> bool:
    """Whether the frame line ``parsed[i]`` opens a traceback the excerpt shows without its 'Traceback' line: no
    line of its rank before it belongs to a traceback."""
    rank = parsed[i].rank
    k = next((k for k in range(i - 1, max(-1, i - 50), -1)
              if _same_rank(parsed[k], rank) and parsed[k].body.strip()), None)
    if k is None:
        return True
    body = parsed[k].body
    ray_header = (m := EXCEPTION.match(body)) is not None and m["inner"] is not None  # the task's own frames follow
    return not (TB_START in body or frame_of(body) or _continues(body) or body.strip().startswith(TB_CHAIN)
                or ray_header)


def _mangled(parsed: list[Line], start: int, stop: int | None) -> int | None:
    """The index of the line that should have been a traceback's exception line and was mangled in the paste (an
    exception class inside it, not at its start): the line that ends the frames, else the run's last code line."""
    candidates = [stop] if stop is not None else []
    rank = parsed[start].rank
    last = next((k for k in range(min(len(parsed), start + MAX_TRACEBACK) - 1, start - 1, -1)
                 if _same_rank(parsed[k], rank) and parsed[k].body.strip()), None)
    if stop is None and last is not None and not frame_of(parsed[last].body):
        candidates.append(last)
    return next((k for k in candidates if EXCEPTION_INSIDE.search(parsed[k].body.strip())), None)


def _innermost_code(parsed: list[Line], start: int, stop: int | None) -> int | None:
    """The code line of the last frame a traceback run shows (the deepest call the excerpt has)."""
    rank, found = parsed[start].rank, None
    end = stop if stop is not None else min(len(parsed), start + MAX_TRACEBACK)
    for k in range(start, end):
        if _same_rank(parsed[k], rank) and frame_of(parsed[k].body):
            found = next((j for j in range(k + 1, end) if _same_rank(parsed[j], rank)), None)
    return found if found is not None and not frame_of(parsed[found].body) else None


def _in_kv_setup(frames: list[tuple[str, str, str]]) -> bool:
    """Whether a traceback's innermost frames are vLLM's KV-cache set-up: a set-up frame, and only vLLM's after it."""
    at = [k for k, (_, _, fn) in enumerate(frames) if KV_SETUP_FRAMES.match(fn.rsplit(".", 1)[-1])]
    return bool(at) and all("vllm" in f for f, _, _ in frames[at[-1]:])


def _innermost_of_cut(parsed: list[Line], i: int) -> bool:
    """Whether the frame code line ``parsed[i]`` is the last frame of a traceback cut before its exception line
    (no frame and no exception line of its process follow it: the excerpt ends, or other output does)."""
    rank = parsed[i].rank
    for ln in parsed[i + 1:i + MAX_TRACEBACK]:
        if not _same_rank(ln, rank):
            continue
        if frame_of(ln.body) or EXCEPTION.match(ln.body):
            return False
        if not _continues(ln.body):
            return True
    return True


def _native_frames(parsed: list[Line], i: int) -> list[str]:
    """The function names of a crash dump printed after a crash line (``File "<unknown>", line 0, in f``,
    ``frame #3: f``, ``/lib/x.so(f+0x1)``)."""
    out = []
    for ln in parsed[i + 1:i + 60]:
        if frame := frame_of(ln.body):
            out.append(frame[2])
        elif m := NATIVE_FRAME.match(ln.body.strip()):
            out.append(m["function"] or m["symbol"] or "")
        elif ln.body.strip() and not ln.body.startswith(("=", "[")):
            break
    return out


def _context(parsed: list[Line], i: int, frames: list[tuple[str, str, str]], native: list[str], message: str,
             group_ports: set[int], start: int | None = None) -> frozenset[str]:
    """Where the code was when the error at ``parsed[i]`` was raised: its frames, its message, and the lines around
    it — from NEAR lines before its traceback's first line (``start``: what the process was doing when it entered
    the call that failed, however long the traceback) to NEAR lines after it."""
    functions = [fn.rsplit(".", 1)[-1] for _, _, fn in frames]
    files = [f for f, _, _ in frames]
    first = i if start is None else min(start, i)
    near = " ".join(ln.body for ln in parsed[max(0, first - NEAR):i + NEAR + 1])
    found = set()
    scoring = [k for k, (f, fn) in enumerate(zip(files, functions, strict=True))
               if SCORING_STEP.match(fn) and "trl/" in f]
    if (any(REWARD_FRAMES.match(fn) for fn in functions) or REWARD_WORDS.search(message)
            or any("reward" in f.rsplit("/", 1)[-1] for f in files) or (files and REWARD_MODULE.search(files[-1]))
            or (scoring and any(not INSTALLED.search(f) for f in files[scoring[-1] + 1:]))):
        found.add("reward")
    if (any(SAVE_FRAMES.search(fn) for fn in functions + native) or SAVE_WORDS.search(message)
            or any(fn == "save" and f.endswith("serialization.py") for f, _, fn in frames)):
        found.add("save")
    ports = "|".join(str(p) for p in sorted(group_ports))
    loads_weights = (WEIGHT_LOADING.search(message) or any(WEIGHT_LOADING.match(fn) for fn in functions))
    through_rpc = "collective_rpc" in message or "collective_rpc" in functions
    if (any(SYNC_FRAMES.match(fn) for fn in functions) or SYNC_WORDS.search(near)
            or (ports and re.search(rf"connect(?:ing)? to \(?\S*?[:,] ?(?:{ports})\b", near))
            or (loads_weights and through_rpc and not any(STARTUP_LOAD_FRAMES.match(fn) for fn in functions))
            or (sig.WEIGHT_REFUSED.search(message) and WRAPPED_NAME.search(message))):
        found.add("sync")
    in_sleep = any(fn in ("wake_up", "sleep") and "vllm" in f for f, _, fn in frames)
    if in_sleep or any(SLEEP_WORDS.search(ln.body) for ln in parsed[max(0, i - SLEEP_NEAR):i]):
        found.add("sleep")
    if in_sleep:
        found.add("in_sleep")  # raised inside vLLM's own sleep or wake-up call
    if (files and "deepspeed/" in files[-1]) or DEEPSPEED_WORDS.search(message):
        found.add("deepspeed")
    if files and (ARGS_FILES.search(files[-1]) or functions[-1] == "__post_init__"):
        found.add("args")
    return frozenset(found)


def _message_sign(body: str) -> Signature | None:
    """The signature a message shows, most specific first; of a line that wraps another error (an uncaught C++
    exception's what(), the NCCL watchdog's exception), the wrapped error's."""
    for s in sig.MESSAGE_SIGNS:
        if s.pattern.search(body):
            if s is sig.NOISE_SIGNS and (m := sig.WRAPPED.search(body)):
                inner = _message_sign(body[m.end():])
                return inner if inner is not None and inner.role != NOISE else s
            return s
    return sig.PROCESS_DIED if sig.PROCESS_DIED.pattern.search(body) else None


def _refine(found: Signature | None, exception: bool, context: frozenset[str], message: str,
            klass: str = "") -> Signature | None:
    """What the error is, given where it was raised: an NCCL failure during the weight sync is the weight sync's,
    a crash at vLLM's sleep/wake is sleep mode's; an exception no message signature names is named by its class
    where the class tells (``klass``: the innermost class the line names), else classed by the code it came from (a
    reward function, a save, the weight sync, DeepSpeed, the argument checks)."""
    if found is not None:
        if found.id in ("NCCL-ERROR", "DIST-INIT") and "sync" in context:
            return sig.SYNC_FAILED
        if found is sig.VLLM_METHOD:  # a worker's failed method is classed by what it was doing
            return next((s for name, s in (("sync", sig.SYNC_FAILED), ("save", sig.SAVE_FAILED)) if name in context),
                        found)
        if (found.id == "NATIVE-CRASH" and "sleep" in context) or (found.id == "PROCESS-DIED" and "in_sleep" in context):
            return sig.SLEEP_CRASH  # a crash right after vLLM slept or woke; a process that died inside that call
        return found
    if not exception:
        return None
    if klass in sig.EXCEPTION_CLASSES:
        return _refine(sig.EXCEPTION_CLASSES[klass], True, context, message)
    if "reward" in context:
        return sig.REWARD_FAILED
    late = next((s for s in sig.LATE_SIGNS if s.pattern.search(message)), None)
    if "sync" in context and (late is sig.VERSION_MISMATCH or sig.WEIGHT_REFUSED.search(message)):
        return sig.SYNC_MISFIT  # the weight sync's call into vLLM's loader does not fit the installed vLLM
    if late:
        return late
    for name, s in (("save", sig.SAVE_FAILED), ("sync", sig.SYNC_FAILED), ("deepspeed", sig.DEEPSPEED_ERROR),
                    ("args", sig.ARGS_INVALID)):
        if name in context:
            return s
    return sig.TRACEBACK


def _nccl_detail(parsed: list[Line], i: int) -> list[str]:
    """NCCL's 'Last error:' and the line after it, printed right after torch's NCCL error line."""
    for k in range(i + 1, min(i + 5, len(parsed))):
        if parsed[k].body.strip() == "Last error:" and k + 1 < len(parsed):
            return [parsed[j].text for j in range(i + 1, k + 2)]
    return []


def scan(log: str, lines: list[str], group_ports: set[int] = frozenset()) -> list[Event]:
    """Every error line of one log, in order."""
    parsed = [parse(line) for line in lines]
    skip = args_dump_lines(lines)
    events: list[Event] = []
    announced: list[Event] = []  # signatures on WARNING lines: kept where a failure follows
    heads: Event | None = None   # the last line that heads the traceback printed after it
    for i, ln in enumerate(parsed):
        body = ln.body
        if i in skip or ln.level == "info" or not body.strip() or PY_WARNING.match(body):
            continue
        if FRAME.match(body):
            if _starts_frames(parsed, i) and (event := _frames_event(log, parsed, i, i, group_ports)):
                events.append(event)  # a traceback whose 'Traceback' line the excerpt does not show
            continue
        if body[:1] in (" ", "\t") and i and FRAME.match(parsed[i - 1].body):
            if RAISE.match(body) and _innermost_of_cut(parsed, i):
                events.append(_raised_in_code(log, parsed, i, group_ports))
            continue  # the code line of a frame (it may quote an error message)
        warning = ln.level == "warning"
        exc = EXCEPTION.match(body) if not warning else None
        if exc and _chained_on(parsed, i):
            continue  # told with the exception chained after it
        if exc and exc["inner"] and _remote_exception_follows(parsed, i, exc["inner"]):
            continue  # Ray's header of a remote task's traceback: its exception line follows and tells
        found = _message_sign(body) if not IPY_HEADER.match(body) else None  # the type again at the end
        if warning and (found is None or found.role not in (CAUSE, CONSEQUENCE)):
            continue
        if exc:
            event = _raised(log, parsed, i, found, group_ports)
        elif found:
            native = _native_frames(parsed, i) if found is sig.NATIVE_CRASH else []
            context = _context(parsed, i, [], native, body, group_ports)
            event = Event(log, i, ln, _refine(found, False, context, body), False, [], context,
                          before=_before(parsed, i))
        elif TB_START in body and (event := _frames_event(log, parsed, i, i + 1, group_ports)):
            if heads and _heads_this(parsed, heads.index, i):
                heads.traceback = event.traceback or _block(parsed, i, _frame_run(parsed, i + 1, ln.rank)[1])
                continue  # the traceback the line before it announced
        else:
            continue
        if found is not None and found.heads:
            heads = event
        if event.sig.id in ("NCCL-ERROR", "WEIGHT-SYNC-FAILED"):
            event.detail = _nccl_detail(parsed, event.index)
        (announced if warning else events).append(event)
    return _merge_details(_with_announcements(_profiled(parsed, events), announced, lines))


def _heads_this(parsed: list[Line], at: int, i: int) -> bool:
    """Whether the traceback starting at ``parsed[i]`` is the one the line ``parsed[at]`` heads: the next line of
    its process."""
    return 0 < i - at <= 2 and parsed[i].process == parsed[at].process and _same_rank(parsed[i], parsed[at].rank)


def _block(parsed: list[Line], first: int, stop: int | None, leave: int | None = None) -> list[str]:
    """A traceback's lines of its rank from ``parsed[first]`` to the line that ends it (``leave``: one left out)."""
    rank = parsed[first].rank
    end = stop if stop is not None else min(len(parsed), first + MAX_TRACEBACK)
    return [_unglued(parsed[k]) for k in range(first, end) if _same_rank(parsed[k], rank) and k != leave]


def _frames_event(log: str, parsed: list[Line], first: int, start: int, group_ports) -> Event | None:
    """The event of a traceback whose frames start at ``parsed[start]`` (``first``: its 'Traceback' line, or its
    first frame when the excerpt begins inside it) and that never reaches a clean exception line: the exception
    line the paste mangled, read for what it says; a cut traceback inside vLLM's KV-cache set-up; else a traceback
    without its exception line (a launcher's own is noise). None when its exception line follows."""
    rank = parsed[first].rank
    frames, stop = _frame_run(parsed, start, rank)
    if stop is not None and EXCEPTION.match(parsed[stop].body):
        return None
    if frames and all(LAUNCHER_FILES.search(f) for f, _, _ in frames):
        return Event(log, first, parsed[first], sig.NOISE_SIGNS, False, frames, before=_before(parsed, first))
    if (k := _mangled(parsed, start, stop)) is not None:
        m = EXCEPTION_INSIDE.search(parsed[k].body.strip())
        message, klass = (m["message"] or "").strip(), m["type"].rsplit(".", 1)[-1]
        context = _context(parsed, k, frames, [], message, group_ports, first)
        found = _refine(_message_sign(message), True, context, message, klass)
        return Event(log, k, parsed[k], found, True, frames, context, [], _block(parsed, first, stop, k))
    if _in_kv_setup(frames) and (k := _innermost_code(parsed, start, stop)) is not None:
        if RAISE.match(parsed[k].body):
            return None  # the raise statement says what it raised (_raised_in_code)
        return Event(log, k, parsed[k], sig.KV_SETUP_CUT, False, frames, frozenset({"kv"}), [],
                     _block(parsed, first, stop, k))
    return Event(log, first, parsed[first], sig.TRACEBACK_CUT, False, frames, before=_before(parsed, first))


PROFILE_REACH = 200  # lines before a failure in which vLLM's start-up profile counts


def _traceback_start(parsed: list[Line], i: int) -> int:
    """The first line of the traceback ``parsed[i]`` belongs to: its 'Traceback' line, or its first frame."""
    rank = parsed[i].rank
    while i > 0:
        k = next((k for k in range(i - 1, -1, -1) if _same_rank(parsed[k], rank)), None)
        if k is None or TB_START in parsed[i].body:
            break
        body = parsed[k].body
        if not (TB_START in body or frame_of(body) or (_continues(body) and body.strip())):
            break
        i = k
    return i


def _profiled(parsed: list[Line], events: list[Event]) -> list[Event]:
    """A traceback cut before its exception line (an engine that died as it started) that follows an impossible
    memory profile of vLLM in the same process, with no progress in between, is that profile's failure: the
    profile line that shows it is the evidence, the traceback follows."""
    out = []
    for e in events:
        if e.sig not in (sig.TRACEBACK_CUT, sig.KV_SETUP_CUT):
            out.append(e)
            continue
        start = _traceback_start(parsed, e.index)
        before = [k for k in range(max(0, start - PROFILE_REACH), start)
                  if parsed[k].process == parsed[e.index].process]
        progress = [k for k in before if PROGRESS.search(parsed[k].raw)]
        before = [k for k in before if not progress or k > progress[-1]]
        found = vllm_profile.profile([parsed[k].body for k in before], before)
        problem = found.problem()
        if problem is None:
            out.append(e)
            continue
        at = problem[1]
        shown = sorted(set(found.lines.values()) - {at})
        block = e.traceback or _block(parsed, e.index, _frame_run(parsed, e.index + 1, parsed[e.index].rank)[1])
        out.append(Event(e.log, at, parsed[at], sig.VLLM_PROFILE, False, e.frames, e.context | {"profile"},
                         [parsed[k].text for k in shown], block))
    return out


def _with_announcements(events: list[Event], announced: list[Event], lines: list[str]) -> list[Event]:
    """The events, with the warnings that count: a signature's own warning (``warning_level``), and a warning that
    announced a failure."""
    kept = [w for w in announced if w.sig.warning_level or _announces(w, events, lines)]
    return sorted(events + kept, key=lambda e: e.index) if kept else events


def _announces(warning: Event, events: list[Event], lines: list[str]) -> bool:
    """Whether an error line follows the warning within ANNOUNCE_REACH lines with no sign of progress in between
    (a warning the run went on after was not the failure's first sign)."""
    after = next((e.index for e in events if e.index > warning.index), None)
    return (after is not None and after - warning.index <= ANNOUNCE_REACH
            and not any(PROGRESS.search(line) for line in lines[warning.index + 1:after]))


def _before(parsed: list[Line], i: int) -> list[str]:
    return [parsed[k].text for k in range(max(0, i - 3), i) if parsed[k].body.strip()]


def _unglued(ln: Line) -> str:
    """A traceback's first line without what was printed before it on the same line (a tqdm bar)."""
    if TB_START not in ln.raw:
        return ln.text
    prefix = f"[rank{ln.rank}]: " if ln.raw.startswith(f"[rank{ln.rank}]:") else ""
    return prefix + ln.raw[ln.raw.index(TB_START):]


def _raised(log: str, parsed: list[Line], i: int, found: Signature | None, group_ports) -> Event:
    """The event of a raised exception: of its chain, the first exception a message signature names (the cause
    a later one wraps), else the last; classed by its message and where it was raised."""
    span, chained, frames = _traceback(parsed, i)
    at = i
    for k in chained:
        inner = _message_sign(parsed[k].body)
        if inner is not None and inner.role != NOISE:
            found, at = inner, k
            break
    exc = EXCEPTION.match(parsed[at].body)
    message, klass = exc["message"] or "", (exc["inner"] or exc["type"]).rsplit(".", 1)[-1]
    remote: list[int] = []
    if exc["inner"] and at == i:  # Ray's header of a remote task's traceback that the excerpt cuts: its frames
        remote_frames, stop = _frame_run(parsed, i + 1, parsed[i].rank)  # tell where the task was
        frames = frames + remote_frames
        end = stop if stop is not None else min(len(parsed), i + 1 + MAX_TRACEBACK)
        remote = [k for k in range(i + 1, end) if _same_rank(parsed[k], parsed[i].rank)]
    context = _context(parsed, at, frames, [], message, group_ports, span[0] if span else None)
    block = [_unglued(parsed[k]) for k in span + [i] + remote if k != at or at != i]
    return Event(log, at, parsed[at], _refine(found, True, context, message, klass), True, frames, context, [],
                 block)


def _raised_in_code(log: str, parsed: list[Line], i: int, group_ports) -> Event:
    """The event of an exception the excerpt shows only in the code line that raises it (its traceback is cut
    before the exception line): the message written in the raise statement — with the lines of it Python 3.13
    prints when the statement spans several — says what it is."""
    span, _, frames = _traceback(parsed, i)
    raised = RAISE.match(parsed[i].body)
    rest = []
    for ln in parsed[i + 1:i + NEAR]:
        if not ln.body.strip() or not _continues(ln.body) or CARET.match(ln.body):
            break
        rest.append(ln.body.strip())
    code = raised["quote"] + raised["message"] + " ".join(rest)
    literals = [m[2] for m in STRING_LITERAL.finditer(code)]  # implicit concatenation: "a " "b" is "a b"
    message = "".join(literals) or raised["message"]
    klass = raised["type"].rsplit(".", 1)[-1]
    context = _context(parsed, i, frames, [], message, group_ports, span[0] if span else None)
    found = _refine(_message_sign(message), True, context, message, klass)
    return Event(log, i, parsed[i], found, True, frames, context, [], [_unglued(parsed[k]) for k in span])


def _merge_details(events: list[Event]) -> list[Event]:
    """An NCCL error whose 'Last error:' line names a more specific cause (two ranks on one GPU) is that cause."""
    detailed = {(e.log, e.index) for e in events if e.sig.id == "GPU-DUPLICATE"}
    return [e for e in events
            if not (e.detail and any((e.log, e.index + k) in detailed for k in range(1, len(e.detail) + 1)))]


ROLE_ORDER = {CAUSE: 0, REPORT: 1, CONSEQUENCE: 1, NOISE: 2}


def first_failure(events: list[Event]) -> Event | None:
    """The error one log shows first: its first cause; else its first consequence or death report (a collective
    timing out, a dead engine, torchrun reporting a rank's death: whichever came first, the rest follow from it);
    else the noise a failure leaves."""
    return min(events, key=lambda e: (ROLE_ORDER[e.sig.role], e.index), default=None)
