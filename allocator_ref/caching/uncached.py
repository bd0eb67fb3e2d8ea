"""Caching switched off: every request goes straight to cudaMalloc, every free to cudaFree.

Mirrors ``NativeCachingAllocator::allocate`` / ``raw_alloc`` / ``raw_delete`` and
``uncached_allocate`` / ``uncached_delete`` of ``c10/cuda/CUDACachingAllocator.cpp``:
when ``forceUncachedAllocator()`` (the environment variable
``PYTORCH_NO_CUDA_MEMORY_CACHING=1``) or ``!isEnabled()``
(``torch.cuda.memory.caching_allocator_enable(False)``), the allocator is bypassed:
no block, no stats, no trace entry.  Useful when debugging memory errors, because a
cache hides a use-after-free from tools like compute-sanitizer.
"""
from __future__ import annotations

from typing import Any, Optional

from ..allocation import Allocation


class UncachedMixin:
    """``caching_allocator_enable``, ``raw_alloc``, ``raw_delete`` (mixed into CachingAllocator)."""

    force_uncached: bool = False      # PYTORCH_NO_CUDA_MEMORY_CACHING=1, read once (backend.py)
    _enabled: bool = True             # NativeCachingAllocator::enable_

    def caching_allocator_enable(self, value: bool = True) -> None:
        """``torch.cuda.memory.caching_allocator_enable``: switch the cache on or off."""
        if not isinstance(value, bool):
            raise TypeError(f"caching_allocator_enable expects True or False, got {value!r}")
        self._enabled = value

    def is_caching_enabled(self) -> bool:
        """False when requests bypass the cache (``forceUncachedAllocator() || !isEnabled()``)."""
        return self._enabled and not self.force_uncached

    def raw_alloc(self, nbytes: int, stream: Any = None) -> int:
        """``raw_alloc`` / ``raw_alloc_with_stream``: a bare device pointer (0 for 0 bytes)."""
        return self.malloc(nbytes, stream).ptr

    def raw_delete(self, ptr: int) -> None:
        """``raw_delete``: give back a pointer from ``raw_alloc``.

        PyTorch picks cudaFree or the cache by the mode *now*, so switching modes between
        raw_alloc and raw_delete cudaFrees a cached block (or fails to find an uncached one).
        Here the pointer says which it is: each goes back where it came from.
        """
        self.free(ptr)

    def _uncached_malloc(self, nbytes: int, stream: Any) -> Allocation:
        """``uncached_allocate``: cudaMalloc exactly ``nbytes``; no stats move.

        Out of memory here is cudaMalloc's own error (``C10_CUDA_CHECK``), not the caching
        allocator's OutOfMemoryError: there is no cache to empty and retry.
        """
        ptr = self.device.malloc(nbytes)
        allocation = Allocation(ptr=ptr, size=nbytes, requested_size=nbytes, stream=stream,
                                allocator=self, _block=None)
        self._live[ptr] = allocation
        return allocation

    def _uncached_free(self, allocation: Allocation) -> Optional[bool]:
        """``uncached_delete``: cudaFree at once (no stream ordering: the caller synchronizes)."""
        self.device.free(allocation.ptr)
        del self._live[allocation.ptr]
        allocation.freed = True
        return True
