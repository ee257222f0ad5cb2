NGPU=4
CUDA_VISIBLE_DEVICES=0,1,2,3 NPROC_PER_NODE=$NGPU swift rlhf --rlhf_type grpo \
  --model Qwen/Qwen2.5-3B-Instruct --train_type full --deepspeed zero2 \
  --dataset AI-MO/NuminaMath-TIR#3000 --reward_funcs accuracy \
  --per_device_train_batch_size 4 --steps_per_generation $((NGPU * 2)) --num_generations 8 \
  --use_vllm true --vllm_mode colocate --advantage_estimator reinforce_plus_plus --scale_rewards batch \
  --importance_sampling_level sequence --num_iterations 2 --epsilon 0.2
