CUDA_VISIBLE_DEVICES=1,2,3 \
NPROC_PER_NODE=3 \
swift rlhf \
    --rlhf_type grpo \
    --model Qwen/Qwen3-1.7B \
    --tuner_type full \
    --reward_funcs accuracy \
    --loss_scale last_round \
    --use_vllm true \
    --vllm_mode server \
    --vllm_server_host 127.0.0.1 \
    --vllm_server_port 8000 \
    --torch_dtype bfloat16 \
    --dataset AI-MO/NuminaMath-TIR#10000 \
    --split_dataset_ratio 0 \
    --max_completion_length 8192 \
    --per_device_train_batch_size 2 \
    --gradient_accumulation_steps 4 \
    --steps_per_generation 8 \
    --gradient_checkpointing_kwargs '{"use_reentrant": false}' \
    --num_generations 8 \
    --deepspeed zero2 \
    --report_to tensorboard swanlab\
    --max_turns 3
