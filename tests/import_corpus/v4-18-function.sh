#!/bin/bash
# a helper function that launches training with a model name
run_grpo() {
    local model=$1
    swift rlhf --rlhf_type grpo --model Qwen/Qwen2.5-3B-Instruct \
        --dataset AI-MO/NuminaMath-TIR#2000 --reward_funcs format \
        --num_generations 4 --per_device_train_batch_size 4 --max_steps 300
}
export CUDA_VISIBLE_DEVICES=0,1,2,3
export NPROC_PER_NODE=4
run_grpo
