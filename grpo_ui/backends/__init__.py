"""Execution backends: where and how a rendered job runs (``base.Backend`` is the interface)."""
