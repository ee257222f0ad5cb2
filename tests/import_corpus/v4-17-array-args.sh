#!/bin/bash
COMMON_ARGS=(
    --rlhf_type grpo
    --model Qwen/Qwen2.5-7B-Instruct
    --dataset "AI-MO/NuminaMath-TIR#4000"
    --reward_funcs accuracy format
)
VLLM_ARGS=(--use_vllm true --vllm_mode colocate --vllm_gpu_memory_utilization 0.45)
EXTRA="--num_generations 8 --per_device_train_batch_size 4"

CUDA_VISIBLE_DEVICES=0,1,2,3 NPROC_PER_NODE=4 swift rlhf "${COMMON_ARGS[@]}" "${VLLM_ARGS[@]}" $EXTRA \
    --logging_steps 2
