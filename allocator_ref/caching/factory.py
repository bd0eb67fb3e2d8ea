"""``make_allocator``: the allocator the environment selects (PyTorch's allocator selection).

Its own file, above ``allocator.py`` and ``backend.py``: the allocator reads the backend setting
from ``backend.py``, and this function builds the allocator, so neither imports the other back.
"""
from __future__ import annotations

from typing import Any

from .allocator import CachingAllocator
from .backend import get_allocator_backend


def make_allocator(device: Any = None) -> Any:
    """The allocator the environment selects, built the way PyTorch would build it.

    "native": a CachingAllocator reading PYTORCH_CUDA_ALLOC_CONF (every key validated);
    "cudaMallocAsync": the stream-ordered policy (no other key is read).
    """
    if device is None:
        from ..device import open_device
        device = open_device()
    if get_allocator_backend() == "cudaMallocAsync":
        from ..policies.stream_ordered import StreamOrderedAllocator
        return StreamOrderedAllocator(device)
    return CachingAllocator(device, read_env=True)
