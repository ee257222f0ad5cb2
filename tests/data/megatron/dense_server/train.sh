# Six training GPUs talk to the server on this host: DP = 6, global 48 = micro 2 x 6 x 4.
CUDA_VISIBLE_DEVICES=0,1,2,3,4,5 \
NPROC_PER_NODE=6 \
MASTER_PORT=29610 \
megatron rlhf \
    --rlhf_type grpo \
    --model Qwen/Qwen2.5-7B-Instruct \
    --dataset AI-MO/NuminaMath-TIR#5000 \
    --num_train_epochs 1 \
    --global_batch_size 48 \
    --micro_batch_size 2 \
    --steps_per_generation 2 \
    --num_generations 8 \
    --reward_funcs accuracy \
    --use_vllm true \
    --vllm_mode server \
    --vllm_server_host 127.0.0.1 \
    --vllm_server_port 8000 \
    --max_completion_length 4096 \
    --tuner_type full \
    --lr 1e-6 \
    --bf16 true \
    --beta 0.001 \
    --recompute_granularity selective \
    --finetune \
    --no_save_optim \
    --no_save_rng \
    --logging_steps 1 \
    --train_iters 200
