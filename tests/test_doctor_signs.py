"""The doctor's signs for the classes of failure its fourth fresh round of real excerpts showed it missing (issue 32),
each on lines written in the printing tool's own format (the tool's file and function are named beside each
signature in grpo_ui/doctor/signatures.py and in vllm_profile.py), with the values of public logs: a metric the run
does not compute, the rank that showed NaN first, PyTorch's serializer failing a checkpoint, TRL's client waiting for
a vLLM server, right-padded generation, a traceback whose exception line the paste mangled, vLLM's memory profile,
a vLLM worker's failed method, the node's host memory, and one report without repeats."""

from grpo_ui.core.findings import format_findings
from grpo_ui.doctor.diagnose import diagnose, report
from grpo_ui.doctor.events import scan
from grpo_ui.doctor.logfiles import from_texts


def alerts(*texts: str, names: tuple[str, ...] = ()) -> dict:
    logs = {(names[k] if names else f"log{k}.txt"): text for k, text in enumerate(texts)}
    return {a.id: a for a in diagnose(from_texts(logs))}


def kinds(lines: list[str]) -> list[str]:
    return [e.sig.id for e in scan("log", lines)]


def trl_dict(loss: str, kl: str, reward: str = "0.5") -> str:
    """A step's metrics as transformers' ProgressCallback prints TRL's logs (floats as strings)."""
    return (f"{{'loss': '{loss}', 'grad_norm': '0.21', 'learning_rate': '1e-06', 'reward': '{reward}', "
            f"'reward_std': '0.3', 'kl': '{kl}', 'epoch': '0.01'}}")


def test_a_loss_term_the_run_does_not_compute_is_not_a_failure():
    """GRPO's loss adds beta × KL: a kl that is nan at every step shown beside a finite loss never entered the loss
    (TRL's default beta 0 computes no KL; a notebook's table shows the missing value as nan)."""
    table = ["Step | Training Loss | reward | reward_std | kl", "-- | -- | -- | -- | --",
             "1 | -0.2836 | 13.44 | 21.81 | nan", "2 | -0.1491 | 6.93 | 14.53 | nan", "3 | -0.1105 | 6.25 | 17.68 | nan"]
    assert "NAN-METRICS" not in alerts("\n".join(table))
    assert "NAN-METRICS" not in alerts("\n".join(trl_dict("0.01", "nan") for _ in range(3)))
    # but a NaN loss is, a kl that turned nan after finite values is, and one step alone cannot show "never computed"
    assert "NAN-METRICS" in alerts("\n".join(trl_dict("nan", "nan") for _ in range(3)))
    assert "NAN-METRICS" in alerts("\n".join([trl_dict("0.01", "0.002"), trl_dict("0.01", "nan"), trl_dict("0.02", "nan")]))
    assert "NAN-METRICS" in alerts(trl_dict("0.01", "nan"))


def test_a_loss_term_the_job_switches_off_is_never_a_failure(tmp_path):
    """With the run's settings known (ms-swift's argument dump says beta=0.0), its kl is not the trainer's."""
    dump = ["[INFO:swift] args: RLHFArguments(", "beta=0.0,", "logging_steps=1,", ")"]
    steps = [f'{{"loss": 0.01, "grad_norm": 0.2, "reward": 0.5, "kl": NaN, "global_step/max_steps": "{k}/10"}}'
             for k in (1, 2)]
    assert "NAN-METRICS" not in alerts("\n".join(dump + steps[:1]))
    assert "NAN-METRICS" in alerts("\n".join(steps[:1]))  # beta unknown: one step's NaN kl is still told


def test_the_first_rank_to_show_nan_is_named():
    """torch's anomaly mode names the backward function that made the first NaN, per rank (torch autograd engine:
    validate_outputs), and sampling from NaN probabilities fails the CUDA assert; the first line names the rank."""
    lines = ["{'loss': '0.0123', 'grad_norm': '0.4', 'learning_rate': '1e-06', 'reward': '0.5', 'epoch': '0.1'}",
             "[rank3]: RuntimeError: Function 'MulBackward0' returned nan values in its 0th output.",
             "[rank1]: RuntimeError: Function 'LogSoftmaxBackward0' returned nan values in its 0th output.",
             "{'loss': 'nan', 'grad_norm': 'nan', 'learning_rate': '1e-06', 'reward': '0.5', 'epoch': '0.1'}"]
    found = alerts("\n".join(lines), names=("train.log",))["NAN-METRICS"]
    assert found.title == "NaN/inf in training, first on train.log, rank 3" and found.where == "train.log, rank 3"
    assert "First seen on train.log, rank 3; then on train.log, rank 1." in found.explanation
    assert found.evidence.splitlines()[-1] == lines[1]
    # across nodes the time the lines carry decides, not the order the logs are given in
    late = "2025-03-01 10:00:09 - ERROR - __main__ - [rank0]: loss is nan, stopping"
    early = ("2025-03-01 10:00:05 - ERROR - __main__ - ../aten/src/ATen/native/cuda/TensorCompare.cu:110: "
             "_assert_async_cuda_kernel: block: [0,0,0], thread: [0,0,0] Assertion `probability tensor contains "
             "either `inf`, `nan` or element < 0` failed.")
    found = alerts(late, early, names=("node0.log", "node1.log"))["NAN-METRICS"]
    assert found.where == "node1.log" and "then on node0.log, rank 0" in found.explanation


