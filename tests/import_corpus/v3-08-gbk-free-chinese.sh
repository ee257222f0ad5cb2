# 中文注释：单机四卡 GRPO 训练（UTF-8 保存）
CUDA_VISIBLE_DEVICES=0,1,2,3 NPROC_PER_NODE=4 swift rlhf --rlhf_type grpo \
  --model Qwen/Qwen2.5-7B-Instruct --train_type lora \
  --system '你是一个数学助手，请一步一步思考。' \
  --dataset AI-MO/NuminaMath-TIR#3000 --reward_funcs accuracy format \
  --use_vllm true --vllm_mode colocate --vllm_gpu_memory_utilization 0.5 \
  --num_generations 8 --per_device_train_batch_size 2
