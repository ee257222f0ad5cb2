#!/bin/bash
# rollout and training on one 8-GPU machine: server on GPUs 0-1 in the background, trainer on 2-7
CUDA_VISIBLE_DEVICES=0,1 \
swift rollout \
    --model Qwen/Qwen3-4B \
    --vllm_data_parallel_size 2 \
    --vllm_max_model_len 8192 &

sleep 60

CUDA_VISIBLE_DEVICES=2,3,4,5,6,7 \
NPROC_PER_NODE=6 \
swift rlhf \
    --rlhf_type grpo \
    --model Qwen/Qwen3-4B \
    --reward_funcs accuracy format \
    --use_vllm true \
    --vllm_mode server \
    --vllm_server_host 127.0.0.1 \
    --vllm_server_port 8000 \
    --tuner_type full \
    --deepspeed zero2 \
    --dataset AI-MO/NuminaMath-TIR#6000 \
    --num_generations 12 \
    --per_device_train_batch_size 2 \
    --steps_per_generation 4 \
    --max_completion_length 4096 \
    --learning_rate 1e-6
wait
