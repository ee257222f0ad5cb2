#!/usr/bin/env bash
set -e
MODEL=Qwen/Qwen2.5-7B-Instruct
DATA="AI-MO/NuminaMath-TIR#2000"
NGEN=8
GPUS=${GPUS:-0,1,2,3}
NPROC=$(( 2 * 2 ))
GAS=$((16 / NGEN / 1))
OUT=runs/${MODEL##*/}
LR=2e-6

CUDA_VISIBLE_DEVICES=$GPUS NPROC_PER_NODE=$NPROC swift rlhf \
    --rlhf_type grpo \
    --model $MODEL \
    --dataset "$DATA" \
    --num_generations ${NGEN} \
    --gradient_accumulation_steps $GAS \
    --per_device_train_batch_size $((NGEN / 4)) \
    --learning_rate $LR \
    --reward_funcs accuracy format \
    --use_vllm true --vllm_mode colocate --vllm_gpu_memory_utilization 0.4 \
    --output_dir "runs/grpo-${NGEN}gen" \
    --tuner_type lora
