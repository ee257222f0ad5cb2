export CUDA_VISIBLE_DEVICES=0,1
python -m torch.distributed.run --nproc_per_node 2 --master_port 29501 swift/cli/rlhf.py \
  --rlhf_type grpo --model Qwen/Qwen2.5-0.5B-Instruct --dataset AI-MO/NuminaMath-TIR#500 \
  --reward_funcs format --num_generations 4 --per_device_train_batch_size 2 --max_steps 20 --logging_steps 1
