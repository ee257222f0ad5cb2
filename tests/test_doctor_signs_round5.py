"""The doctor's signs for the classes of failure its fifth fresh round of real excerpts (and the three misses of its
third, looked at with it) showed it missing, each on lines written in the printing tool's own format, with values of
our own: vLLM's sleep-mode allocator failing a CUDA call, Ray's header of a remote task whose traceback the paste
cuts, weights loaded into a running vLLM through a collective RPC, vLLM refusing a weight name a training wrapper
gave it, a process that died inside vLLM's sleep or wake-up call, and torchrun's failure summary naming the rank."""

from grpo_ui.doctor.diagnose import diagnose
from grpo_ui.doctor.events import scan
from grpo_ui.doctor.logfiles import from_texts


def alerts(text: str) -> dict:
    return {a.id: a for a in diagnose(from_texts({"log.txt": text}))}


def kinds(lines: list[str]) -> list[str]:
    return [e.sig.id for e in scan("log", lines)]


def test_vllms_sleep_mode_allocator_failing_a_cuda_call():
    """vLLM's csrc/cumem_allocator.cpp prints its CUDA_CHECK failures as "CUDA Error: <cuGetErrorString> at
    <file>:<line>" (capital E, unlike torch's "CUDA error:"); out of memory there is an OOM like any other."""
    assert kinds(["CUDA Error: operation not supported at /workspace/csrc/cumem_allocator.cpp:87"]) == ["CUDA-ERROR"]
    assert kinds(["RuntimeError: CUDA Error: out of memory at /workspace/csrc/cumem_allocator.cpp:71"]) == ["OOM"]
    assert kinds(["INFO 03-02 10:00:01 [gpu_worker.py:98] No CUDA errors seen; sleep mode freed 40.2 GiB memory"]) == []


RAY_HEADER = ("ray.exceptions.RayTaskError(KeyError): ray::TaskRunner.run() (pid=5120, ip=10.0.0.2, "
              "actor_id=0a1b2c3d4e5f60718293a4b501000000, repr=<main_ppo.TaskRunner object at 0x7f1e2d3c4b50>)")


def test_where_a_remote_task_failed_is_read_from_the_frames_ray_prints_after_its_header():
    """Ray prints a failed task's own traceback after its RayTaskError(X) header (ray/exceptions.py); when the paste
    ends before the X line, those frames still say where the task was: in a package's reward code (verl's
    workers/reward_manager/) the reward function failed; elsewhere it is a plain exception."""
    driver = ['  File "/opt/venv/lib/python3.11/site-packages/ray/_private/worker.py", line 2771, in get',
              "    raise value.as_instanceof_cause()"]
    remote = ['  File "/workspace/verl/verl/trainer/ppo/ray_trainer.py", line 1102, in fit',
              "    reward_tensor = self.reward_fn(batch)",
              '  File "/workspace/verl/verl/workers/reward_manager/dapo.py", line 75, in __call__']
    assert kinds([*driver, RAY_HEADER, *remote]) == ["REWARD-FUNC-FAILED"]
    elsewhere = ['  File "/workspace/verl/verl/trainer/ppo/ray_trainer.py", line 1131, in fit',
                 "    actor_output = self.actor_rollout_wg.update_actor(batch)",
                 '  File "/workspace/verl/verl/workers/fsdp_workers.py", line 640, in update_actor']
    assert kinds([*driver, RAY_HEADER, *elsewhere]) == ["TRACEBACK"]


COLLECTIVE_RPC = ['  File "/opt/venv/lib/python3.12/site-packages/vllm/v1/engine/llm_engine.py", line 310, in '
                  "collective_rpc",
                  "    return self.engine_core.collective_rpc(method, timeout, args, kwargs)",
                  '  File "/opt/venv/lib/python3.12/site-packages/vllm/v1/engine/core_client.py", line 680, in '
                  "call_utility",
                  "    return future.result()"]


