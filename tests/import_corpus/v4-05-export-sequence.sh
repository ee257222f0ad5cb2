# export and later assignments; a value changed after export is what swift sees
export CUDA_VISIBLE_DEVICES=0,1,2,3
export NPROC_PER_NODE=4
export WANDB_PROJECT=grpo-math
export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
WANDB_PROJECT=grpo-math-v2
NOT_EXPORTED=ignored

swift rlhf \
    --rlhf_type grpo \
    --model Qwen/Qwen3-8B \
    --tuner_type full \
    --deepspeed zero3 \
    --dataset open-r1/DAPO-Math-17k-Processed#4000 \
    --reward_funcs accuracy \
    --use_vllm true \
    --vllm_mode colocate \
    --vllm_tensor_parallel_size 2 \
    --vllm_gpu_memory_utilization 0.45 \
    --sleep_level 1 \
    --offload_model true \
    --offload_optimizer true \
    --num_generations 8 \
    --per_device_train_batch_size 4 \
    --beta 0.0 \
    --loss_type dapo \
    --epsilon_high 0.28 \
    --report_to wandb
