"""Real Ray failures for the doctor (tests/data/captured/ray_*.log): `python ray_failures.py task` (a remote task
raises a RuntimeError with torch's CUDA out-of-memory message: RayTaskError(RuntimeError)) or `… actor` (an actor's
worker process exits: ActorDiedError). Run with Ray 2.60 from the ms-swift venv, RAY_USAGE_STATS_ENABLED=0."""

import os
import sys

import ray


@ray.remote
def load_shard(i):
    raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 79.35 GiB total capacity)")


@ray.remote
class Worker:
    def die(self):
        os._exit(1)


if __name__ == "__main__":
    ray.init(num_cpus=1, include_dashboard=False)
    if sys.argv[1] == "task":
        ray.get(load_shard.remote(0))
    else:
        ray.get(Worker.remote().die.remote())
