"""Moving bytes: collectives among the training GPUs (inside a node over NVLink or PCIe, between nodes over the
cluster's network), copies over a GPU's host link, and reads of its memory. Seconds, from bytes and the GPU's
datasheet bandwidths (GB/s = 1e9 bytes per second)."""

from __future__ import annotations

from grpo_ui.knowledge.catalog import Gpu
from grpo_ui.timing import efficiency

GB = 1e9


def intra_node_gbs(gpu: Gpu) -> float:
    """One direction of a GPU's link to its peers in a node: half its NVLink total (the datasheet counts both
    directions), or its host link when it has none (peer traffic through PCIe)."""
    return gpu.nvlink_gbs / 2 if gpu.nvlink_gbs else gpu.pcie_gbs


def all_gather_s(nbytes: float, gpu: Gpu, gpus_per_node: int, nodes: int, internode_gbs: float) -> float:
    """Every GPU ends with all ``nbytes`` (each held a 1/n part), hierarchically: the parts from other nodes cross
    the network once per node (nbytes·(N−1)/N at the node's bandwidth), the node's parts its NVLink or PCIe
    (nbytes·(g−1)/g per GPU); NCCL's ring and tree algorithms move the same bytes."""
    inside = nbytes * (gpus_per_node - 1) / gpus_per_node / (intra_node_gbs(gpu) * GB) if gpus_per_node > 1 else 0.0
    across = nbytes * (nodes - 1) / nodes / (internode_gbs * GB) if nodes > 1 else 0.0
    return inside + across


def reduce_scatter_s(nbytes: float, gpu: Gpu, gpus_per_node: int, nodes: int, internode_gbs: float) -> float:
    """The mirror of an all-gather: the same bytes cross the same links."""
    return all_gather_s(nbytes, gpu, gpus_per_node, nodes, internode_gbs)


def all_reduce_s(nbytes: float, gpu: Gpu, gpus_per_node: int, nodes: int, internode_gbs: float) -> float:
    """A reduce-scatter then an all-gather (NCCL's ring all-reduce moves 2·(n−1)/n of the bytes)."""
    return 2 * all_gather_s(nbytes, gpu, gpus_per_node, nodes, internode_gbs)


def host_copy_s(nbytes: float, gpu: Gpu) -> float:
    """Between a GPU and host memory over its host link (PCIe, or NVLink-C2C on Grace parts), one direction."""
    return nbytes / (gpu.pcie_gbs * GB)


def memory_read_s(nbytes: float, gpu: Gpu) -> float:
    """Reading (or copying) ``nbytes`` of the GPU's own memory at the bandwidth decoding reaches."""
    return nbytes / (gpu.hbm_gbs * GB * efficiency.BANDWIDTH_EFFICIENCY)


def network_s(nbytes: float, internode_gbs: float) -> float:
    """From one node to others over the cluster's network (a pipelined broadcast costs one pass)."""
    return nbytes / (internode_gbs * GB)