def test_pytorchs_serializer_failing_a_checkpoint():
    """caffe2/serialize/inline_container.cc's enforce failures, writing and reading back."""
    for line in ["RuntimeError: [enforce fail at inline_container.cc:595] . PytorchStreamWriter failed writing file "
                 "data/12: file write failed",
                 "RuntimeError: PytorchStreamReader failed reading zip archive: failed finding central directory",
                 "RuntimeError: [enforce fail at inline_container.cc:659] . unexpected pos 2387758464 vs 2387758376"]:
        assert kinds([line]) == ["CHECKPOINT-INCOMPLETE"], line
    # Ray's header of a remote task's traceback is not the error: the remote exception line after it is, also when
    # the chain after it is cut before its next exception line (ray/exceptions.py: RayTaskError)
    ray = ["ray.exceptions.RayTaskError(RuntimeError): ray::WorkerDict.actor_rollout_save_checkpoint() (pid=811, "
           "ip=10.0.0.4, actor_id=5b1f0e, repr=<verl.single_controller.ray.base.WorkerDict object at 0x7f3c>)",
           '  File "/usr/lib/python3/dist-packages/torch/serialization.py", line 967, in _save',
           "    zip_file.write_record(name, storage, num_bytes)",
           "RuntimeError: [enforce fail at inline_container.cc:815] . PytorchStreamWriter failed writing file "
           "data/3: file write failed", "", "During handling of the above exception, another exception occurred:", "",
           "ray::WorkerDict.actor_rollout_save_checkpoint() (pid=811, ip=10.0.0.4"]
    found = alerts("\n".join(ray))["CHECKPOINT-INCOMPLETE"]
    assert found.evidence.splitlines()[0] == ray[3]
    # a full disk says so itself
    assert kinds(["RuntimeError: [enforce fail at inline_container.cc:595] . PytorchStreamWriter failed writing "
                  "file data/1: No space left on device"]) == ["DISK-FULL"]


RETRY = "2025-05-02 11:00:{:02d} - INFO - trl.extras.vllm_client - Server is not up yet. Retrying in 2.0 seconds..."


def test_trls_client_waiting_for_a_server_that_never_answers():
    """trl extras/vllm_client.py: check_server logs each retry at INFO level, 'Server is up!' when it answers, and
    raises ConnectionError after vllm_server_timeout (240 s by default)."""
    waiting = [RETRY.format(2 * k) for k in range(3)]
    found = alerts("\n".join(waiting))["ROLLOUT-UNREACHABLE"]
    assert found.evidence.splitlines()[0] == waiting[0] and "3 time(s)" in found.explanation
    assert found.severity == "warning"  # waiting: TRL has not given up yet
    assert "ROLLOUT-UNREACHABLE" not in alerts("\n".join(waiting[:2]))  # two retries: a server still starting
    assert "ROLLOUT-UNREACHABLE" not in alerts("\n".join([*waiting, "2025-05-02 11:00:06 - INFO - "
                                                          "trl.extras.vllm_client - Server is up!"]))
    gave_up = [*waiting, "ConnectionError: The vLLM server can't be reached at http://10.0.0.2:8000 after 240.0 "
               "seconds. Make sure the server is running by running `trl vllm-serve`."]
    assert [a for a in diagnose(from_texts({"t.log": "\n".join(gave_up)})) if a.id == "ROLLOUT-UNREACHABLE"][0] \
        .evidence.startswith("ConnectionError")  # one finding, from the error


def test_a_followed_run_waits_longer_before_its_wait_is_a_finding():
    start = ["[INFO|trainer.py:746] 2025-05-02 10:59:58,046 >> Using auto half precision backend",
             "***** Running training *****"]  # a run's own start: not an excerpt
    few = [RETRY.format(k % 60) for k in range(5)]
    many = [RETRY.format(k % 60) for k in range(61)]
    assert "ROLLOUT-UNREACHABLE" not in alerts("\n".join(start + few))
    assert "ROLLOUT-UNREACHABLE" in alerts("\n".join(start + many))  # 122 s of retries


