"""A real two-rank hang for the py-spy test, run under torchrun (gloo, CPU): rank 1 is stuck in a reward function,
rank 0 waits for it in an all_gather. The functions carry ms-swift's names (its reward scoring, its generation step)
so their phases read as they would in a GRPO run."""

import time

import torch.distributed as dist


def compute_rewards_per_func():
    time.sleep(600)


def _generate_completions():
    gathered = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, dist.get_rank())


dist.init_process_group("gloo")
if dist.get_rank() == 1:
    compute_rewards_per_func()
_generate_completions()
