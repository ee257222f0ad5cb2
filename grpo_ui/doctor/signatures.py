"""What the doctor knows of failures: each kind of error a GRPO run meets (torch, CUDA, NCCL, vLLM, DeepSpeed,
torch.distributed, ms-swift, TRL, Python), the message formats that give it away, what it means and the fix.

A signature's ``role`` says how it stands to other errors: a ``cause`` is a failure in its own right; a
``consequence`` usually follows another process's failure (a collective timing out because a peer died, a vLLM
engine reported dead after its worker crashed, a trainer that cannot reach a dead rollout server) and is the
diagnosis only when nothing else failed first; a ``report`` is a launcher announcing that a process died (torchrun's
exit code, Ray's dead worker) and names who; ``noise`` is what a failure drags behind it (SIGTERM to the other
ranks, ChildFailedError, a peer closing its socket) and is never the diagnosis while anything else is there.
Signatures with a ``pattern`` are recognised by their message, anywhere in a log; the others by where an exception
was raised (events.py decides: a reward function, a checkpoint save, the weight sync to vLLM, DeepSpeed).

The patterns are the tools' own wordings, read in their sources (the comment beside each names the file and
function); where a message changed across versions, each version's wording is there. A line printed at WARNING level
counts only as the announcement of a failure that follows it (events.py), except for signatures with
``warning_level`` (a warning that is the failure's only sign).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

CAUSE, CONSEQUENCE, REPORT, NOISE = "cause", "consequence", "report", "noise"


@dataclass(frozen=True)
class Signature:
    id: str
    title: str
    explanation: str
    fix: str
    pattern: re.Pattern | None = None  # on a line's message; None: recognised by context only
    role: str = CAUSE
    severity: str = "error"
    warning_level: bool = False  # counts at WARNING level by itself (vLLM warns of a prompt it rejects)
    fatal: bool = False  # ends the process that prints it (an exception line always does)
    heads: bool = False  # printed right before the traceback of the error it reports (logger.exception's line)


def _rx(*alternatives: str) -> re.Pattern:
    return re.compile("|".join(alternatives))


NOISE_SIGNS = Signature(
    "NOISE", "What follows a failure", "", "",
    _rx(r"closing signal SIGTERM",                  # torch elastic multiprocessing/api.py: _close
        r"ChildFailedError",                        # torch elastic multiprocessing/errors: the launcher's summary
        r"Connection (?:closed|reset) by peer", r"Broken pipe",   # gloo / sockets: a peer went away
        r"remote worker crashing",                  # gloo pair.cc's hint
        r"NCCL communicator was aborted",           # ProcessGroupNCCL: WorkNCCL::checkAndSetException
        r"terminate called after throwing",         # libstdc++: an uncaught C++ exception (what() follows)
        r"Process group watchdog thread terminated",  # ProcessGroupNCCL: ncclCommWatchdog / Watchdog::run
        r"^(?:\w+\.)*(?:SystemExit|KeyboardInterrupt)\b",
        r"Received \d+ death signal",                # torch elastic agent: _invoke_run's signal handler
        r"SignalException: Process \d+ got signal"),  # torch elastic multiprocessing/api.py: _terminate_process_handler
    NOISE)
# What a wrapper line carries after these words is the error itself: the C++ exception's what() (libstdc++),
# the watchdog's exception (ProcessGroupNCCL's "watchdog thread terminated with exception: <e.what()>"), the reason
# an aborted communicator gives (WorkNCCL::checkAndSetException: "Original reason for failure was: …").
WRAPPED = re.compile(r"thread terminated with exception: |\bwhat\(\):\s+|Original reason for failure was:\s*")

PROCESS_DIED = Signature(
    "PROCESS-DIED", "A process died", "A launcher reports that one of its processes ended.", "",
    _rx(r"failed \(exitcode: -?\d+\) local_rank: \d+",  # torch elastic multiprocessing/api.py: the agent's report
        r"A worker died or was killed while executing a task",  # Ray raylet
        r"actor died unexpectedly before finishing this task",  # Ray ActorDiedError
        r"^Killed\b|line \d+: +\d+ Killed\b",              # the shell reporting SIGKILL (the OOM killer)
        r"srun: error: \S+: tasks? [\d,-]+: (?:Killed|Exited with exit code [1-9]|Aborted|Segmentation fault)",  # Slurm
        r"Worker proc \S+ died unexpectedly",                   # vLLM v1 multiproc_executor: monitor_workers
        r"WorkerProc (?:died|hit an exception|failed to start)"),  # vLLM v1 multiproc_executor: WorkerProc
    REPORT, fatal=True)

NATIVE_CRASH = Signature(
    "NATIVE-CRASH", "A process crashed outside Python",
    "A process died of a signal (segmentation fault, abort) or a fatal error of the Python interpreter: a bug "
    "or a mismatch in compiled code (vLLM, NCCL, flash-attn, torch extensions), often at a phase switch.",
    "Note what the process was doing (the lines before the crash); update vLLM / flash-attn / DeepSpeed to the "
    "versions the ms-swift release recommends, and if it happens at vLLM's sleep/wake try sleep_level 0 or "
    "offload off.",
    _rx(r"Segmentation fault", r"Caught signal \d+", r"Segfault encountered", r"Fatal Python error",
        r"\*\*\* (?:SIGSEGV|SIGABRT|SIGBUS|SIGFPE|SIGILL)", r"Aborted \(core dumped\)", r"double free or corruption",
        r"free\(\): invalid pointer", r"Bus error"), fatal=True)

# Recognised by the message, most specific first; the first that matches a line names it.
MESSAGE_SIGNS = [
    NOISE_SIGNS,
    Signature(
        "KV-CACHE-TOO-SMALL", "vLLM has no room for its KV cache",
        "After loading the weights vLLM keeps gpu_memory_utilization × the GPU's memory for itself; what is left "
        "for the KV cache is not enough for one sequence of max_model_len tokens, so the engine refuses to start.",
        "Raise vllm_gpu_memory_utilization (in colocate mode the trainer needs the rest: check the memory estimate), "
        "or lower vllm_max_model_len to the prompt plus completion length the run needs (max_length + "
        "max_completion_length), or give vLLM more GPUs (vllm_tensor_parallel_size).",
        _rx(r"No available memory for the cache blocks",  # vLLM v0 worker / v1 kv_cache_utils: check_enough_kv_cache_memory
            r"larger than the maximum number of tokens that can be stored in KV cache",  # vLLM v0 _verify_max_model_len
            r"KV cache is needed, which is larger than the available KV cache memory",  # vLLM v1 kv_cache_utils
            r"Insufficient memory for KV cache",
            r"Cannot auto-fit max_model_len: not enough GPU memory"),  # vLLM v1 kv_cache_utils: auto-fit
        fatal=True),
    VLLM_PROFILE := Signature(
        "VLLM-MEMORY-PROFILE", "vLLM's memory profile went wrong",
        "vLLM sizes its KV cache from a profile of the GPU it takes as it starts: the weights it loaded, the peak "
        "of a trial forward pass and what gpu_memory_utilization × the card leaves. That profile cannot be right "
        "here — weights measured as 0 GiB, memory another process took or freed while vLLM measured, or nothing "
        "left for the cache — so the engine fails as it starts. It happens when vLLM shares its GPU with a trainer "
        "(colocate mode), above all under DeepSpeed ZeRO-3, whose partitioning can take over the parameters vLLM "
        "creates.",
        "Leave the trainer room and give vLLM a settled card: a lower vllm_gpu_memory_utilization (0.9, vLLM's own "
        "default, assumes the card is vLLM's alone), ZeRO-2 instead of ZeRO-3 while testing, or a rollout server "
        "on GPUs of its own (vllm_mode server); update TRL/ms-swift and vLLM to the versions the ms-swift release "
        "recommends.",
        _rx(r"Error in memory profiling"),             # vLLM worker: determine_num_available_blocks' assertion
        fatal=True),
    Signature(
        "HOST-OOM", "Out of host memory",
        "The node's own memory (RAM, not the GPU's) ran out and a process was killed for it: Ray's memory monitor "
        "kills the most recently scheduled worker once the node passes its threshold (0.95 by default), the Linux "
        "OOM killer kills the largest process. Loading every model of the run on the CPU first, offloading "
        "(ZeRO offload, offload_model/offload_optimizer, vLLM's swap and sleep mode) and many data-loader "
        "workers all take host memory.",
        "Give the processes less to hold on the host: fewer models loaded on one node at a time (colocate fewer "
        "roles, or load them one after the other), less offload, dataloader_num_workers down, or a node with more "
        "memory; with Ray, RAY_memory_usage_threshold only moves the line. dmesg on that host names what the OOM "
        "killer took.",
        _rx(r"exceeds the memory usage threshold of [\d.]+\. Ray killed this worker",  # Ray memory monitor
            r"killed due to the node running low on memory",  # Ray: OutOfMemoryError / a worker's exit detail
            r"Out of memory: Kill(?:ed)? process \d+",          # the Linux kernel's OOM killer (dmesg)
            r"Detected \d+ oom[-_]kill events?"),              # slurmstepd: a step's cgroup OOM
        fatal=True),
    Signature(
        "OOM", "Out of GPU memory", "A process asked the GPU for more memory than was free.",
        "Open the memory estimate on the Configure page and apply one of its make-it-fit changes (lower "
        "vllm_gpu_memory_utilization, sleep_level 1, ZeRO-3, a smaller micro-batch, gradient checkpointing); "
        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True helps when much memory is reserved but unallocated.",
        _rx(r"CUDA out of memory",                     # torch c10/cuda CUDACachingAllocator
            r"OutOfMemoryError", r"CUDA [Ee]rror: out of memory", r"CUBLAS_STATUS_ALLOC_FAILED",
            r"cudaErrorMemoryAllocation\b", r"HIP out of memory", r"NPU out of memory",
            r"Cuda failure '?out of memory",            # NCCL checks.h CUDACHECK
            r"Free memory on device .* is less than desired GPU memory utilization"),  # vLLM worker: startup check
        fatal=True),
    Signature(
        "MAX-MODEL-LEN", "A prompt is longer than vLLM's max_model_len",
        "vLLM rejects a request whose prompt (plus the tokens asked for) does not fit max_model_len; the trainer "
        "then gets no completion for it and fails or trains on nothing.",
        "Make vllm_max_model_len at least the longest prompt plus max_completion_length (on a rollout server: "
        "--vllm_max_model_len of `swift rollout` / --max-model-len of `vllm serve`), or cut prompts shorter with "
        "max_length / max_prompt_length, or drop over-long rows from the dataset.",
        _rx(r"is too long and exceeds limit of \d+",         # vLLM v0 scheduler: _schedule_prefills (a warning)
            r"is longer than the maximum model length of \d+",  # vLLM v1 processor: _validate_model_input
            r"maximum context length is \d+ tokens",            # vLLM OpenAI server: _validate_input
            r"'max_tokens' or 'max_completion_tokens' is too large",  # vLLM OpenAI server (newer)
            r"exceeds the max_model_len",
            r"User-specified max_model_len \(\d+\) is greater than"),  # vLLM config: _get_and_verify_max_len
        warning_level=True),
    NATIVE_CRASH,
    Signature(
        "NAN-METRICS", "NaN/inf in training",
        "Loss, gradients or rewards are no longer finite numbers: once they are, every later update is garbage "
        "(and sampling from the model fails).",
        "Resume from the last finite checkpoint with a lower learning_rate (warmup_ratio helps), keep max_grad_norm "
        "on, use bf16 rather than fp16, and check that reward functions never return NaN or inf.",
        _rx(r"contains either `inf`, `nan`", r"oss (?:is|became) (?:nan|NaN|inf)\b",
            r"returned nan values in its \d+\w* output")),  # torch autograd engine: validate_outputs (anomaly mode)
    Signature(
        "GPU-DUPLICATE", "Two ranks on the same GPU",
        "NCCL found two ranks of one communicator on the same CUDA device: the ranks' device mapping is wrong "
        "(CUDA_VISIBLE_DEVICES, LOCAL_RANK, or a placement that gave two workers one GPU).",
        "Give each rank its own GPU: check CUDA_VISIBLE_DEVICES and nproc_per_node on each node (as many GPUs as "
        "processes), and that nothing else (a rollout server, a second job) is placed on the trainer's GPUs.",
        _rx(r"Duplicate GPU detected"), fatal=True),
    Signature(
        "NCCL-TIMEOUT", "NCCL collective timed out",
        "A collective operation waited longer than its timeout: a rank stopped taking part (it crashed, hangs, or "
        "the network between nodes dropped), and torch took the waiting ranks down.",
        "Find the rank or node that went quiet first (the one missing from the timed-out ranks, or the first error "
        "in the other logs); check that every node runs identical arguments, that ports are open between nodes "
        "(and to rollout servers on 51216+i), and raise ddp_timeout when long rollouts are legitimate.",
        # torch ProcessGroupNCCL.cpp, across versions: WorkNCCL::checkTimeout (1.x-2.x), watchdogHandler (2.2-2.3),
        # getNCCLWatchdogTimeoutErrorMsg (2.4+, "from this local rank" or "from rank N"), the heartbeat monitor
        # (2.2+: the watchdog itself hung in a CUDA/NCCL call)
        _rx(r"Watchdog caught collective operation timeout", r"Timeout at NCCL work",
            r"Received a dump signal due to a collective timeout from",
            r"ProcessGroupNCCL's watchdog got stuck for \d+ seconds", r"Heartbeat monitor timed out",
            r"ProcessGroupNCCL.*timed out", r"NCCL.*operations? (?:has|have) (?:failed or )?timed out"),
        CONSEQUENCE, fatal=True),
    NCCL_ERROR := Signature(
        "NCCL-ERROR", "NCCL error",
        "NCCL, which moves tensors between the GPUs and nodes, failed: an unhandled system error is usually the "
        "network (a blocked port, the wrong interface, InfiniBand set-up), an unhandled CUDA error a GPU fault or "
        "a driver/NCCL mismatch, invalid usage a wrong rank/device set-up.",
        "Rerun with NCCL_DEBUG=INFO (and NCCL_DEBUG_SUBSYS=INIT,NET) to see the failing call; set NCCL_SOCKET_IFNAME "
        "to the interface the nodes reach each other on, try NCCL_IB_DISABLE=1 to rule InfiniBand out, and check "
        "that every node has the same torch/NCCL versions (preflight compares them).",
        _rx(r"NCCL [Ee]rror",  # torch NCCLUtils.h C10D_NCCL_CHECK ("NCCL error in:"; 1.x: "NCCL Error 2:"), vLLM pynccl
            r"\bnccl(?:UnhandledCudaError|SystemError|InternalError|RemoteError|InvalidUsage|InvalidArgument)\b",
            r"NCCL WARN ",                                # NCCL debug.cc: WARN is NCCL's level for fatal errors
            r"NCCL failure",
            r"Failed to load NCCL library",               # vLLM pynccl_wrapper: NCCLLibrary.__init__
            # the InfiniBand driver (rdma-core providers/mlx5/cq.c: mlx5_dump_error_cqe): a work request NCCL
            # posted failed on the wire (a link, a port or a peer gone), the CQE's words follow in hex
            r"mlx\d: \S+: got completion with error")),
    Signature(
        "CUDA-ERROR", "CUDA error",
        "A GPU kernel failed. A device-side assert is almost always an index out of range (a token id beyond the "
        "vocabulary or the embedding size, a label outside the classes); an illegal memory access a bug in a kernel "
        "(attention, vLLM's custom kernels) or a faulty GPU. CUDA reports these late, so the Python frame shown may "
        "not be the one that failed.",
        "For a device-side assert, check the tokenizer and model agree (vocab size, added special tokens, "
        "pad_token_id); rerun with CUDA_LAUNCH_BLOCKING=1 to see the real frame. For an illegal memory access, "
        "update vLLM/flash-attn to the versions the ms-swift release recommends, try another attention backend "
        "(VLLM_ATTENTION_BACKEND), and check the GPU with nvidia-smi -q (Xid errors, ECC).",
        # "CUDA error: …" is torch's C10_CUDA_CHECK; "CUDA Error: … at file:line" is vLLM's sleep-mode allocator's
        # (csrc/cumem_allocator.cpp: CUDA_CHECK, cuGetErrorString's words)
        _rx(r"device-side assert", r"illegal memory access", r"Assertion `.*` failed", r"CUDA [Ee]rror: (?!out of memory)",
            r"CUBLAS_STATUS_(?!SUCCESS|ALLOC_FAILED)\w+", r"CUDNN_STATUS_(?!SUCCESS)\w+", r"cuDNN error",
            r"misaligned address", r"unspecified launch failure", r"uncorrectable ECC error"), fatal=True),
    Signature(
        "DISK-FULL", "Disk full", "A write failed because the file system is full (often while saving a checkpoint).",
        "Free space on output_dir's file system or move output_dir to a larger volume; save_total_limit keeps only "
        "the last N checkpoints, save_only_model skips the optimizer states.",
        _rx(r"No space left on device", r"os error 28", r"Errno 28", r"Disk quota exceeded")),
    Signature(
        "CHECKPOINT-INCOMPLETE", "A checkpoint file could not be written (or read back)",
        "PyTorch's serializer (the zip writer behind torch.save, which checkpoint saves use) failed on a checkpoint "
        "file: a write the file system refused or cut short (full, over quota, a network file system dropping a "
        "write, the file removed underneath), or — when reading — a file a save left incomplete. The checkpoint is "
        "partial and cannot be resumed from.",
        "Check free space and quota on output_dir's file system (df -h, and the network file system's own limits), "
        "save to a local or more reliable volume, keep fewer checkpoints (save_total_limit, save_only_model); "
        "resume from the last checkpoint that was written completely.",
        _rx(r"\[enforce fail at inline_container\.cc:\d+\]",     # caffe2/serialize/inline_container.cc (c10 enforce)
            r"PytorchStreamWriter failed", r"PytorchStreamReader failed reading",
            r"unexpected pos \d+ vs \d+")),
    Signature(
        "DIST-INIT", "The processes could not find each other",
        "torch.distributed could not set up the job: the nodes did not all reach the master address and port in "
        "time (a node that never started, a wrong MASTER_ADDR or port, a hostname that does not resolve, a "
        "firewall), or the port was taken.",
        "Check that MASTER_ADDR resolves and is reachable from every node (same port on all), that every node was "
        "started with the same nnodes and node ranks 0..N-1, that the port is free, and that no proxy variable "
        "intercepts the connection; preflight tests the master port from every node.",
        _rx(r"DistStoreError", r"DistNetworkError",      # torch c10d exception classes
            r"Rendezvous\w*(?:Error|Timeout|Closed)",      # torch elastic rendezvous/api.py
            r"can't resolve '(?!\(null\))[^']+'", r"Name or service not known", r"Temporary failure in name resolution",
            r"network addresses of \(.*\) cannot be retrieved",  # c10d socket.cpp: SocketConnectOp (gai error)
            r"server socket has failed to (?:listen|bind)", r"EADDRINUSE|ddress already in use",
            r"client socket has timed out after \d+\w* while trying to connect",  # c10d socket.cpp: throwTimeoutError
            r"client socket has failed to connect to any network address",  # c10d socket.cpp: SocketConnectOp::run
            r"waitForInput: socket .* timed out after \d+ms",   # c10d socket.cpp: SocketImpl::waitForInput (a warning)
            r"wait timeout after \d+ms",                     # c10d TCPStore: doWait
            r"Timed out after \d+ seconds waiting for clients",  # c10d TCPStore: waitForWorkers
            r"retrieving ncclUniqueId from \[\d+\] via c10d key-value store")),  # ProcessGroupNCCL: broadcastUniqueNCCLID
    Signature(
        "VLLM-ENGINE-DEAD", "The vLLM engine died",
        "vLLM's engine process (or its background loop) stopped, and every request after that fails. The reason "
        "is printed before this line by the engine or one of its workers (a CUDA error, out of memory, a crash) — "
        "or, when nothing is there, in the engine's own log.",
        "Look for the engine's first error above (or in the rollout server's log); the usual causes are GPU "
        "memory (lower gpu_memory_utilization / max_num_seqs), a CUDA error in a kernel (update vLLM to the version "
        "the ms-swift release recommends, try enforce_eager), or the process being killed.",
        _rx(r"EngineDeadError",                          # vLLM v0 AsyncEngineDeadError, v1 v1/engine/exceptions.py
            r"Engine(?:Core)? (?:is )?(?:already )?dead", r"MQLLMEngine is already dead",
            r"Engine background task failed", r"Background loop has errored already",  # vLLM v0 async_llm_engine
            r"(?:Background|Engine) loop is not running",  # vLLM v0 AsyncEngineDeadError / MQEngineDeadError
            r"EngineCore encountered an issue",            # vLLM v1 EngineDeadError's message
            r"Engine core proc \S+ died unexpectedly",      # vLLM v1 core_client.py: the engine monitor
            r"Engine core initialization failed",          # vLLM v1 engine/utils.py: wait_for_engine_startup
            r"Engine process failed to start", r"EngineCore failed to start"),
        CONSEQUENCE, fatal=True),
    Signature(
        "VLLM-ENGINE-DEAD", "The vLLM engine core stopped on an error",
        "vLLM's engine core process caught an exception in its busy loop and stopped: every request after this "
        "fails (EngineDeadError). Its traceback is printed right after this line; the excerpt ends before the "
        "exception that says why.",
        "Find the rest of that traceback in the engine's (or rollout server's) log: its last line is the cause. "
        "The usual ones are GPU memory (lower gpu_memory_utilization / max_num_seqs), a CUDA error in a kernel "
        "(update vLLM to the version the ms-swift release recommends, try enforce_eager) or a bad request.",
        _rx(r"EngineCore encountered a fatal error"),    # vLLM v1 engine/core.py: run_engine_core's logger.exception
        CONSEQUENCE, fatal=True, heads=True),
    Signature(
        "ROLLOUT-UNREACHABLE", "Rollout server unreachable", "The trainer cannot reach a rollout server.",
        "Check the rollout node's log (a crash there comes first) and that its HTTP port and group port (51216+i) "
        "are reachable from trainer rank 0; unset http_proxy/https_proxy.",
        _rx(r"Servers not reachable",                   # ms-swift rlhf_trainers/vllm_client.py: check_health
            r"did not answer /health/", r"Failed to connect to vLLM server",
            r"[Ss]erver (?:is )?not (?:up|reachable) after \d+",
            r"vLLM server can't be reached at \S+ after",     # TRL extras/vllm_client.py: check_server
            r"Max retries exceeded with url: /(?:infer|generate|chat|health|get_world_size|init_communicator|"
            r"update_\w+|close_communicator)/"),
        CONSEQUENCE),
    Signature(
        "RIGHT-PADDING", "Batched generation with right padding",
        "The prompts of a generation batch were padded on the right, so a decoder-only model continues after pad "
        "tokens: the completions are garbage and score no reward. transformers refuses it outright for "
        "flash-attention (the ValueError) and only warns in generate() otherwise.",
        "Pad on the left for generation: tokenizer.padding_side = 'left' (or padding_side='left' when loading the "
        "tokenizer) in the code that tokenizes the prompts — a custom trainer, reward model or evaluation loop; "
        "TRL and ms-swift set it themselves, so a right-padded batch points at code of your own or an old version.",
        _rx(r"batched generation with padding_side='right'"),  # transformers models/*/modeling_*: flash-attention
        fatal=True),
    Signature(
        "RIGHT-PADDING", "Generation on right-padded prompts",
        "transformers' generate() found pad tokens at the end of the prompts of a batch: a decoder-only model then "
        "continues after the padding, so those completions are garbage and score no reward.",
        "Pad on the left for generation: tokenizer.padding_side = 'left' (or padding_side='left' when loading the "
        "tokenizer) in the code that tokenizes the prompts; TRL and ms-swift set it for their own generation.",
        _rx(r"right-padding was detected"),                    # transformers generation/utils.py: generate()
        severity="warning", warning_level=True),
    VLLM_METHOD := Signature(
        "VLLM-WORKER-FAILED", "A vLLM worker failed in a call from its engine",
        "One of vLLM's workers raised an exception in a method its engine (or the trainer, through it) called; "
        "the traceback printed after this line ends in the exception that says why.",
        "Find the end of that traceback (the worker's log): its last line is the cause. The method named says "
        "what was being done (update_weight: the weight sync; init_device, load_model: start-up).",
        _rx(r"Error executing method '?\w+'?\. This might cause deadlock"),  # vLLM worker_base.py: execute_method
        CONSEQUENCE, heads=True),
    Signature(
        "PACKAGE-MISSING", "A package is missing in the environment",
        "The program could not import a package this configuration needs.",
        "Install the missing package (or turn the feature off) in the environment of every node; preflight "
        "compares every node's packages with what the ms-swift version there requires.",
        _rx(r"^(?:ImportError|ModuleNotFoundError): (?!cannot import name)", r"No module named",
            r" is not installed\b")),
]

# Recognised by where they were raised (events.py), or by a message that only means something there.
REWARD_FAILED = Signature(
    "REWARD-FUNC-FAILED", "A reward function raised an exception",
    "The trainer calls the reward functions on every batch and does not catch their errors, so one failing call "
    "stops the rank and the run.",
    "Fix the reward function (its signature must take the columns the trainer passes as keyword arguments — "
    "prompts, completions and the dataset's columns — and accept **kwargs), or catch its errors and return 0.0 for "
    "that completion; run it on a few rows of the dataset before launching.")
SAVE_FAILED = Signature(
    "CHECKPOINT-INCOMPLETE", "A checkpoint save failed",
    "The run failed while writing a checkpoint: that checkpoint is partial (or missing) and cannot be resumed from.",
    "Do not resume from it; fix the error (with DeepSpeed ZeRO-3 the save gathers the full weights: check memory "
    "and that every rank reaches the save), and resume from the previous checkpoint.")
SYNC_FAILED = Signature(
    "WEIGHT-SYNC-FAILED", "The weight sync to vLLM failed",
    "After each optimizer step the trainer sends the new weights to vLLM over an NCCL group of its own (the rollout "
    "server's group port, 51216+i, in server mode); that transfer failed.",
    "Check NCCL between trainer rank 0 and the rollout GPUs: the group port reachable from the trainer, "
    "NCCL_SOCKET_IFNAME set to the interface they share, NCCL_IB_DISABLE=1 if InfiniBand is not set up between "
    "them, the same NCCL version on both sides, and no stale `swift rollout`/`vllm serve` holding the port.")
SYNC_MISFIT = Signature(
    "WEIGHT-SYNC-FAILED", "The weight sync and vLLM do not fit together",
    "After each optimizer step the trainer loads the new weights into vLLM through vLLM's own weight loader (a call "
    "into its workers). vLLM refused them: its loader does not take the arguments the trainer passes (the trainer's "
    "release and the installed vLLM, or vLLM's implementation of this model, do not match), or its model has no "
    "parameter of a name it was sent (a name with a training wrapper's prefix — torch.compile's _orig_mod., PEFT's "
    "base_model.model., FSDP's _fsdp_wrapped_module. — means the wrapped model's names were sent).",
    "Install the vLLM version the trainer's release pins, on the rollout side as on the trainer (ms-swift's "
    "requirements, `pip install trl[vllm]`); turn torch.compile off for a run that syncs weights to vLLM (or use a "
    "release that strips its prefix); a model vLLM supports only in part needs the trainer's or vLLM's fix for it.")
# vLLM refusing a weight by name (model_executor/models/utils.py: AutoWeightsLoader._load_module)
WEIGHT_REFUSED = re.compile(r"There is no module or parameter named '[^']+' in \w+")
DEEPSPEED_ERROR = Signature(
    "DEEPSPEED-ERROR", "DeepSpeed refused or failed",
    "DeepSpeed raised an error: usually a combination of settings it does not support (ZeRO-3 with a feature "
    "that needs whole parameters or gradients) or a version of DeepSpeed that does not fit the trainer.",
    "Read the message: it names the feature. Try ZeRO-2 instead of ZeRO-3, switch the conflicting option off "
    "(gradient accumulation's no_sync, a custom optimizer), or install the DeepSpeed version the ms-swift release "
    "recommends (preflight compares them).")
VERSION_MISMATCH = Signature(
    "VERSION-MISMATCH", "Library versions do not fit together",
    "One library calls another with a name or argument the installed version does not have: the versions of "
    "ms-swift/TRL, transformers, vLLM, DeepSpeed, torch or a compiled extension (flash-attn) do not match.",
    "Install the versions the trainer's release asks for (ms-swift's requirements, `pip install trl[vllm]`), in "
    "every node's environment; preflight compares each node's versions with ms-swift's compatibility table.",
    _rx(r"got an unexpected keyword argument", r"cannot import name", r"module '[\w.]+' has no attribute",
        r"'(?!NoneType)[A-Z]\w+' object has no attribute",
        r"undefined symbol", r"requires? [\w-]+ ?(?:>=|==|<=|>|<) ?\d", r"[Vv]ersion mismatch",
        r"is not compatible with (?:the installed|your|this) version"))
ARGS_INVALID = Signature(
    "ARGS-INVALID", "The run's arguments were rejected",
    "The trainer checked its arguments before starting and refused them.",
    "Change the argument the message names. For the batch check: the global batch (per_device_train_batch_size × "
    "processes × gradient_accumulation_steps, or generation_batch_size) must be a multiple of num_generations, and "
    "num_generations must be at least 2; the Configure page checks this before launch.",
    _rx(r"must be (?:evenly )?divisible by (?:the number of generations|num_generations|the global \w* ?batch size)",
        r"at least 2 generations per prompt",        # TRL grpo_config.py: __post_init__
        r"\berror: argument --", r"unrecognized arguments", r"the following arguments are required",  # argparse
        r"Some specified arguments are not used by the HfArgumentParser",  # transformers HfArgumentParser
        r"remaining_argv: \[",                       # ms-swift SwiftPipeline.__init__ (llm/base.py, pipelines/base.py)
        r"num_generations.*(?:must|should) be"))
SLEEP_CRASH = Signature(
    "VLLM-SLEEP-CRASH", "A process crashed at vLLM's sleep/wake",
    "The crash came right after vLLM fell asleep or woke up: sleep mode releases and maps back the GPU memory of "
    "weights and KV cache between rollout and training, and a bug or a memory clash there kills the process.",
    "Try sleep_level 0 (no sleep mode) or 1 instead of 2, keep offload_model/offload_optimizer off while testing, "
    "and update vLLM to the version the ms-swift release recommends (preflight compares them).", fatal=True)
KV_SETUP_CUT = Signature(
    "KV-CACHE-TOO-SMALL", "vLLM failed while setting up its KV cache",
    "The traceback is cut before its exception, but its innermost frames are vLLM's KV-cache set-up (profiling "
    "the memory, sizing the cache, allocating it): what fails there is the room for the cache — no memory left "
    "for it, or out of memory allocating it.",
    "Raise vllm_gpu_memory_utilization where the GPU is vLLM's alone (in colocate mode lower it instead: the "
    "trainer needs the rest), or lower vllm_max_model_len / max_num_seqs; the end of this traceback in the full "
    "log names the exception.", fatal=True)
TRACEBACK = Signature(
    "TRACEBACK", "A process ended with an exception", "A Python exception ended a process.",
    "Read the exception line and the last frame in your own code (shown); fix that call and run again.")

TRACEBACK_CUT = Signature(
    "TRACEBACK", "A process printed a traceback",
    "A Python traceback is in the log, but not the exception line that ends it (the log or the excerpt stops "
    "before it): what failed is not known from these lines.",
    "Find the rest of this traceback (the full log of that process): its last line names the exception.",
    role=CONSEQUENCE)
LATE_SIGNS = [VERSION_MISMATCH, ARGS_INVALID]  # messages weighed after where the exception was raised
# Exception classes that say which part failed when no message signature does: torch.distributed raises
# DistBackendError for a failure of its backend (C10D_NCCL_CHECK and ProcessGroupNCCL's checks: NCCL). Ray names the
# class a remote task raised inside its own: ``ray.exceptions.RayTaskError(DistBackendError): ray::Actor.f() …``.
EXCEPTION_CLASSES = {"DistBackendError": NCCL_ERROR}
