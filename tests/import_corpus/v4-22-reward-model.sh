CUDA_VISIBLE_DEVICES=0,1,2,3,4,5,6,7 NPROC_PER_NODE=8 swift rlhf --rlhf_type grpo \
  --model Qwen/Qwen2.5-7B-Instruct --tuner_type full --deepspeed zero3 \
  --reward_model Shanghai_AI_Laboratory/internlm2-7b-reward --reward_model_plugin genrm \
  --reward_funcs format --reward_weights 0.5 1.0 \
  --dataset AI-ModelScope/alpaca-gpt4-data-en#3000 \
  --use_vllm true --vllm_mode colocate --vllm_gpu_memory_utilization 0.35 --sleep_level 1 \
  --num_generations 8 --per_device_train_batch_size 2 --beta 0.04
