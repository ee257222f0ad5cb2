CUDA_VISIBLE_DEVICES=0,1 NPROC_PER_NODE=2 \
swift rlhf --rlhf_type grpo --model Qwen/Qwen2.5-1.5B-Instruct \
  --advantage_estimator rloo --kl_in_reward true --scale_rewards none \
  --dataset AI-MO/NuminaMath-TIR#3000 --reward_funcs accuracy format \
  --use_vllm true --vllm_mode colocate --num_generations 8 --per_device_train_batch_size 8 \
  --learning_rate 1e-6 --seed 1234 --gradient_checkpointing false
