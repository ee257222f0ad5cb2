#!/bin/bash
PLUGIN=examples/train/grpo/plugin/plugin.py
CUDA_VISIBLE_DEVICES=0,1,2,3 \
NPROC_PER_NODE=4 \
swift rlhf \
    --rlhf_type grpo \
    --model Qwen/Qwen2.5-7B-Instruct \
    --train_type lora \
    --external_plugins $PLUGIN \
    --reward_funcs external_countdown format \
    --dataset zouxuhong/Countdown-Tasks-3to4#50000 \
    --use_vllm true \
    --vllm_mode colocate \
    --num_generations 8 \
    --per_device_train_batch_size 8 \
    --max_completion_length 1024 \
    --stop_words '</answer>' \
    --system 'You are a helpful assistant. You first think about the reasoning process in the mind and then provide the user with the answer.'
