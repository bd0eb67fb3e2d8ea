"""Expandable segments: one growing virtual range per (stream, pool) instead of many cudaMallocs.

Mirrors ``ExpandableSegment`` and the ``DeviceCachingAllocator`` functions
``find_expandable_block``, ``map_block``, ``try_allocate_expandable_block``,
``unmap_block`` and ``release_expandable_segment`` (spec section 8).

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


def _allocatable(block: Optional[Block]) -> bool:
    return (block is not None and not block.allocated and block.event_count == 0
            and not block.stream_uses)


def _expandable_size(block: Block) -> int:
    """Best fit counts the unmapped space right after a block as part of it."""
    nxt = block.next
    return block.size + (nxt.size if nxt is not None and not nxt.mapped else 0)


class ExpandableMixin:
    """The caching allocator's expandable-segment functions (mixed into CachingAllocator)."""

    def _pick_expandable_candidate(self, pool: BlockPool, index: int, block: Block, stream_key: int):
        """The expandable part of ``get_free_block``."""
        if self.config.expandable_segments:
            # Prefer a block that is not the growable tail of a segment when it fits as well.
            while block.expandable_segment is not None:
                nxt = pool.block_at(index + 1)
                if nxt is None or nxt.stream_key != stream_key or \
                        not _expandable_size(nxt) < _expandable_size(block):
                    break
                index, block = index + 1, nxt
            return index, block
        # Expandable segments were switched off: only non-expandable blocks may be used.
        while True:
            index += 1
            block = pool.block_at(index)
            if block is None or block.stream_key != stream_key:
                return index, None
            if block.expandable_segment is None:
                return index, block

    def find_expandable_block(self, stream: Any, pool: BlockPool, size: int) -> Block:
        """``find_expandable_block``: lowest address with ``size`` free-or-unmapped bytes, else a new segment."""
        def has_room(block: Optional[Block]) -> bool:
            room = 0
            while room < size and _allocatable(block):
                room += block.size
                block = block.next
            return room >= size

        start = pool.unmapped.bisect_left((stream.handle, 0))
        for entry in pool.unmapped[start:]:
            if entry[0] != stream.handle:
                break
            candidate = entry[2]
            if _allocatable(candidate.prev):
                candidate = candidate.prev      # a free block just before the unmapped range can join it
            if has_room(candidate):
                return candidate
        page = kSmallBuffer if pool.is_small else self.config.large_segment_size
        segment = ExpandableSegment(self.device, stream, page)
        self.expandable_segments_.append(segment)
        candidate = Block(segment.ptr, segment.size(), stream, stream.handle, pool,
                          expandable_segment=segment, mapped=False)
        pool.add_unmapped(candidate)
        return candidate

    def map_block(self, to_map: Block, size: int, context: Optional[list] = None) -> bool:
        """``map_block``: back the front of an unmapped block with pages, merge with free neighbours."""
        segment = to_map.expandable_segment
        mapped = segment.map(to_map.ptr, size)
        if mapped == 0:
            return False
        pool = to_map.pool
        mapped_ptr = to_map.ptr          # merging below may move to_map.ptr back; the event uses this
        pool.remove_unmapped(to_map)
        to_map.mapped = True
        if mapped < to_map.size:
            rest = Block(to_map.ptr + mapped, to_map.size - mapped, to_map.stream,
                         to_map.stream_key, pool, expandable_segment=segment, mapped=False)
            rest.splice(to_map, to_map.next)
            pool.add_unmapped(rest)
            to_map.size = mapped
        self.try_merge_blocks(to_map, to_map.prev, pool)
        self.try_merge_blocks(to_map, to_map.next, pool)
        pool.insert_into_blocks(to_map)
        self.total_allocated_memory += mapped
        self.stats.increase("reserved_bytes", pool.stat_type, mapped)
        self.stats.num_device_alloc += 1
        if to_map.prev is None and not to_map.segment_frames:
            to_map.segment_frames = context or []
        self._record("segment_map", mapped_ptr, mapped, to_map.stream_key, context, pool)
        return True

    def try_allocate_expandable_block(self, stream: Any, pool: BlockPool, size: int,
                                      context: Optional[list] = None) -> Optional[Block]:
        """``try_allocate_expandable_block``: map just enough pages for ``size`` (the rounded request)."""
        segments_before = len(self.expandable_segments_)
        candidate = self.find_expandable_block(stream, pool, size)
        if not candidate.mapped and not self.map_block(candidate, min(candidate.size, size), context):
            if len(self.expandable_segments_) > segments_before:
                # PyTorch keeps the new, wholly unmapped reservation in pool->unmapped, and
                # release_blocks never looks there: a request bigger than 1.125x the GPU leaks
                # one per try.  Give back what this call reserved.
                self.release_expandable_segment(candidate)
            return None
        while candidate.size < size:
            # invariant: free -> unmapped -> ...; mapping the next range merges into it
            nxt = candidate.next
            if not self.map_block(nxt, min(size - candidate.size, nxt.size), context):
                return None
            candidate = nxt
        pool.remove(candidate)
        return candidate

    def unmap_block(self, block: Block, context: Optional[list] = None) -> None:
        """``unmap_block``: give a free block's whole pages back; partial pages stay mapped."""
        start, unmapped = block.expandable_segment.unmap(block.ptr, block.size)
        if unmapped == 0:
            return
        pool = block.pool
        pool.remove(block)
        before = start - block.ptr
        if before > 0:                       # prev? -> before_free -> block
            before_free = Block(block.ptr, before, block.stream, block.stream_key, pool,
                                expandable_segment=block.expandable_segment)
            before_free.splice(block.prev, block)
            pool.insert_into_blocks(before_free)
        after = block.size - before - unmapped
        if after > 0:                        # block -> after_free -> next?
            after_free = Block(start + unmapped, after, block.stream, block.stream_key, pool,
                               expandable_segment=block.expandable_segment)
            after_free.splice(block, block.next)
            pool.insert_into_blocks(after_free)
        block.ptr, block.size, block.mapped = start, unmapped, False
        self.try_merge_blocks(block, block.prev, pool)
        self.try_merge_blocks(block, block.next, pool)
        pool.add_unmapped(block)
        self.total_allocated_memory -= unmapped
        self.stats.decrease("reserved_bytes", pool.stat_type, unmapped)
        self._count_pool_segment(pool, -1)        # a private pool's cudaMalloc_count (pools.py)
        self.stats.num_device_free += 1
        self._record("segment_unmap", start, unmapped, block.stream_key, context, pool)

    def release_unmapped_segments(self) -> None:
        """Give back every reservation with no page mapped (``close``: nothing may outlive it)."""
        pools = [self.large_blocks, self.small_blocks]
        for private in getattr(self, "graph_pools", {}).values():     # MemPools and graph pools
            pools += [private.large_blocks, private.small_blocks]
        for pool in pools:
            for _key, _ptr, block in list(pool.unmapped):
                if not block.is_split():
                    self.release_expandable_segment(block)

    def release_expandable_segment(self, block: Block) -> None:
        """``release_expandable_segment``: the whole range is unmapped: free the reservation."""
        segment = block.expandable_segment
        assert block.size == segment.size() and not block.mapped, "block disagrees with segment"
        self.expandable_segments_.remove(segment)
        block.pool.remove_unmapped(block)
        segment.release()
