# The rollout server: two GPUs, vLLM data parallel 2.
CUDA_VISIBLE_DEVICES=6,7 \
swift rollout \
    --model Qwen/Qwen2.5-7B-Instruct \
    --vllm_data_parallel_size 2 \
    --vllm_max_model_len 6144
