"""The step-time model's efficiency constants: what share of a GPU's datasheet peak the real libraries reach, and
the fixed costs no datasheet gives (the completion length assumed when the user gives none is timing.lengths'). The
first group is fitted on the fit rows of tests/data/time_measurements.jsonl only (``python bench/time_calibration.py
--fit`` searches them, with a user's own exported rows added by ``--rows``; the held-out and fresh rows are never
used); the second is set from what the libraries publish or are counted to do, each with its source.
"""

# Fitted.
# Share of the dense bf16 peak that matmuls reach: training (forward, backward, recomputation), log-prob forwards,
# vLLM's prefill and large decoding batches (model FLOPs utilisation; Megatron and DeepSpeed report 0.3–0.55).
MFU = 0.55
# Share of the memory bandwidth a decoding step reaches while it reads the weights and the KV cache.
BANDWIDTH_EFFICIENCY = 0.5
# Seconds per CUDA kernel that transformers' generate() launches from Python for each decoding step (eager PyTorch:
# the dispatcher, the launch and the module's Python; timing.rollout.generate_kernels counts the kernels per step).
GENERATE_KERNEL_S = 20e-6
# Seconds per generation round outside the phases: the dataloader, the chat template, rewards' Python, metrics.
ROUND_OVERHEAD_S = 1.0

# Set, not fitted.
# Seconds every vLLM decoding step costs beyond reading and computing (the scheduler, sampling, preparing the next
# step's inputs, the Python between CUDA-graph replays): vLLM's v0.6.0 performance post
# (blog.vllm.ai/2024/09/05/perf-update.html) measures Llama-3-8B on one H100 at "1 token every 13 ms under light
# load", of which reading its 16 GB of weights at the H100's 3.35 TB/s takes 4.8 ms; the rest, ~8 ms, is the step's
# fixed cost (its profile before v0.6.0: only 38 % of the time on the GPU). It is CPU time, the same on any GPU, and
# it dominates when the model is small and the completions long.
DECODE_STEP_S = 0.008
# Seconds per decoder layer and decoding step in vLLM's eager mode (vllm_enforce_eager: a kernel launch per op).
EAGER_LAYER_S = 0.0004
# Seconds per vLLM sleep and wake-up cycle beyond moving the weights (re-mapping its memory pool, the KV cache; ms-swift
# logs "It took 3.5 seconds to wake up" for a large model).
SLEEP_WAKE_S = 1.0
# Seconds vLLM's load_weights spends per weight tensor it receives (Python: the name mapping, the weight loader that
# shards or stacks it into the fused q/k/v and gate/up parameters), beyond copying its bytes: an order of magnitude
# (a few hundred µs of Python per tensor). ms-swift times the whole sync (profiling 'GRPOTrainer._move_model_to_vllm')
# but sends that timer only to wandb/swanlab, so no published ms-swift run gives it; bench/gpu records it.
LOAD_TENSOR_S = 0.0005
# Seconds of one ms-swift weight-sync request to a rollout server beyond moving its bytes (an HTTP call to
# /update_flattened_params/ with the bucket's metadata, then the NCCL broadcast and a barrier;
# rlhf_trainers/vllm_client.py): one per bucket of SWIFT_UPDATE_WEIGHTS_BUCKET_SIZE MiB.
SYNC_REQUEST_S = 0.05
# NCCL's latency for one small all-reduce inside a node (tensor parallelism: two per layer and decoding step).
ALLREDUCE_LATENCY_S = 15e-6
# Parameters DeepSpeed's CPU Adam updates per second on one node's host CPUs (optimizer offload).
CPU_ADAM_PARAMS_S = 1e9
