# trainer: talks to the rollout node over HTTP (8001) and NCCL (51216)
CUDA_VISIBLE_DEVICES=0,1,2,3,4,5,6,7 \
NPROC_PER_NODE=8 \
swift rlhf \
    --rlhf_type grpo \
    --model Qwen/Qwen2.5-7B-Instruct \
    --reward_funcs accuracy \
    --use_vllm true \
    --vllm_mode server \
    --vllm_server_host 10.1.2.3 \
    --vllm_server_port 8001 \
    --vllm_server_timeout 600 \
    --tuner_type full \
    --deepspeed zero3 \
    --dataset AI-MO/NuminaMath-TIR#10000 \
    --max_completion_length 4096 \
    --per_device_train_batch_size 2 \
    --gradient_accumulation_steps 2 \
    --num_generations 16 \
    --learning_rate 1e-6 \
    --beta 0.001 \
    --async_generate true
