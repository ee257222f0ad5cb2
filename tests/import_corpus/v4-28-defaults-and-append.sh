#!/bin/bash
: "${LR:=3e-6}"
BATCH=${BATCH-2}
REWARDS="accuracy"
REWARDS+=" format"
declare -x CUDA_VISIBLE_DEVICES=0,1,2,3
declare -x NPROC_PER_NODE=4
unset TEMP_VAR
swift rlhf --rlhf_type grpo --model Qwen/Qwen2.5-3B-Instruct --dataset AI-MO/NuminaMath-TIR#2500 \
    --reward_funcs $REWARDS --per_device_train_batch_size ${BATCH} --learning_rate ${LR:-1e-5} \
    --num_generations 8 --use_vllm true --vllm_mode colocate ${DEBUG:+--logging_steps 1} --save_steps 100
