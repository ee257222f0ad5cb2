CUDA_VISIBLE_DEVICES=0,1,2,3 swift rollout --model Qwen/Qwen2.5-32B-Instruct \
    --vllm_tensor_parallel_size 4 --vllm_data_parallel_size 1 --port 8000
