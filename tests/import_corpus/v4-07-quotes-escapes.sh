# single quotes, double quotes, backslash escapes and $'...' strings
CUDA_VISIBLE_DEVICES=0,1 NPROC_PER_NODE=2 swift rlhf --rlhf_type grpo \
  --model "Qwen/Qwen2.5-7B-Instruct" \
  --dataset 'data/train set.jsonl' data/other\ set.jsonl \
  --system 'It'\''s "quoted" and has a \backslash' \
  --stop_words $'\n\nUser:' "</s>" \
  --reward_funcs accuracy format \
  --use_vllm true --vllm_mode colocate \
  --num_generations 4 --per_device_train_batch_size 2
