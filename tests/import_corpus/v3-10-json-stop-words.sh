CUDA_VISIBLE_DEVICES=0,1 NPROC_PER_NODE=2 swift rlhf --rlhf_type grpo --model Qwen/Qwen2.5-Math-1.5B \
  --train_type full --dataset AI-MO/NuminaMath-TIR#1000 --reward_funcs accuracy \
  --num_generations 4 --per_device_train_batch_size 4 --repetition_penalty 1.05 \
  --max_completion_length 3000 --dataset_shuffle false --warmup_ratio 0.1 --save_only_model true
