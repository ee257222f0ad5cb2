"""The doctor on the message formats the tools print, read from their sources (the file and function are named beside
each signature in grpo_ui/doctor/signatures.py): each version's wording of a failure, the lines that wrap another
error, warnings that announce a failure, the prefixes printers put in front, and the metric formats as people
paste them. The lines are written in those formats (with the values of public logs); the excerpts of real runs are
in tests/data/doctor_corpus and are judged by tests/test_doctor_corpus.py."""

import pytest

from grpo_ui.doctor.diagnose import diagnose
from grpo_ui.doctor.events import scan
from grpo_ui.doctor.lines import parse
from grpo_ui.doctor.metrics import parse_stdout_line, parse_table, parse_verl_line, printed_rows
from grpo_ui.doctor.snapshot import Snapshot

TORCHRUN_TRACEBACK = ["Traceback (most recent call last):",
                      '  File "/opt/conda/lib/python3.10/site-packages/torch/distributed/run.py", line 919, in main',
                      "    run(args)"]


def kinds(lines: list[str]) -> list[str]:
    return [e.sig.id for e in scan("log", lines)]


def alerts(lines: list[str], **snapshot) -> dict:
    return {a.id: a for a in diagnose(Snapshot(logs={"train.log": lines}, source="logs", excerpt=True, **snapshot))}


@pytest.mark.parametrize("line,kind", [
    # torch ProcessGroupNCCL across versions: 2.4+'s dump signal, from this rank or another; the heartbeat monitor
    ("[rank6]:[E1112 22:23:46.917 ProcessGroupNCCL.cpp:1870] [PG ID 0 PG GUID 0(default_pg) Rank 6] Received a dump "
     "signal due to a collective timeout from this local rank and we will try our best to dump the debug info.",
     "NCCL-TIMEOUT"),
    ("[rank0]:[E703 21:51:54.112 ProcessGroupNCCL.cpp:1987] [PG ID 0 PG GUID 0(default_pg) Rank 0] Received a dump "
     "signal due to a collective timeout from  rank 7 and we will try our best to dump the debug info.",
     "NCCL-TIMEOUT"),
    ("[rank1]:[E1111 17:10:53.1 ProcessGroupNCCL.cpp:1376] [PG ID 0 PG GUID 0(default_pg) Rank 1] ProcessGroupNCCL's "
     "watchdog got stuck for 480 seconds without making progress in monitoring enqueued collectives.", "NCCL-TIMEOUT"),
    # torch 1.x's NCCL error, and the NCCL error classes torch names
    ("RuntimeError: NCCL Error 2: unhandled system error", "NCCL-ERROR"),
    ("ncclInvalidUsage: This usually reflects invalid usage of NCCL library.", "NCCL-ERROR"),
    # c10d's sockets and store
    ("torch.distributed.DistStoreError: Timed out after 901 seconds waiting for clients. 1/2 clients joined.",
     "DIST-INIT"),
    ("[E228 18:45:15.7 socket.cpp:957] [c10d] The client socket has timed out after 1800s while trying to connect to "
     "(10.0.0.9, 23456).", "DIST-INIT"),
    ("torch.distributed.DistBackendError: [3] is setting up NCCL communicator and retrieving ncclUniqueId from [0] via "
     "c10d key-value store by key '0', but store->get('0') got error: Socket Timeout", "DIST-INIT"),
    # vLLM v1's engine core dying, as the client sees it
    ("ERROR 01-29 08:37:48 [core_client.py:564] Engine core proc EngineCore_DP1 died unexpectedly, shutting down "
     "client.", "VLLM-ENGINE-DEAD"),
    ("(APIServer pid=1) RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}",
     "VLLM-ENGINE-DEAD"),
    ("ValueError: Cannot auto-fit max_model_len: not enough GPU memory available to serve even a single token.",
     "KV-CACHE-TOO-SMALL"),
    ("openai.BadRequestError: Error code: 400 - {'message': \"'max_tokens' or 'max_completion_tokens' is too large: "
     "4096. This model's maximum context length is 4096 tokens\"}", "MAX-MODEL-LEN"),
    # the argument checks: ms-swift's left-over arguments, TRL's GRPOConfig
    ("ValueError: remaining_argv: ['--max_prompt_length', '60000']", "ARGS-INVALID"),
    ("ValueError: generation_batch_size (12) must be divisible by num_generations (8).", "ARGS-INVALID"),
    ("ValueError: GRPO requires at least 2 generations per prompt to calculate the advantages. You provided 1, which "
     "is less than the minimum required.", "ARGS-INVALID"),
    # a bare Exception, as ms-swift's vllm_client raises when a rollout server refuses the weight-sync group
    ("Exception: Server 0 init failed: Internal Server Error", "WEIGHT-SYNC-FAILED"),
    # transformers' save_pretrained and safetensors refusing to write
    ("RuntimeError: The weights trying to be saved contained shared tensors [{'lm_head.weight', "
     "'model.embed_tokens.weight'}] that are mismatching the transformers base configuration.",
     "CHECKPOINT-INCOMPLETE"),
    ("safetensors_rust.SafetensorError: Error while serializing: IoError(Os { code: 5, kind: Uncategorized })",
     "CHECKPOINT-INCOMPLETE"),
    # DeepSpeed ZeRO-3's parameter summary in an assertion
    ("AssertionError: {'id': 0, 'status': 'INFLIGHT', 'numel': 0, 'ds_numel': 544997376, 'shape': (0,)}",
     "DEEPSPEED-ERROR"),
    # the InfiniBand driver's failed work completion (rdma-core mlx5), as a Ray actor prints it
    ("(LLMRayActor pid=90738, ip=10.0.0.2) mlx5: node-2: got completion with error:", "NCCL-ERROR"),
    # torch.distributed's backend error class, bare and as Ray names the class a remote task raised
    ("torch.distributed.DistBackendError: [1] is setting up NCCL communicator and retrieving ncclUniqueId from [0] "
     "via c10d key-value store by key '0', but store->get('0') got error: Socket Timeout", "DIST-INIT"),
    ("torch.distributed.DistBackendError: unhandled error on rank 3", "NCCL-ERROR"),
    ("ray.exceptions.RayTaskError(DistBackendError): ray::ReferenceModelActor.init_model_from_pretrained() "
     "(pid=5021, ip=10.0.0.3, actor_id=9d1c0f, repr=<openrlhf.trainer.ray.launcher.ReferenceModelActor object at "
     "0x7f3a>)", "NCCL-ERROR"),
    ("ray.exceptions.RayTaskError(ValueError): ray::TaskRunner.run() (pid=77, ip=10.0.0.3)", "TRACEBACK"),
])
def test_each_versions_wording_is_named(line, kind):
    assert kinds([line]) == [kind]


