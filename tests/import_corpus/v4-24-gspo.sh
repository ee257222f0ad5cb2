CUDA_VISIBLE_DEVICES=0,1,2,3 NPROC_PER_NODE=4 swift rlhf --rlhf_type grpo --model Qwen/Qwen3-8B \
    --tuner_type lora --lora_rank 32 --lora_alpha 64 \
    --importance_sampling_level sequence --epsilon 3e-4 --epsilon_high 4e-4 --steps_per_generation 4 \
    --beta 0 --dataset AI-MO/NuminaMath-TIR#5000 --reward_funcs accuracy \
    --use_vllm true --vllm_mode colocate --vllm_enable_lora true \
    --num_generations 8 --per_device_train_batch_size 4 --log_entropy true --top_entropy_quantile 0.2
