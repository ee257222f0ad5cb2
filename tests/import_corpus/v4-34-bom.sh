#!/bin/bash
# saved by an editor that writes a byte-order mark
CUDA_VISIBLE_DEVICES=0,1 NPROC_PER_NODE=2 swift rlhf --rlhf_type grpo --model Qwen/Qwen2.5-0.5B-Instruct \
  --dataset AI-MO/NuminaMath-TIR#500 --reward_funcs format --num_generations 2 --per_device_train_batch_size 2