def test_a_line_that_wraps_an_error_is_named_by_what_it_wraps():
    """libstdc++'s what(), the NCCL watchdog's exception and an aborted communicator's reason carry the error."""
    assert kinds(["terminate called after throwing an instance of 'c10::DistBackendError'",
                  "  what():  [PG ID 2 PG GUID 3 Rank 1] Process group watchdog thread terminated with exception: "
                  "CUDA error: an illegal memory access was encountered"]) == ["NOISE", "CUDA-ERROR"]
    assert kinds(["[rank2]:[E524 03:42:42.4 ProcessGroupNCCL.cpp:1895] [PG ID 0 PG GUID 0(default_pg) Rank 2] Process "
                  "group watchdog thread terminated with exception: [Rank 2] Watchdog caught collective operation "
                  "timeout: WorkNCCL(SeqNum=57, OpType=BROADCAST, NumelIn=1, NumelOut=1, Timeout(ms)=1800000)"]) \
        == ["NCCL-TIMEOUT"]
    assert kinds(["RuntimeError: NCCL communicator was aborted on rank 1.  Original reason for failure was: [Rank 1] "
                  "Watchdog caught collective operation timeout: WorkNCCL(SeqNum=9, OpType=ALLREDUCE)"]) \
        == ["NCCL-TIMEOUT"]
    assert kinds(["[rank0]: Process group watchdog thread terminated with exception: unknown"]) == ["NOISE"]


