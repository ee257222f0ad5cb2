#!/bin/bash
mkdir -p logs
CUDA_VISIBLE_DEVICES=0,1,2,3 NPROC_PER_NODE=4 \
nohup swift rlhf \
    --rlhf_type grpo \
    --model deepseek-ai/DeepSeek-R1-Distill-Qwen-7B \
    --tuner_type lora \
    --lora_rank 64 \
    --lora_alpha 128 \
    --dataset AI-MO/NuminaMath-TIR#8000 \
    --reward_funcs accuracy format cosine \
    --use_vllm true --vllm_mode colocate --vllm_gpu_memory_utilization 0.6 \
    --vllm_max_model_len 8192 \
    --max_completion_length 4096 \
    --num_generations 8 \
    --per_device_train_batch_size 2 \
    --gradient_accumulation_steps 4 \
    --save_strategy steps --save_steps 100 \
    --output_dir /data/ckpt/r1-distill-grpo > logs/train.log 2>&1 &
sleep 5
echo "started, tail -f logs/train.log"
