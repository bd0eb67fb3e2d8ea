"""A custom allocator for a private pool: ``torch.cuda.memory.CUDAPluggableAllocator``.

PyTorch loads two C functions (``alloc(size, device, stream)`` and
``free(ptr, size, device, stream)``) and a ``MemPool(allocator)`` gets its
segments from them instead of ``cudaMalloc`` (``allocPrimitive``) and gives
them back through them in ``release_block``.  NCCL's ``ncclMemAlloc`` is used
this way so that the buffers can be registered with the network once.

Here the two functions are Python callables.  ``alloc`` returns a device
pointer, or 0/None when it has no memory (the caching allocator then treats it
as ``cudaErrorMemoryAllocation``).  :func:`device_allocator` builds one on a
device's ``malloc``/``free`` and counts its calls.
"""
from __future__ import annotations

from typing import Any, Callable, Optional

from ..device.errors import CudaOutOfMemoryError
from ..editions.messages import translator

tr = translator("doctor")          # the repr's counts in the reader's language


class PluggableAllocator:
    """Alloc/free functions for a custom-allocator ``MemPool``; counts calls and live bytes."""

    def __init__(self, alloc_fn: Callable[[int], Optional[int]], free_fn: Callable[[int], None],
                 name: str = "custom") -> None:
        if not callable(alloc_fn) or not callable(free_fn):
            raise TypeError("PluggableAllocator(alloc_fn, free_fn): both must be callables "
                            "(alloc_fn(size) -> ptr or None, free_fn(ptr) -> None)")
        self.alloc_fn, self.free_fn, self.name = alloc_fn, free_fn, name
        self.alloc_calls = 0
        self.free_calls = 0
        self.live: dict[int, int] = {}          # ptr -> size, what it handed out and got no free for

    def raw_alloc(self, size: int) -> Optional[int]:
        self.alloc_calls += 1
        ptr = self.alloc_fn(size)
        if not ptr:
            return None
        self.live[ptr] = size
        return ptr

    def raw_delete(self, ptr: int) -> None:
        if ptr not in self.live:
            raise ValueError(f"{self.name}: free of {ptr:#x}, which this allocator did not hand out")
        self.free_calls += 1
        del self.live[ptr]
        self.free_fn(ptr)

    def __repr__(self) -> str:
        # the counts in the reader's language (chapter 8 prints the allocator); the class and name are code
        counts = tr("{allocs} allocs, {frees} frees, {live} bytes live", allocs=self.alloc_calls,
                    frees=self.free_calls, live=sum(self.live.values()))
        return f"PluggableAllocator({self.name!r}, {counts})"


def device_allocator(device: Any, name: str = "device malloc") -> PluggableAllocator:
    """A PluggableAllocator on ``device.malloc`` / ``device.free`` (out of memory -> None),
    the shape of ``ncclMemAlloc``/``ncclMemFree`` for the course's examples."""
    def alloc(size: int) -> Optional[int]:
        try:
            return device.malloc(size)
        except CudaOutOfMemoryError:
            return None
    return PluggableAllocator(alloc, device.free, name)
