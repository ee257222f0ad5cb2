#!/bin/bash
export NNODES=2
export NODE_RANK=1
export MASTER_ADDR=10.8.0.2
export MASTER_PORT=29555
export NPROC_PER_NODE=8
export CUDA_VISIBLE_DEVICES=0,1,2,3,4,5,6,7
export NCCL_SOCKET_IFNAME=eth0
export NCCL_IB_DISABLE=1
swift rlhf --rlhf_type grpo --model Qwen/Qwen2.5-14B-Instruct --train_type full --deepspeed zero3 \
    --dataset AI-MO/NuminaMath-TIR#20000 --reward_funcs accuracy format --num_generations 8 \
    --per_device_train_batch_size 2 --use_vllm true --vllm_mode colocate --vllm_gpu_memory_utilization 0.4 \
    --sleep_level 1 --offload_optimizer true --offload_model true --save_on_each_node true \
    --output_dir /local/ckpt/grpo14b
