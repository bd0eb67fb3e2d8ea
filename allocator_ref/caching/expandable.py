"""Expandable segments: one growing virtual range per (stream, pool) instead of many cudaMallocs.

Mirrors ``ExpandableSegment`` (see PyTorch's ``Note [Expandable Segments]``).  The
``DeviceCachingAllocator`` functions that use it (``find_expandable_block``, ``map_block``,
``try_allocate_expandable_block``, ``unmap_block``, ``release_expandable_segment``) are
members of ``DeviceCachingAllocator`` (device_caching_allocator.py), as in PyTorch.

The idea: reserve a virtual address range as big as 1.125x the whole GPU
(``cuMemAddressReserve``, costs no memory), then back it with physical pages
(``cuMemCreate`` + ``cuMemMap`` + ``cuMemSetAccess``) only where blocks need
them.  Pages are 2 MiB in the small pool and ``large_segment_size`` (20 MiB)
in the large pool.  Because a segment can grow at its end, a new request can
extend the last free block instead of needing a fresh segment: the
fragmentation of "many small segments" goes away.  Unmapped address space is
kept as *unmapped blocks* in ``pool.unmapped``.
"""
from __future__ import annotations

from typing import Any, Optional

from ..device.errors import CudaOutOfMemoryError
from .block import Block, BlockPool
from .config import kSmallBuffer


class ExpandableSegment:
    """A reserved virtual range whose pages are mapped on demand (``ExpandableSegment``)."""

    def __init__(self, device: Any, stream: Any, page_size: int) -> None:
        total = device.info.total_memory
        self.device = device
        self.stream = stream
        self.page_size = page_size
        # Enough handles to cover 1.125x the GPU: the segment can never run out of address space.
        self.max_handles = -(-(total + total // 8) // page_size)
        self.ptr = device.address_reserve(self.size(), 0)   # cuMemAddressReserve(&ptr, size, 0, 0, 0)
        self.handles: list[Optional[int]] = []

    def size(self) -> int:
        return self.page_size * self.max_handles

    def __repr__(self) -> str:
        mapped = sum(1 for h in self.handles if h is not None)
        return (f"ExpandableSegment(ptr={self.ptr:#x}, {mapped} of {self.max_handles} pages of "
                f"{self.page_size >> 20} MiB mapped, stream={self.stream.handle})")

    def map(self, ptr: int, size: int) -> int:
        """Map pages covering [ptr, ptr+size); returns the bytes mapped from ``ptr`` (0 = out of memory)."""
        first = (ptr - self.ptr) // self.page_size
        last = -(-(ptr - self.ptr + size) // self.page_size)
        if len(self.handles) < last:
            self.handles.extend([None] * (last - len(self.handles)))
        created = []
        for i in range(first, last):
            try:
                self.handles[i] = self.device.mem_create(self.page_size)   # cuMemCreate
            except CudaOutOfMemoryError:
                for j in created:                                          # undo this call only
                    self.device.mem_release(self.handles[j])
                    self.handles[j] = None
                self._trim_handles()
                return 0
            created.append(i)
        for i in range(first, last):
            self.device.mem_map(self.ptr + i * self.page_size, self.page_size, self.handles[i])  # cuMemMap
        self.device.mem_set_access(self.ptr + first * self.page_size,
                                   (last - first) * self.page_size)                       # cuMemSetAccess
        return (last - first) * self.page_size

    def unmap(self, ptr: int, size: int) -> tuple[int, int]:
        """Unmap the whole pages inside [ptr, ptr+size); returns (start, bytes) unmapped."""
        first = -(-(ptr - self.ptr) // self.page_size)
        last = (ptr - self.ptr + size) // self.page_size
        if first >= last:
            return ptr, 0
        # Work queued on the segment's stream may still use the pages: wait for it first
        # (ExpandableSegment::unmapHandles).  A destroyed stream cannot be waited on, but its
        # queued work still runs: wait for the whole device, as unmapHandles does without a stream.
        if getattr(self.stream, "destroyed", False):
            self.device.synchronize()
        else:
            self.stream.synchronize()
        for i in range(first, last):
            self.device.mem_unmap(self.ptr + i * self.page_size, self.page_size)   # cuMemUnmap
            self.device.mem_release(self.handles[i])                                # cuMemRelease
            self.handles[i] = None
        self._trim_handles()
        return self.ptr + first * self.page_size, (last - first) * self.page_size

    def _trim_handles(self) -> None:
        while self.handles and self.handles[-1] is None:
            self.handles.pop()

    def release(self) -> None:
        """The destructor: unmap everything left and give the address range back."""
        for i, handle in enumerate(self.handles):
            if handle is not None:
                self.device.mem_unmap(self.ptr + i * self.page_size, self.page_size)
                self.device.mem_release(handle)
        self.handles = []
        self.device.address_free(self.ptr, self.size())                  # cuMemAddressFree


def allocatable(block: Optional[Block]) -> bool:
    return (block is not None and not block.allocated and block.event_count == 0
            and not block.stream_uses)


def expandable_size(block: Block) -> int:
    """Best fit counts the unmapped space right after a block as part of it."""
    nxt = block.next
    return block.size + (nxt.size if nxt is not None and not nxt.mapped else 0)


def is_expandable_segments_active(config, pool: BlockPool) -> bool:
    """``is_expandable_segments_active``: the setting is on and the pool's memory does not come from
    a custom allocator (a MemPool's ``CUDAPluggableAllocator`` cannot map pages).  A plain function of
    the config and the pool, so DeviceCachingAllocator keeps only PyTorch's members."""
    owner = pool.owner_PrivatePool
    return config.expandable_segments and (owner is None or owner.allocator is None)
