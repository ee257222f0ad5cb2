CUDA_VISIBLE_DEVICES=0,1,2,3,4,5,6,7 NPROC_PER_NODE=8 swift rlhf --rlhf_type grpo \
  --model Qwen/Qwen2.5-7B-Instruct --dataset AI-MO/NuminaMath-TIR#8000 --reward_funcs accuracy format repetition \
  --use_vllm true --vllm_mode colocate --vllm_gpu_memory_utilization 0.4 \
  --per_device_train_batch_size 4 --generation_batch_size 256 --num_generations 16 \
  --num_generations_eval 4 --split_dataset_ratio 0.02 --per_device_eval_batch_size 4 \
  --eval_strategy steps --eval_steps 50 --save_strategy steps --save_steps 50 --warmup_steps 10 \
  --lr_scheduler_type cosine --weight_decay 0.01 --max_grad_norm 1.0
