"""The step-time model's efficiency constants: what share of a GPU's datasheet peak the real libraries reach, and
the fixed costs no datasheet gives (the completion length assumed when the user gives none is timing.lengths').

Three groups, each from its own evidence so that one engine's rows cannot pull another engine's constants:

- the training engines' efficiencies, set per engine from published training-step times (the fit rows of
  tests/data/engine_measurements.jsonl and tests/data/megatron_measurements.jsonl; ``python
  bench/engine_calibration.py`` derives each: the median, over the rows it applies to, of the value that reproduces
  the row's s/it);
- the rollout's and the round's constants, fitted on the fit set of tests/data/time_measurements.jsonl (the fit rows of
  a shape ms-swift can run; ``python bench/time_calibration.py --fit`` searches them, with a user's own exported rows
  added by ``--rows``; held-out and fresh rows are never used);
- constants set from what the libraries publish or are counted to do, each with its source.
"""

# Set per engine from published training-step times (bench/engine_calibration.py).
# Share of the dense bf16 peak transformers' modules reach in training under DeepSpeed ZeRO, FSDP or DDP (swift rlhf's
# trainer: its forward, backward and recomputation, and the old policy's, reference's and reward models' forwards).
# From ms-swift's swift sft figures of dense models (engine_measurements.jsonl's fit rows: Qwen2.5-14B ZeRO-2 and
# ZeRO-3 on 8 A800 at 8K, Qwen2.5-7B ZeRO-3 on 4 H20 at 16K). The ZeRO stage enters through its collectives
# (timing.training), not here: ZeRO-2's and ZeRO-3's figures give the same share once ZeRO-3's prefetched gathers are
# overlapped.
TRANSFORMERS_MFU = 0.65
# The same for Megatron-Core (megatron rlhf's trainer and its log-prob forwards), from ms-swift's megatron sft / dpo
# figures of dense models whose lengths are given, without optimizer_cpu_offload (megatron_measurements.jsonl's fit
# rows: Qwen2.5-14B TP4 at 8K and Qwen2.5-7B TP4 at 32K on A100/A800, Qwen3-4B DPO TP4 at 8K). For scale:
# github.com/NVIDIA/Megatron-LM's README reports "up to 47% Model FLOP Utilization (MFU) on H100 clusters" for
# pre-training with every overlap on; the model counts recomputation's forward as work, so its share of the peak is a
# hardware-FLOPs share, higher than MFU.
MEGATRON_MFU = 0.66
# The share of MEGATRON_MFU an MoE's routed-expert matmuls reach (grouped GEMMs over the few hundred tokens each local
# expert receives, the token permutation around the all-to-alls, the router), from the MoE rows of the same file's fit
# rows whose lengths are given (one: Qwen3-30B-A3B TP4 PP2 EP4, 3.0 s/it). For scale: NVIDIA's tuned Qwen3-30B-A3B
# pre-training on 8 H100 with DeepEP reports 277 model TFLOPS per GPU, 28 % of the dense peak (NeMo AutoModel's
# performance summary, docs.nvidia.com/nemo/automodel/performance/performance-summary.md); ms-swift runs Megatron-Core
# without DeepEP or overlaps. The transformers path has no such constant: the one published MoE figure (ZeRO-3 on 16
# A800, 91.2 s/it) ran at the card's capacity with transformers<5's expert loop, and no value reproduces it
# (bench/engine_calibration.py says so).
MEGATRON_EXPERT_EFFICIENCY = 0.44
# Parameters Megatron-Core's HybridDeviceOptimizer updates per second on one node's host CPUs (optimizer_cpu_offload:
# torch's Adam on the CPU share of the states), from the same file's fit rows with optimizer_cpu_offload, with the two
# efficiencies above at their values.
MEGATRON_CPU_ADAM_PARAMS_S = 3.1e9

# Share of the dense bf16 peak the inference engines' matmuls reach: vLLM's prefill and large decoding batches,
# generate()'s prefill. They are the same dense GEMMs on the same GPU as a training forward, so they are taken to
# reach what transformers' training reaches; the fit rows cannot tell (their mean |ln error| moves by 0.003 between
# 0.3 and 0.55: prefill is a small part of their rounds).
INFERENCE_MFU = TRANSFORMERS_MFU

# Fitted on the fit set (bench/time_calibration.py --fit).
# Share of the memory bandwidth a decoding step reaches while it reads the weights and the KV cache.
BANDWIDTH_EFFICIENCY = 0.5
# Seconds per CUDA kernel that transformers' generate() launches from Python for each decoding step (eager PyTorch:
# the dispatcher, the launch and the module's Python; timing.rollout.generate_kernels counts the kernels per step).
GENERATE_KERNEL_S = 20e-6
# Seconds per generation round outside the phases: the dataloader, the chat template, rewards' Python, metrics.
ROUND_OVERHEAD_S = 2.0

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
# Parameters DeepSpeed's CPU Adam updates per second on one node's host CPUs (optimizer offload; no published swift
# rlhf figure with offload gives it apart).
CPU_ADAM_PARAMS_S = 1e9
