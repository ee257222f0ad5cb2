"""The step-time model's efficiency constants: what share of a GPU's datasheet peak the real libraries reach, and
the fixed costs no datasheet gives (the completion length assumed when the user gives none is timing.lengths'). The
first group is fitted on the fit rows of tests/data/time_measurements.jsonl only (``python bench/time_calibration.py
--fit`` searches them, with a user's own exported rows added by ``--rows``; the held-out and fresh rows are never
used); the second is set from what the libraries are known to cost, because no fit row measures those phases apart.
"""

# Fitted.
# Share of the dense bf16 peak that matmuls reach: training (forward, backward, recomputation), log-prob forwards,
# vLLM's prefill and large decoding batches (model FLOPs utilisation; Megatron and DeepSpeed report 0.3–0.55).
MFU = 0.50
# Share of the memory bandwidth a decoding step reaches while it reads the weights and the KV cache.
BANDWIDTH_EFFICIENCY = 0.50
# Seconds every vLLM decoding step costs beyond reading and computing (the scheduler, sampling, the Python between
# CUDA-graph replays). Fitted to 0: the fit rows do not tell it apart from the bandwidth share above.
DECODE_STEP_S = 0.0
# Seconds per decoder layer (and per routed expert of an MoE layer) and decoding step in transformers' generate():
# kernel launches and Python, which re-runs the whole module tree each token.
GENERATE_LAYER_S = 0.003
# Seconds per generation round outside the phases: the dataloader, the chat template, rewards' Python, metrics.
ROUND_OVERHEAD_S = 2.0

# Set, not fitted.
# Seconds per decoder layer and decoding step in vLLM's eager mode (vllm_enforce_eager: a kernel launch per op).
EAGER_LAYER_S = 0.0004
# Seconds per vLLM sleep and wake-up cycle beyond moving the weights (re-mapping its memory pool, the KV cache; ms-swift
# logs "It took 3.5 seconds to wake up" for a large model).
SLEEP_WAKE_S = 1.0
# Seconds per decoder layer to load synchronised weights into vLLM (its load_weights, per tensor in Python).
SYNC_LAYER_S = 0.01
# NCCL's latency for one small all-reduce inside a node (tensor parallelism: two per layer and decoding step).
ALLREDUCE_LATENCY_S = 15e-6
# Parameters DeepSpeed's CPU Adam updates per second on one node's host CPUs (optimizer offload).
CPU_ADAM_PARAMS_S = 1e9
