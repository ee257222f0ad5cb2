# Node 0 of 2: the same arguments on both nodes, only NODE_RANK (and node 1's MASTER_ADDR) differ.
PYTORCH_CUDA_ALLOC_CONF='expandable_segments:True' \
CUDA_VISIBLE_DEVICES=0,1,2,3 \
NNODES=2 \
NODE_RANK=0 \
MASTER_ADDR=127.0.0.1 \
MASTER_PORT=29500 \
NPROC_PER_NODE=4 \
megatron rlhf \
    --rlhf_type grpo \
    --model Qwen/Qwen2.5-14B-Instruct \
    --tensor_model_parallel_size 4 \
    --sequence_parallel true \
    --dataset AI-MO/NuminaMath-TIR \
    --num_train_epochs 1 \
    --global_batch_size 16 \
    --micro_batch_size 1 \
    --num_generations 8 \
    --reward_funcs accuracy \
    --use_vllm true \
    --vllm_mode colocate \
    --vllm_gpu_memory_utilization 0.5 \
    --vllm_tensor_parallel_size 4 \
    --tuner_type full \
    --lr 1e-6 \
    --min_lr 1e-7 \
    --lr_warmup_fraction 0.05 \
    --output_dir megatron_output/qwen14b-grpo \
    --recompute_granularity selective \
    --finetune true \
    --no_save_optim true \
    --no_save_rng true \
    --save_steps 50 \
    --attention_backend flash