RENDEZVOUS_WARNING = ("[W228 18:45:15.741177013 socket.cpp:487] [c10d] waitForInput: socket SocketImpl(fd=11, "
                      "addr=[node-1]:38674, remote=[::ffff:10.0.0.9]:23456) timed out after 900000ms")


def test_a_warning_counts_when_the_failure_it_announces_follows():
    """c10d logs its rendezvous socket timing out as a warning; torchrun's traceback follows (cut short here)."""
    found = alerts([RENDEZVOUS_WARNING, *TORCHRUN_TRACEBACK])
    assert found["DIST-INIT"].evidence.startswith(RENDEZVOUS_WARNING)


def test_a_warning_the_run_went_on_after_raises_nothing():
    alone = alerts([RENDEZVOUS_WARNING, "[INFO:swift] Start training"])
    assert not alone
    progress = [RENDEZVOUS_WARNING, "{'loss': 0.1, 'grad_norm': 0.2, 'learning_rate': 1e-06, 'reward': 0.5}",
                "Traceback (most recent call last):", '  File "/home/user/reward.py", line 3, in f',
                "    return 1 / 0", "ZeroDivisionError: division by zero"]
    assert "DIST-INIT" not in kinds(progress)
    far = [RENDEZVOUS_WARNING, *["[rank0]: loading shard"] * 400, "RuntimeError: boom"]
    assert "DIST-INIT" not in kinds(far)


@pytest.mark.parametrize("raw,body,process,level", [
    ("(VllmWorker rank=3 pid=44710) ERROR 08-20 09:48:31 [pynccl_wrapper.py:229] Failed to load NCCL library",
     "Failed to load NCCL library", "VllmWorker rank=3 pid=44710", "error"),
    ("(EngineCore_DP0 pid=413) ERROR 11-10 12:30:57 [core.py:710] Traceback (most recent call last):",
     "Traceback (most recent call last):", "EngineCore_DP0 pid=413", "error"),
    ("[2025-03-01 10:00:00,123] [WARNING] [stage3.py:2171:step] 2 pytorch allocator cache flushes since last step",
     "2 pytorch allocator cache flushes since last step", None, "warning"),
    ("2025-03-01 10:00:00 - WARNING - __main__ - Process rank: 0, device: cuda:0", "Process rank: 0, device: cuda:0",
     None, "warning"),
    ("ERROR:root:reward server unreachable", "reward server unreachable", None, "error"),
])
def test_printers_prefixes_are_peeled_off(raw, body, process, level):
    ln = parse(raw)
    assert (ln.body, ln.process, ln.level) == (body, process, level)


def test_the_nccl_library_vllm_cannot_load_during_the_weight_sync_is_the_weight_syncs():
    lines = ['INFO:     127.0.0.1:50088 - "POST /init_communicator/ HTTP/1.1" 200 OK',
             "(VllmWorker rank=1 pid=44708) ERROR 08-20 09:48:31 [pynccl_wrapper.py:229] Failed to load NCCL library "
             "from /opt/nccl/libnccl.so.2. It is expected if you are not running on NVIDIA/AMD GPUs."]
    assert kinds(lines) == ["WEIGHT-SYNC-FAILED"]
    assert kinds(lines[1:]) == ["NCCL-ERROR"]  # without the sync around it: NCCL's


def test_a_sub_command_ms_swift_does_not_have():
    lines = ["Traceback (most recent call last):",
             '  File "/home/user/envs/x/bin/swift", line 8, in <module>',
             "    sys.exit(cli_main())",
             '  File "/home/user/envs/x/lib/python3.10/site-packages/swift/cli/main.py", line 62, in cli_main',
             "    file_path = importlib.util.find_spec(route_mapping[method_name]).origin",
             "KeyError: 'grpo'"]
    assert kinds(lines) == ["ARGS-INVALID"]


# -- metrics as pasted ---------------------------------------------------------------------------------------------

TRL_DICT = ("{'loss': '0', 'grad_norm': '0', 'learning_rate': '2.6e-07', 'reward': '0.3438', 'reward_std': '0.4398', "
            "'kl': '0', 'epoch': '0.01'}")  # transformers' ProgressCallback formats floats as strings


