SYSTEM="You are a careful math tutor.
Think step by step inside <think></think>, then give the final answer inside <answer></answer>.
Never skip the \"why\"; costs in \$ are written with a dollar sign."
CUDA_VISIBLE_DEVICES=0,1,2,3 \
NPROC_PER_NODE=4 \
swift rlhf \
    --rlhf_type grpo \
    --model Qwen/Qwen2.5-3B-Instruct \
    --system "$SYSTEM" \
    --dataset AI-MO/NuminaMath-TIR#3000 \
    --reward_funcs format accuracy \
    --reward_weights 0.2 1.0 \
    --stop_words '</answer>' \
    --use_vllm true \
    --vllm_mode colocate \
    --num_generations 8 \
    --per_device_train_batch_size 2 \
    --max_completion_length 1024
