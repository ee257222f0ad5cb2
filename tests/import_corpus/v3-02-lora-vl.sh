MAX_PIXELS=602112 CUDA_VISIBLE_DEVICES=0,1,2,3 NPROC_PER_NODE=4 swift rlhf --rlhf_type grpo \
  --model Qwen/Qwen2.5-VL-3B-Instruct --train_type lora --lora_rank 8 --lora_alpha 32 --target_modules all-linear \
  --dataset lmms-lab/multimodal-open-r1-8k-verified --reward_funcs accuracy format \
  --use_vllm true --vllm_mode colocate --vllm_gpu_memory_utilization 0.6 --vllm_tensor_parallel_size 2 \
  --num_generations 4 --per_device_train_batch_size 2 --max_completion_length 1024 --freeze_vit true
