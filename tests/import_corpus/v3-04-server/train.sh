CUDA_VISIBLE_DEVICES=2,3,4,5,6,7 NPROC_PER_NODE=6 swift rlhf --rlhf_type grpo --model Qwen/Qwen2.5-7B-Instruct \
  --train_type full --deepspeed zero2 --reward_funcs accuracy --use_vllm true --vllm_mode server \
  --vllm_server_host 127.0.0.1 --vllm_server_port 8000 --dataset AI-MO/NuminaMath-TIR#4000 \
  --num_generations 12 --per_device_train_batch_size 2 --async_generate true --max_completion_length 2048