def test_generation_on_right_padded_prompts():
    """transformers: the flash-attention models refuse a right-padded batch (ValueError); generate() warns."""
    refused = ("ValueError: You are attempting to perform batched generation with padding_side='right' this may lead "
               "to unexpected behaviour for Flash Attention version of Qwen2. Make sure to  call "
               "`tokenizer.padding_side  = 'left'` before tokenizing the input. ")
    found = alerts(refused)["RIGHT-PADDING"]
    assert found.severity == "error" and found.evidence.startswith("ValueError: You are attempting")
    warned = ("A decoder-only architecture is being used, but right-padding was detected! For correct generation "
              "results, please set `padding_side='left'` when initializing the tokenizer.")
    found = alerts("\n".join([warned, trl_dict("0.0", "0.001", reward="0.0")]))["RIGHT-PADDING"]
    assert found.severity == "warning" and found.evidence.splitlines()[0] == warned


FRAMES = ['  File "/usr/local/lib/python3.10/dist-packages/transformers/trainer.py", line 2245, in train',
          "    return inner_training_loop(",
          '  File "/usr/local/lib/python3.10/dist-packages/torch/nn/modules/module.py", line 1750, in _call_impl']


def test_a_traceback_whose_exception_line_the_paste_mangled():
    """A paste that begins inside a traceback and whose last line is not a clean exception line: the exception
    glued to the code line before it, or the class inside the line; what can be read is told, else 'a
    traceback'."""
    glued = [*FRAMES, "    return forward_call(*args, **kwargs)RuntimeError: CUDA error: an illegal memory access "
                      "was encountered"]
    assert [(e.sig.id, e.index) for e in scan("log", glued)] == [("CUDA-ERROR", 3)]
    inside = [*FRAMES, "    return forward_call(*args, **kwargs)", "(see above) ValueError: ValueError: could not "
                                                                    "broadcast input array"]
    found = alerts("\n".join(inside))
    assert found["NODE-FAILED"].evidence.splitlines()[0] == inside[-1]  # a traceback, with the line it ended on
    cut = alerts("\n".join([*FRAMES, "    return forward_call(*args, **kwargs)"]))
    assert cut["TRACEBACK"].title == "A process printed a traceback"  # no exception line at all
    assert kinds([*FRAMES, "    return forward_call(*args, **kwargs)", "ValueError: clean"]) == ["TRACEBACK"]


PROFILE = "(VllmWorkerProcess pid=77) INFO 03-05 10:00:01 [worker.py:267] "
RAISED = "(VllmWorkerProcess pid=77) ERROR 03-05 10:00:02 [multiproc_worker_utils.py:233] "
KV_SETUP = ['Traceback (most recent call last):',
            '  File "/usr/local/lib/python3.10/dist-packages/vllm/engine/llm_engine.py", line 276, in __init__',
            "    self._initialize_kv_caches()",
            '  File "/usr/local/lib/python3.10/dist-packages/vllm/engine/llm_engine.py", line 421, in '
            "_initialize_kv_caches",
            "    self.model_executor.determine_num_available_blocks())"]


def profile(weights: str) -> list[str]:
    """vLLM 0.7-0.8's profile lines (worker.py: determine_num_available_blocks)."""
    return [PROFILE + "Memory profiling takes 5.35 seconds",
            PROFILE + "the current vLLM instance can use total_gpu_memory (79.15GiB) x gpu_memory_utilization (0.90) "
                      "= 71.24GiB",
            PROFILE + f"model weights take {weights}GiB; non_torch_memory takes 0.09GiB; PyTorch activation peak "
                      "memory takes 1.16GiB; the rest of the memory reserved for KV Cache is 61.36GiB."]


