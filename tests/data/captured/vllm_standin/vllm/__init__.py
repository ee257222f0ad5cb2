"""Stand-in for vLLM on the trainer side of the server-mode captures (vLLM needs a GPU; none here).

ms-swift's VLLMClient only needs ``import vllm`` to succeed and, for the weight-sync group, vLLM's
StatelessProcessGroup; everything the captured logs show comes from real ms-swift and real torch.
"""
__version__ = "0.11.0"
