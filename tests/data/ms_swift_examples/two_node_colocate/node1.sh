# Run on the second machine: put the first machine's IP address in MASTER_ADDR.
export CUDA_VISIBLE_DEVICES=0,1,2,3
export NNODES=2
export NODE_RANK=1
export MASTER_ADDR=xxx.xxx.xxx.xxx
export MASTER_PORT=29500
export NPROC_PER_NODE=4

swift rlhf \
    --rlhf_type grpo \
    --model Qwen/Qwen2.5-3B-Instruct \
    --reward_funcs accuracy \
    --use_vllm true \
    --vllm_mode colocate \
    --vllm_gpu_memory_utilization 0.4 \
    --vllm_max_model_len 3072 \
    --tuner_type full \
    --torch_dtype bfloat16 \
    --dataset 'AI-MO/NuminaMath-TIR#2000' \
    --max_completion_length 1536 \
    --num_train_epochs 1 \
    --per_device_train_batch_size 2 \
    --learning_rate 2e-6 \
    --gradient_accumulation_steps 1 \
    --save_steps 100 \
    --logging_steps 2 \
    --num_generations 8 \
    --temperature 1.0 \
    --deepspeed zero3
