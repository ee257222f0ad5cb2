# rollout node: two vLLM engines of TP 2 on four GPUs
CUDA_VISIBLE_DEVICES=0,1,2,3 \
swift rollout \
    --model Qwen/Qwen2.5-7B-Instruct \
    --vllm_tensor_parallel_size 2 \
    --vllm_data_parallel_size 2 \
    --vllm_max_model_len 6144 \
    --vllm_gpu_memory_utilization 0.85 \
    --port 8001
