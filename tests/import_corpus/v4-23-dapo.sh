# DAPO-style: clip-higher, dynamic sampling, overlong shaping
export CUDA_VISIBLE_DEVICES=0,1,2,3,4,5,6,7
export NPROC_PER_NODE=8
MAXLEN=4096
swift rlhf --rlhf_type grpo \
  --model Qwen/Qwen2.5-Math-7B --tuner_type full --deepspeed zero2 \
  --dataset open-r1/DAPO-Math-17k-Processed \
  --reward_funcs accuracy soft_overlong \
  --soft_max_length $MAXLEN --soft_cache_length $((MAXLEN / 4)) \
  --max_completion_length $MAXLEN \
  --loss_type dapo --epsilon 0.2 --epsilon_high 0.28 \
  --dynamic_sample true --max_resample_times 3 --overlong_filter true \
  --beta 0 \
  --use_vllm true --vllm_mode colocate --vllm_gpu_memory_utilization 0.6 \
  --num_generations 16 --per_device_train_batch_size 4 --gradient_accumulation_steps 4
