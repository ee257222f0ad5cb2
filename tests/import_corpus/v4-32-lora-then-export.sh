#!/bin/bash
# train, then merge the adapter: two swift commands, only the first is GRPO
OUT=output/grpo-lora
CUDA_VISIBLE_DEVICES=0,1 NPROC_PER_NODE=2 swift rlhf --rlhf_type grpo \
    --model Qwen/Qwen2.5-1.5B-Instruct --tuner_type lora --dataset AI-MO/NuminaMath-TIR#2000 \
    --reward_funcs accuracy --num_generations 4 --per_device_train_batch_size 2 --output_dir $OUT \
    --add_version false
swift export --adapters $OUT/checkpoint-100 --merge_lora true
