torchrun --nproc_per_node 4 --master_port 29502 swift/cli/rlhf.py --rlhf_type grpo \
  --model Qwen/Qwen2.5-3B-Instruct --train_type lora --dataset AI-MO/NuminaMath-TIR#1000 \
  --reward_funcs format --num_generations 4 --per_device_train_batch_size 4 --use_vllm true --vllm_mode colocate