def test_an_engine_that_died_after_an_impossible_memory_profile():
    """The excerpt stops before the exception; vLLM's own profile lines show the cause (weights measured as
    0 GiB of a card it was told to use 90 % of), and the cut traceback follows as their evidence."""
    lines = [*profile("0.00"), *(RAISED + line for line in KV_SETUP)]
    found = alerts("\n".join(lines))
    assert set(found) == {"VLLM-MEMORY-PROFILE"}, found
    alert = found["VLLM-MEMORY-PROFILE"]
    assert alert.evidence.splitlines()[0] == lines[2] and "weights measured 0 GiB" in alert.explanation
    assert "gpu_memory_utilization 0.9 (vLLM's share of the whole card)" in alert.explanation
    assert "self._initialize_kv_caches()" in alert.evidence
    # a possible profile: the cut traceback is told by where it stopped, inside the KV-cache set-up
    healthy = alerts("\n".join([*profile("8.63"), *(RAISED + line for line in KV_SETUP)]))
    assert set(healthy) == {"KV-CACHE-TOO-SMALL"}
    assert healthy["KV-CACHE-TOO-SMALL"].evidence.startswith(RAISED + "    self.model_executor.determine_num_"
                                                             "available_blocks())")
    # an impossible profile the run went on after raises nothing; vLLM's own assertion names the profile
    assert alerts("\n".join([*profile("0.00"), trl_dict("0.01", "0.001")])) == {}
    assert kinds(["AssertionError: Error in memory profiling. Initial free memory 31.2 GiB, current free memory "
                  "34.5 GiB."]) == ["VLLM-MEMORY-PROFILE"]


WORKER = "(RayWorkerWrapper pid=4183, ip=10.0.0.3) ERROR 06-03 23:13:39 worker_base.py:148] "


def test_a_vllm_workers_failed_method_is_classed_by_the_method():
    """vLLM worker_base.py: execute_method logs 'Error executing method …' and then the traceback: one finding,
    the weight sync's when the method is update_weight, the exception's own when the traceback shows it."""
    cut = [WORKER + "Error executing method 'update_weight'. This might cause deadlock in distributed execution.",
           WORKER + "Traceback (most recent call last):",
           WORKER + '  File "/usr/local/lib/python3.10/dist-packages/vllm/worker/worker_base.py", line 140, in '
                    "execute_method"]
    found = alerts("\n".join(cut))
    assert set(found) == {"WEIGHT-SYNC-FAILED"} and found["WEIGHT-SYNC-FAILED"].evidence.startswith(cut[0])
    known = [cut[0].replace("update_weight", "init_device"), *cut[1:],
             WORKER + "RuntimeError: NCCL error: unhandled system error (run with NCCL_DEBUG=INFO for details)"]
    assert kinds(known) == ["VLLM-WORKER-FAILED", "NCCL-ERROR"] and set(alerts("\n".join(known))) == {"NCCL-ERROR"}
    loading = alerts("\n".join([cut[0].replace("update_weight", "load_model"), *cut[1:]]))
    assert set(loading) == {"VLLM-WORKER-FAILED"}


def test_the_nodes_host_memory_is_not_the_gpus():
    """Ray's memory monitor, its OutOfMemoryError, the kernel's OOM killer, slurmstepd's cgroup."""
    for line in ["Memory on the node (IP: 10.0.0.7, ID: 50eef2b9) where the task (actor ID: 658f76, "
                 "name=ActorModelRayActor.__init__, pid=5315, memory used=201.67GB) was running was 445.48GB / "
                 "468.75GB (0.950365), which exceeds the memory usage threshold of 0.95. Ray killed this worker (ID: "
                 "3842) because it was the most recently scheduled task;",
                 "ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on memory.",
                 "[Tue Mar  4 10:00:00 2025] Out of memory: Killed process 4321 (python) total-vm:812345678kB",
                 "slurmstepd: error: Detected 1 oom_kill event in StepId=4242.0. Some of the step tasks have been OOM "
                 "Killed."]:
        assert kinds([line]) == ["HOST-OOM"], line


def test_one_oom_is_told_once():
    """Two ranks run out of memory, torchrun summarises: the report shows the traceback once and the OOM line in the
    headline and in its finding only (issue 32: the traceback twice and the line four times)."""
    tb = ['Traceback (most recent call last):', '  File "/usr/local/lib/python3.10/site-packages/swift/cli/rlhf.py", '
          'line 5, in <module>', "    rlhf_main()"]
    oom = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.63 GiB. GPU {} has a total capacity of 79.11 GiB"
    lines = ["Train:   3%|▎         | 5/150 [02:11<1:03:20, 26.21s/it]"]
    for rank in (0, 1):
        lines += [f"[rank{rank}]: {line}" for line in [*tb, oom.format(rank)]]
    lines += ["Root Cause (first observed failure):", "[0]:", "  time      : 2025-01-01_10:00:01", "  host      : node-1",
              "  rank      : 0 (local_rank: 0)", "  exitcode  : 1 (pid: 455)", "=" * 60]
    found = report(from_texts({"train.log": "\n".join(lines)}))
    text = found.headline + "\n" + format_findings([a.finding() for a in found.alerts])
    assert {a.id for a in found.alerts} == {"NODE-FAILED", "OOM"}
    assert text.count(oom.format(0)) == 2 and text.count("rlhf_main()") == 1
