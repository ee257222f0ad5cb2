# VL 3B with offload (field report 002 style)
CUDA_VISIBLE_DEVICES=6,7 \
NPROC_PER_NODE=2 \
swift rlhf \
    --rlhf_type grpo \
    --model Qwen/Qwen2.5-VL-3B-Instruct \
    --tuner_type lora \
    --deepspeed zero3_offload \
    --offload_optimizer true \
    --offload_model true \
    --move_model_batches 16 \
    --use_vllm true \
    --vllm_mode colocate \
    --vllm_gpu_memory_utilization 0.5 \
    --sleep_level 1 \
    --dataset lmms-lab/multimodal-open-r1-8k-verified \
    --reward_funcs accuracy format \
    --per_device_train_batch_size 2 \
    --num_generations 4 \
    --dataloader_num_workers 16
