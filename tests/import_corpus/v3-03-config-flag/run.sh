# 3.10-4.0: --config; the file's values are appended after the command line, so they win
CUDA_VISIBLE_DEVICES=0,1 NPROC_PER_NODE=2 swift rlhf --config grpo_config.yaml --logging_steps 2