def test_dicts_as_printed_and_as_pasted():
    assert parse_stdout_line(TRL_DICT)[1]["reward_std"] == 0.4398
    unbraced = "'loss': -0.0, 'grad_norm': 0.0, 'learning_rate': 2.6e-07, 'reward': 0.34375, 'kl': 0.0"
    assert parse_stdout_line(unbraced)[1] == {"loss": -0.0, "grad_norm": 0.0, "learning_rate": 2.6e-07,
                                              "reward": 0.34375, "kl": 0.0}
    assert parse_stdout_line("'loss': 0.1 is what I see") is None  # one pair is no dict
    wrapped = ["{'loss': 0.0, 'grad_norm': 0.0, 'learning_rate': 1e-06,", "'reward': 0.5, 'reward_std': 0.0, 'kl': 0.0,",
               "'epoch': 0.1}", "{'loss': 0.1, 'grad_norm': 0.3, 'learning_rate': 1e-06, 'reward': 0.6,",
               " 'reward_std': 0.1, 'kl': 0.01}"]
    rows = printed_rows(wrapped)
    assert [values["reward_std"] for _, values, _ in rows] == [0.0, 0.1]  # two dicts, no row from a continuation
    assert rows[0][2] == wrapped[:3]


def test_verl_values_as_pprint_writes_them():
    step, values = parse_verl_line("step:3 - actor/pg_loss:np.float64(-0.012) - actor/grad_norm:nan - "
                                   "critic/score/mean:0.25")
    assert step == 3 and values["loss"] == -0.012 and values["reward"] == 0.25


@pytest.mark.parametrize("table", [
    ["Step | Training Loss | reward | reward_std | kl", "-- | -- | -- | -- | --", "1 | -0.2836 | 13.4 | 21.8 | nan",
     "2 | No Log | 6.93 | 14.5 | nan"],
    ["Step\tTraining Loss\treward\treward_std\tkl", "1\t-0.2836\t13.4\t21.8\tnan", "2\tNo Log\t6.93\t14.5\tnan"],
    ["| Step | Training Loss | reward | reward_std | kl |", "|---:|---:|---:|---:|---:|",
     "| 1 | -0.2836 | 13.4 | 21.8 | nan |", "| 2 | No Log | 6.93 | 14.5 | nan |"],
])
def test_tables_as_notebooks_and_github_show_them(table):
    rows = parse_table(table)
    assert [step for step, _, _ in rows] == [1, 2]
    assert rows[0][1]["loss"] == -0.2836 and "loss" not in rows[1][1] and rows[1][1]["reward"] == 6.93


def test_nan_evidence_starts_where_the_values_stopped_being_finite():
    table = ["Step | Training Loss | reward | kl", "-- | -- | --", "1 | 0.1 | 1.0 | 0.01", "2 | 0.1 | 1.0 | nan",
             "3 | 0.1 | 1.0 | nan", "4 | 0.1 | 1.0 | nan", "5 | 0.1 | 1.0 | nan"]
    metrics: dict = {}
    for step, values, _ in parse_table(table):
        for key, value in values.items():
            metrics.setdefault(key, []).append((step, value))
    lines = {step: [table[k]] for step, _, k in parse_table(table)}
    found = alerts([], metrics=metrics, metric_lines=lines)
    assert found["NAN-METRICS"].evidence.startswith("2 | 0.1 | 1.0 | nan")


def test_a_notebooks_traceback():
    """IPython's format: the type in the header, 'Cell In[5]' and 'File path:line, in f(…)' frames, arrows."""
    lines = ["---------------------------------------------------------------------------",
             "OutOfMemoryError                          Traceback (most recent call last)",
             "Cell In[5], line 3",
             "      1 trainer = GRPOTrainer(model=model, reward_funcs=[accuracy], args=args, train_dataset=ds)",
             "----> 3 trainer.train()",
             "",
             "File /usr/local/lib/python3.10/dist-packages/transformers/trainer.py:2240, in Trainer.train(self, "
             "resume_from_checkpoint, trial, ignore_keys_for_eval, **kwargs)",
             "-> 2240     return inner_training_loop(",
             "OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 14.74 GiB"]
    events = scan("notebook", lines)
    assert [(e.sig.id, e.index) for e in events] == [("OOM", 8)]
    assert [f[0] for f in events[0].frames] == ["Cell In[5]", "/usr/local/lib/python3.10/dist-packages/transformers/"
                                                "trainer.py"]


