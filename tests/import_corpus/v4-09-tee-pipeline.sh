NPROC_PER_NODE=2 CUDA_VISIBLE_DEVICES=2,3 swift rlhf --rlhf_type grpo \
  --model meta-llama/Llama-3.1-8B-Instruct --template llama3 \
  --dataset modelscope/gsm8k#4000 --reward_funcs accuracy \
  --tuner_type lora --lora_rank 8 --lora_dropout 0.1 --torch_dtype bfloat16 \
  --use_vllm true --vllm_mode colocate --vllm_gpu_memory_utilization 0.55 \
  --num_generations 4 --per_device_train_batch_size 4 --learning_rate 5e-6 2>&1 | tee grpo-llama.log
