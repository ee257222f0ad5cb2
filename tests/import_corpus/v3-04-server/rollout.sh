CUDA_VISIBLE_DEVICES=0,1 swift rollout --model Qwen/Qwen2.5-7B-Instruct --vllm_tensor_parallel_size 2 \
  --vllm_gpu_memory_utilization 0.9 --port 8000