def test_docker_timestamps_and_slurm():
    ln = parse("2025-03-01T10:00:00.123456789Z [rank0]: torch.OutOfMemoryError: CUDA out of memory.")
    assert (ln.body, ln.rank) == ("torch.OutOfMemoryError: CUDA out of memory.", 0)
    assert kinds(["srun: error: node-3: task 5: Killed"]) == ["PROCESS-DIED"]
    assert kinds(["srun: error: node-3: task 0: Exited with exit code 0"]) == []


ENGINE_CORE = "(EngineCore_DP0 pid=559) ERROR 10-20 03:20:50 [core.py:720] "
KV_CHECK = [ENGINE_CORE + line for line in [
    '  File "/usr/local/lib/python3.12/dist-packages/vllm/v1/core/kv_cache_utils.py", line 1232, in get_kv_cache_config',
    "    check_enough_kv_cache_memory(vllm_config, kv_cache_spec, available_memory)",
    '  File "/usr/local/lib/python3.12/dist-packages/vllm/v1/core/kv_cache_utils.py", line 707, in '
    "check_enough_kv_cache_memory",
    '    raise ValueError(f"To serve at least one request with the models\'s max seq len ({max_model_len}), "',
    '                     f"({needed_memory/GiB_bytes:.2f} GiB KV cache is needed, which is larger than the "',
    '                     f"available KV cache memory ({available_memory/GiB_bytes:.2f} GiB). Based on "']]


def test_a_traceback_cut_after_its_raise_statement_is_named_by_the_message_raised():
    """A paste that ends inside the innermost frame shows the error only in the code that raises it (vLLM v1's KV
    cache check, as its engine core logs it); the exception line, once there, tells it instead; a raise in a
    frame that is not the innermost is code, not the error."""
    assert kinds(KV_CHECK) == ["KV-CACHE-TOO-SMALL"]
    found = alerts(KV_CHECK)["KV-CACHE-TOO-SMALL"]
    assert found.evidence.splitlines()[0].endswith("raise ValueError(f\"To serve at least one request with the "
                                                   "models's max seq len ({max_model_len}), \"")
    ended = [*KV_CHECK, ENGINE_CORE + "ValueError: To serve at least one request with the models's max seq len "
             "(32768), (3.50 GiB KV cache is needed, which is larger than the available KV cache memory (1.20 GiB)."]
    assert [e.index for e in scan("log", ended)] == [len(KV_CHECK)]
    deeper = [*KV_CHECK[:4], ENGINE_CORE + '  File "/usr/local/lib/python3.12/dist-packages/vllm/utils.py", line 9, '
              "in f", ENGINE_CORE + "    return g()"]
    cut = scan("log", deeper)  # the cut traceback is told by where it was (KV-cache set-up), not by the raise
    assert [(e.index, e.sig.title) for e in cut] == [(len(deeper) - 1, "vLLM failed while setting up its KV cache")]


def test_vllms_engine_core_fatal_error_heads_its_traceback():
    """vLLM v1's engine core logs 'EngineCore encountered a fatal error.' and then the traceback of the cause: cut
    before the cause, the line is the finding; with the cause there, the cause is."""
    fatal = ENGINE_CORE + "EngineCore encountered a fatal error."
    assert set(alerts([fatal])) == {"VLLM-ENGINE-DEAD"}
    tb = [ENGINE_CORE + line for line in [
        "Traceback (most recent call last):",
        '  File "/usr/local/lib/python3.12/dist-packages/vllm/v1/engine/core.py", line 711, in run_engine_core',
        "    engine_core.run_busy_loop()",
        '  File "/usr/local/lib/python3.12/dist-packages/vllm/v1/worker/gpu_model_runner.py", line 1402, in '
        "execute_model",
        "    logits = self.model.compute_logits(sample_hidden_states, None)",
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.86 GiB. GPU 0 has a total capacity of "
        "79.19 GiB of which 1.02 GiB is free."]]
    assert set(alerts([fatal, *tb])) == {"OOM"}
    unnamed = [*tb[:-1], ENGINE_CORE + "RuntimeError: shape mismatch in sampler"]
    assert "VLLM-ENGINE-DEAD" in alerts([fatal, *unnamed])  # a bare exception says less than the heading line