def test_weights_loaded_into_a_running_vllm_through_a_collective_rpc_are_the_weight_sync():
    """vLLM v1's engine core answers a failed utility call with "Call to collective_rpc method failed: <error>";
    weights loaded that way come from outside the engine — the trainer's weight sync — so a loader that refuses the
    trainer's arguments is the weight sync and vLLM not fitting together. At start-up (load_model) the same words
    stay a version mismatch, and a mismatch that loads no weights stays one too."""
    mismatch = ("Exception: Call to collective_rpc method failed: load_weights() got an unexpected keyword argument "
                "'packed'")
    found = alerts("\n".join([*COLLECTIVE_RPC, mismatch]))
    assert "WEIGHT-SYNC-FAILED" in found and "VERSION-MISMATCH" not in found
    assert found["WEIGHT-SYNC-FAILED"].title.startswith("The weight sync and vLLM do not fit together")
    startup = ['  File "/opt/venv/lib/python3.12/site-packages/vllm/v1/worker/gpu_worker.py", line 201, in load_model',
               "    self.model_runner.load_model()",
               "TypeError: default_weight_loader() got an unexpected keyword argument 'shard_id'"]
    assert kinds(startup) == ["VERSION-MISMATCH"]
    other = "TypeError: LLM.generate() got an unexpected keyword argument 'prompt_token_ids'"
    assert kinds([*COLLECTIVE_RPC, other]) == ["VERSION-MISMATCH"]


def test_vllm_refusing_a_weight_name_a_training_wrapper_gave_it():
    """vLLM's AutoWeightsLoader raises "There is no module or parameter named '<prefix>' in <Model>"
    (model_executor/models/utils.py). A name with a training wrapper's prefix (PEFT's base_model.model., FSDP's
    _fsdp_wrapped_module.) exists only on a live training model: the weight sync sent it. A plain unknown name is a
    checkpoint vLLM's model does not match (start-up), not the weight sync."""
    for name in ("base_model.model.model.layers.0.self_attn.q_proj.lora_A",
                 "model._fsdp_wrapped_module.embed_tokens"):
        line = f"ValueError: There is no module or parameter named '{name}' in LlamaForCausalLM"
        assert kinds([line]) == ["WEIGHT-SYNC-FAILED"], name
    assert kinds(["ValueError: There is no module or parameter named 'vision_tower' in Qwen3Model"]) == ["TRACEBACK"]


def test_a_process_that_died_inside_vllms_sleep_or_wake_up_call():
    """Ray's ActorDiedError (a worker process gone) raised inside vLLM's own sleep/wake_up call is sleep mode's
    crash; the same death in another engine's wake-up (SGLang's) stays a process that died."""
    died = ["ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task.",
            "        class_name: create_colocated_worker_cls.<locals>.WorkerDict"]

    def frames(path: str) -> list[str]:
        return ["Traceback (most recent call last):",
                f'  File "{path}", line 212, in wake_up',
                "    await asyncio.gather(*[worker.wake_up.remote() for worker in self.workers])"]

    assert "VLLM-SLEEP-CRASH" in alerts("\n".join([
        *frames("/opt/venv/lib/python3.10/site-packages/verl/workers/rollout/vllm_rollout/vllm_async_server.py"),
        *died]))
    other = alerts("\n".join([
        *frames("/opt/venv/lib/python3.10/site-packages/verl/workers/rollout/sglang_rollout/async_sglang_server.py"),
        *died]))
    assert "VLLM-SLEEP-CRASH" not in other and "NODE-FAILED" in other


def test_torchruns_summary_names_the_rank_when_the_rank_printed_nothing():
    """torchrun's failure summary (torch/distributed/elastic/multiprocessing/errors: ChildFailedError) lists the root
    cause's time, host, rank and exit code; without a line of the rank's own, its "rank :" field is the evidence."""
    summary = ["torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
               "============================================================", "train_grpo.py FAILED",
               "------------------------------------------------------------", "Failures:", "  <NO_OTHER_FAILURES>",
               "------------------------------------------------------------", "Root Cause (first observed failure):",
               "[0]:", "  time      : 2025-05-02_10:11:12", "  host      : gpu-node-7",
               "  rank      : 13 (local_rank: 5)", "  exitcode  : 1 (pid: 4242)", "  error_file: <N/A>",
               "  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html",
               "============================================================"]
    found = alerts("\n".join(summary))["NODE-FAILED"]
    assert found.evidence.splitlines()[0] == "rank      : 13 (local_rank: 5)"
    assert "rank 13 (local rank 5)" in found.where
