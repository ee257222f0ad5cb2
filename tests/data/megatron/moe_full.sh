# A 30B-A3B MoE on 8 GPUs: TP 4 x PP 2 leaves DP 1; EP 4 splits the experts.
CUDA_VISIBLE_DEVICES=0,1,2,3,4,5,6,7 \
NPROC_PER_NODE=8 \
PYTORCH_CUDA_ALLOC_CONF='expandable_segments:True' \
megatron rlhf \
    --rlhf_type grpo \
    --model Qwen/Qwen3-30B-A3B-Instruct-2507 \
    --tensor_model_parallel_size 4 \
    --pipeline_model_parallel_size 2 \
    --expert_model_parallel_size 4 \
    --context_parallel_size 1 \
    --sequence_parallel true \
    --dataset open-r1/DAPO-Math-17k-Processed \
    --num_train_epochs 1 \
    --global_batch_size 16 \
    --micro_batch_size 1 \
    --steps_per_generation 1 \
    --num_generations 8 \
    --reward_funcs accuracy format \
    --use_vllm true \
    --vllm_mode colocate \
    --vllm_gpu_memory_utilization 0.45 \
    --vllm_tensor_parallel_size 8 \
    --vllm_max_model_len 12288 \
    --max_length 4096 \
    --max_completion_length 8192 \
    --tuner_type full \
    --lr 1e-6 \
    --bf16 true \
    --beta 0 \
    --importance_sampling_level sequence \
    --epsilon 3e-4 \
    --epsilon_high 4e-4 \
    --sleep_level 2 \
    --offload_model true \
    --offload_optimizer true \
    --optimizer_cpu_offload true \
    --use_precision_aware_optimizer \
    --recompute_granularity selective \
    --finetune \
    --no_save_optim \
    --no_save_rng \
    --logging_steps 1
