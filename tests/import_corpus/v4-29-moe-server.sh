#!/bin/bash
# MoE policy, two servers on the same host (ports 8000/8001), explicit NCCL group ports
NPROC_PER_NODE=8 \
CUDA_VISIBLE_DEVICES=0,1,2,3,4,5,6,7 \
swift rlhf \
    --rlhf_type grpo \
    --model Qwen/Qwen3-30B-A3B \
    --tuner_type lora \
    --lora_rank 16 \
    --use_vllm true \
    --vllm_mode server \
    --vllm_server_host 10.0.3.7 10.0.3.7 \
    --vllm_server_port 8000 8001 \
    --vllm_server_group_port 51300 51301 \
    --dataset AI-MO/NuminaMath-TIR#5000 \
    --reward_funcs accuracy \
    --num_generations 8 \
    --per_device_train_batch_size 2 \
    --deepspeed zero3 \
    --max_completion_length 2048
