#!/bin/bash
# Ray mode, four training GPUs and four rollout GPUs.
export CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0,1,2,3,4,5,6,7}
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
megatron rlhf --use_ray true --config "$HERE/grpo_separate.yaml"
