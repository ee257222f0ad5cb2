# a reward registered in our own plugin file
CUDA_VISIBLE_DEVICES=0,1,2,3 \
NPROC_PER_NODE=4 \
swift rlhf \
    --rlhf_type grpo \
    --model Qwen/Qwen2.5-7B-Instruct \
    --external_plugins plugin/my_rewards.py \
    --reward_funcs external_math_acc external_length_penalty format \
    --reward_weights 1.0 0.2 0.5 \
    --use_vllm true \
    --vllm_mode colocate \
    --vllm_gpu_memory_utilization 0.5 \
    --dataset ./data/train.jsonl \
    --val_dataset ./data/val.jsonl \
    --num_generations 8 \
    --per_device_train_batch_size 2 \
    --eval_strategy steps \
    --eval_steps 100
