# Eight GPUs, no model parallelism: DP = 8 // (1 * 1 * 1) = 8.
# Batch sizes count completions: global 64 = micro 2 x DP 8 x 4 micro-steps;
# a rollout is 64 x 2 steps = 128 completions, 128 / 8 = 16 prompts.
CUDA_VISIBLE_DEVICES=0,1,2,3,4,5,6,7 \
NPROC_PER_NODE=8 \
MASTER_PORT=29610 \
megatron rlhf \
    --rlhf_type grpo \
    --model Qwen/Qwen2.5-7B-Instruct \
    --tensor_model_parallel_size 1 \
    --pipeline_model_parallel_size 1 \
    --context_parallel_size 1 \
    --dataset AI-MO/NuminaMath-TIR#5000 \
    --num_train_epochs 1 \
    --global_batch_size 64 \
    --micro_batch_size 2 \
    --steps_per_generation 2 \
    --num_generations 8 \
    --reward_funcs accuracy format \
    --use_vllm true \
    --vllm_mode colocate \
    --vllm_gpu_memory_utilization 0.6 \
    --vllm_max_model_len 6144 \
    --max_length 2048 \
    --max_completion_length 4096 \
    --tuner_type full \
    --lr 1e-6 \
    --bf16 true \
    --beta 0.001 \
    --loss_type grpo \
    --sleep_level 2 \
    --offload_model true \
    --offload_optimizer true \
    --offload_bridge false \
    --recompute_granularity selective \
    --finetune \
    --no_save_optim \
    --no_save_rng \
    --attention_backend flash \
    --padding_free true \
    --cross_entropy_loss_fusion true \
    --logging_steps 1 \
    --log_completions true \
    --train_iters 200 \
    --save_steps 100
