"""Imported by ms-swift's rollout utilities; never used in the captures (no LoRA on a vLLM server here)."""


class LoRARequest:
    pass
