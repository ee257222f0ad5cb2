# '#' inside a word is not a comment; only at the start of a word it is
CUDA_VISIBLE_DEVICES=0,1 NPROC_PER_NODE=2 swift rlhf --rlhf_type grpo \
    --model Qwen/Qwen2-7B-Instruct \
    --dataset AI-MO/NuminaMath-TIR#1000 modelscope/gsm8k#500 \
    --system 'Answer with #### before the number.' \
    --reward_funcs accuracy \
    --deepspeed zero2 \
    --use_vllm true --vllm_mode colocate --vllm_gpu_memory_utilization 0.8 \
    --num_generations 4 --per_device_train_batch_size 2 # trailing remark
