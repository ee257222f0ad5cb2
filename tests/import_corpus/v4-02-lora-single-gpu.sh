# one GPU, LoRA, no vLLM (transformers generate) - the smallest thing that runs
CUDA_VISIBLE_DEVICES=0 swift rlhf --rlhf_type grpo --model Qwen/Qwen2.5-1.5B-Instruct \
  --tuner_type lora --lora_rank 16 --lora_alpha 32 --target_modules all-linear \
  --dataset AI-MO/NuminaMath-TIR#1000 --reward_funcs accuracy format \
  --num_generations 4 --per_device_train_batch_size 4 --max_completion_length 512 \
  --learning_rate 1e-5 --logging_steps 1 --save_steps 50 --max_steps 200 --report_to none
