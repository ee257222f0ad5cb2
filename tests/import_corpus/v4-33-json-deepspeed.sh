CUDA_VISIBLE_DEVICES=0,1,2,3 NPROC_PER_NODE=4 swift rlhf --rlhf_type grpo --model Qwen/Qwen2.5-7B-Instruct \
  --tuner_type full --deepspeed ds_configs/zero3_custom.json \
  --dataset AI-MO/NuminaMath-TIR#1000 --reward_funcs accuracy \
  --use_vllm true --vllm_mode colocate --vllm_gpu_memory_utilization 0.3 \
  --vllm_enforce_eager true --vllm_enable_prefix_caching false --vllm_max_num_seqs 64 \
  --num_generations 8 --per_device_train_batch_size 2 --ddp_timeout 7200 --save_on_each_node true
