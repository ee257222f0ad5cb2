NNODES=2 NODE_RANK=0 MASTER_ADDR=192.168.10.5 MASTER_PORT=29500 CUDA_VISIBLE_DEVICES=0,1,2,3,4,5,6,7 NPROC_PER_NODE=8 \
swift rlhf --rlhf_type grpo --model Qwen/Qwen2.5-32B-Instruct --reward_funcs accuracy \
    --use_vllm true --vllm_mode server \
    --vllm_server_host 192.168.10.21 192.168.10.22 --vllm_server_port 8000 8001 \
    --dataset AI-MO/NuminaMath-TIR#1000 --max_completion_length 2048 --per_device_train_batch_size 1 \
    --gradient_accumulation_steps 1 --learning_rate 1e-6 --num_generations 4 --deepspeed zero3 \
    --tuner_type full --beta 0.0 --log_completions true
