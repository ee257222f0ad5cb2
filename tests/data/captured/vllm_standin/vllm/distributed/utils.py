"""Like vLLM's StatelessProcessGroup.create: the weight-sync group's rendezvous is a torch TCPStore on the rollout
server's group port, the rollout server being the store's master; the trainer joins as a client."""

import os
from datetime import timedelta

from torch.distributed import TCPStore


class StatelessProcessGroup:
    @staticmethod
    def create(host, port, rank, world_size, **kwargs):
        timeout = timedelta(seconds=float(os.environ.get("STANDIN_STORE_TIMEOUT_S", "300")))
        return TCPStore(host_name=host, port=port, world_size=world_size, is_master=(rank == 0), timeout=timeout)
