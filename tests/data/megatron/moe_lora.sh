# The same MoE with LoRA: CP 2 x TP 2 x PP 2 = 8 leaves DP 1; EP 4.
CUDA_VISIBLE_DEVICES=0,1,2,3,4,5,6,7 \
NPROC_PER_NODE=8 \
megatron rlhf \
    --rlhf_type grpo \
    --model Qwen/Qwen3-30B-A3B-Instruct-2507 \
    --merge_lora false \
    --context_parallel_size 2 \
    --tensor_model_parallel_size 2 \
    --pipeline_model_parallel_size 2 \
    --expert_model_parallel_size 4 \
    --sequence_parallel true \
    --dataset open-r1/DAPO-Math-17k-Processed \
    --num_train_epochs 1 \
    --global_batch_size 32 \
    --micro_batch_size 2 \
    --steps_per_generation 2 \
    --num_generations 8 \
    --reward_funcs accuracy format \
    --use_vllm true \
    --vllm_mode colocate \
    --vllm_gpu_memory_utilization 0.35 \
    --vllm_tensor_parallel_size 4 \
    --max_completion_length 8192 \
    --tuner_type lora \
    --lora_rank 16 \
    --lora_alpha 32 \
    --lr 2e-5 \
    --bf16 true \
    --beta 0 \
    --sleep_level 1 \
    --offload_model true \
    --offload_optimizer true \
    --recompute_granularity selective \
    --finetune \
    --no_save_optim \
    --no_save_rng \
    --logging_steps 1