def test_an_error_raised_in_a_call_the_weight_sync_entered_is_the_weight_syncs_however_long_its_traceback():
    """ms-swift's rollout server answers /init_communicator/ and then runs the group set-up in vLLM: the request
    line is where the call started, more than NEAR lines above the exception line of a long traceback."""
    request = 'INFO:     10.0.0.2:42132 - "POST /init_communicator/ HTTP/1.1" 200 OK'
    tb = ["[ERROR:swift] Method execution failed: collective_rpc", "Traceback (most recent call last):",
          '  File "/workspace/ms-swift/swift/llm/infer/rollout.py", line 146, in async_llm_worker',
          "    result = await method(*args, **kwargs)",
          '  File "/opt/conda/lib/python3.10/site-packages/vllm/engine/async_llm_engine.py", line 1253, in '
          "collective_rpc",
          "    return await self.engine.collective_rpc_async(method, timeout, args,",
          '  File "/opt/conda/lib/python3.10/site-packages/vllm/engine/async_llm_engine.py", line 535, in '
          "collective_rpc_async",
          "    raise NotImplementedError", "NotImplementedError"]
    assert kinds([request, *tb]) == ["WEIGHT-SYNC-FAILED"]
    assert kinds(["INFO:     10.0.0.2:42132 - \"POST /infer/ HTTP/1.1\" 200 OK", *tb]) == ["TRACEBACK"]


SYNC_SOCKET = ("[rank0]:[W710 16:53:50.544805244 socket.cpp:489] [c10d] waitForInput: socket SocketImpl(fd=111, "
               "addr=[localhost]:42404, remote=[::ffff:10.0.0.5]:51217) timed out after 300000ms")
SYNC_POLL = ("[rank0]:[W710 16:45:37.933498015 socket.cpp:464] [c10d] waitForInput: poll for socket SocketImpl("
             "fd=111, addr=[localhost]:42404, remote=[::ffff:10.0.0.5]:51217) returned 0, likely a timeout")


def test_a_socket_timing_out_on_a_weight_sync_group_port_is_the_weight_sync_in_any_mode():
    """Only rollout servers have a group port (51216+i): c10d's socket to one timing out — or, where the paste ends
    before that, its poll coming back empty — is the weight sync stalling, whether or not the logs show server
    mode. The same lines on a rendezvous port are torch.distributed's (and a warning alone raises nothing)."""
    for lines in ([SYNC_POLL, SYNC_SOCKET], [SYNC_SOCKET], [SYNC_POLL]):
        found = alerts(lines)
        assert set(found) == {"WEIGHT-SYNC-STALL"} and "port 51217" in found["WEIGHT-SYNC-STALL"].explanation
        assert found["WEIGHT-SYNC-STALL"].evidence == lines[-1].strip()  # the timeout itself where it is there
    assert alerts([SYNC_POLL.replace("51217", "29500")]) == {}
    assert "WEIGHT-SYNC-STALL" not in alerts([SYNC_SOCKET.replace("51217", "29500"), *TORCHRUN_TRACEBACK])


def test_infiniband_failing_while_weights_are_sent_to_vllm_is_the_weight_syncs():
    """OpenRLHF's vLLM actors log each weight they receive; the driver's failed completion comes in between."""
    lines = ["(LLMRayActor pid=90621, ip=10.0.0.2) update weight: model.embed_tokens.weight, dtype: torch.bfloat16, "
             "shape: torch.Size([152064, 5120])",
             "(LLMRayActor pid=90738, ip=10.0.0.2) mlx5: node-2: got completion with error:",
             "(LLMRayActor pid=90738, ip=10.0.0.2) 00000000 00000000 00000000 00000000",
             "(LLMRayActor pid=90738, ip=10.0.0.2) 00000000 93005204 090006d0 0b8035d3"]
    assert kinds(lines) == ["WEIGHT-SYNC-FAILED"]
