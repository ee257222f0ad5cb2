"""What grpo-ui knows about the world, independent of any one job: model architectures and GPUs (catalog.py with
data/), ms-swift's release requirements (compat.py) and DeepSpeed/FSDP configurations (engines.py)."""
