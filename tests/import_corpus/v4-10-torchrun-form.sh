# the DLC style: torchrun on ms-swift's rlhf.py entry point
PYTHONPATH=. torchrun \
    --nproc_per_node=8 \
    --nnodes=1 \
    --node_rank=0 \
    --master_port=29600 \
    /opt/ms-swift/swift/cli/rlhf.py \
    --rlhf_type grpo \
    --model Qwen/Qwen2.5-7B \
    --tuner_type full \
    --dataset AI-MO/NuminaMath-TIR#10000 \
    --torch_dtype bfloat16 \
    --num_train_epochs 1 \
    --max_length 2048 \
    --vllm_max_model_len 2048 \
    --per_device_train_batch_size 4 \
    --learning_rate 1e-6 \
    --reward_funcs accuracy format \
    --num_generations 32 \
    --use_vllm true \
    --vllm_mode colocate \
    --vllm_gpu_memory_utilization 0.3 \
    --vllm_tensor_parallel_size 4 \
    --sleep_level 1 \
    --deepspeed zero3_offload \
    --temperature 1.0 \
    --top_p 0.85
