#!/bin/bash
# Ray mode, train and rollout sharing four GPUs.
export CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0,1,2,3}
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
megatron rlhf --use_ray true --config "$HERE/grpo_colocate.yaml"
