# a comment line inside the continued command ends it: bash runs --save_steps 50 as its own (failing) command
CUDA_VISIBLE_DEVICES=0,1 NPROC_PER_NODE=2 swift rlhf \
    --rlhf_type grpo \
    --model Qwen/Qwen2.5-1.5B-Instruct \
    --dataset AI-MO/NuminaMath-TIR#1000 \
    --reward_funcs accuracy \
    --num_generations 4 \
    --per_device_train_batch_size 2 \
    # --use_vllm true \
    --save_steps 50
