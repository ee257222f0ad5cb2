#!/bin/bash
set -x
cd "$(dirname "$0")" 2>/dev/null || true
exec env CUDA_VISIBLE_DEVICES=0,1,2,3 NPROC_PER_NODE=4 HF_ENDPOINT=https://hf-mirror.com \
    swift rlhf --rlhf_type grpo --model Qwen/Qwen2.5-7B-Instruct \
    --dataset AI-MO/NuminaMath-TIR#3000 --reward_funcs accuracy format \
    --use_vllm true --vllm_mode colocate --num_generations 8 --per_device_train_batch_size 2
