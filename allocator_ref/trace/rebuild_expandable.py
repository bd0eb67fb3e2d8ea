"""Lay out expandable segments as a snapshot shows them (a state-only file), or as they were
mapped at the first event of a trace recorded mid-run (``rebuild.py`` infers those).

A snapshot reports an expandable segment as one entry per contiguous *mapped* range
(``DeviceCachingAllocator::snapshot`` starts a segment at each block whose ``prev`` is
unmapped); where the reservation begins and how far it reaches is not in the file.  So the
ranges of one stream and pool are rebuilt in one reservation that starts at the first of
them (or lower, where the trace later maps that stream's pages below it), with the holes
between them unmapped again, using the allocator's own steps:

1. ``find_expandable_block`` reserves the range (the replay device places it there);
2. ``map_block`` maps the pages of each range (and of the hole before it);
3. ``alloc_found_block`` carves every block, live or free, off the front of what is left
   (an expandable segment always splits, ``should_split``);
4. the hole placeholders are freed and unmapped (``unmap_block``), then the free
   blocks' placeholders are freed.  Pending frees are left to the caller.

With no trace nothing later depends on where a reservation began.  In a trace it can: a
reservation given back and made anew before recording may have begun elsewhere, and
then the replay reports the divergence.  Private pools' expandable segments are not
rebuilt (a note says so).
"""
from __future__ import annotations

from collections import deque

from ..allocation import Allocation
from ..caching.device_caching_allocator import AllocParams
from ..caching.config import kSmallBuffer


class CannotRebuild(Exception):
    """The snapshot's expandable segments cannot be laid out as it says (the note says why)."""


def rebuild_expandable(replayer, segments: list, events: list = ()) -> dict:
    """Lay out every expandable segment of ``segments``; returns ``{address: Allocation}`` of the
    live blocks.  ``events`` (a trace that follows) may show pages mapped below a stream's
    first range: its reservation then starts there.  Raises CannotRebuild with a reason."""
    allocator = replayer.allocator
    da = allocator.device_allocator          # the pools and the expandable-segment calls are its members
    groups: dict = {}
    for seg in sorted(segments, key=lambda s: s["address"]):
        pool_id = tuple(seg.get("segment_pool_id") or (0, 0))
        if pool_id != (0, 0):
            raise CannotRebuild("expandable segments of a private pool cannot be rebuilt from a snapshot")
        key = (seg["stream"], seg.get("segment_type") == "small")
        groups.setdefault(key, []).append(seg)
    _check_page_budget(groups, allocator.config.large_segment_size, len(events))
    live_list, holes, free = [], [], []
    for (handle, small), group in groups.items():
        stream = replayer.stream(handle)
        pool = da.small_blocks if small else da.large_blocks
        base = _reservation_base(group, events, handle, small, allocator.config.large_segment_size,
                                 replayer.device.info.total_memory)
        replayer.device.planned_segments = deque([(base, group[0]["total_size"], "segment_map")])
        unmapped = da.find_expandable_block(stream, pool, group[0]["total_size"])
        replayer.device.planned_segments = deque()
        if unmapped.ptr != base or unmapped.mapped:
            raise CannotRebuild(f"the reservation for segment {group[0]['address']:#x} landed elsewhere")
        for seg in group:
            if unmapped is None or unmapped.mapped:
                raise CannotRebuild(f"segment {seg['address']:#x} lies past its stream's reservation")
            hole = seg["address"] - unmapped.ptr
            if hole < 0 or unmapped.ptr + unmapped.size < seg["address"] + seg["total_size"]:
                raise CannotRebuild(f"segment {seg['address']:#x} does not fit its stream's reservation")
            if not da.map_block(unmapped, hole + seg["total_size"]):
                raise CannotRebuild(f"the pages of segment {seg['address']:#x} could not be mapped")
            block = unmapped                 # map_block made it the free mapped front (its prev is live)
            pieces = ([(hole, hole, "hole")] if hole else []) + \
                [(b["size"], b.get("requested_size", b["size"]) if b["state"] != "inactive" else b["size"],
                  b["state"]) for b in seg["blocks"]]
            for size, requested, state in pieces:
                if block is None or block.size < size:
                    raise CannotRebuild(f"the blocks of segment {seg['address']:#x} do not fit its pages")
                split = size < block.size        # split: ``block`` stays the free remainder
                allocation = _carve(allocator, pool, stream, block, size, requested, split)
                {"hole": holes, "inactive": free}.get(state, live_list).append(allocation)
                if not split:
                    block = None
            if block is not None:
                raise CannotRebuild(f"segment {seg['address']:#x}: its blocks do not fill its mapped pages")
            unmapped = allocation._block.next     # the reservation's unmapped rest (None: none left)
    for allocation in holes:           # unmapped again: the gap between two mapped ranges
        block = allocation._block
        allocator.free(allocation)
        da.unmap_block(block)
    for allocation in free:
        allocator.free(allocation)
    return {allocation.ptr: allocation for allocation in live_list}


PAGE_BUDGET = 2**17      # pages a rebuild may map, plus 64 per trace event (a real file: a few thousand)


def _check_page_budget(groups: dict, large_page: int, events: int) -> None:
    """Refuse to map more pages than any real file needs: a hostile one could name a segment
    of an exabyte, or thousands of streams each with a GPU's worth of pages."""
    pages = 0
    for (_stream, small), group in groups.items():
        page = kSmallBuffer if small else large_page
        pages += -(-(group[-1]["address"] + group[-1]["total_size"] - group[0]["address"]) // page)
    if pages > PAGE_BUDGET + 64 * events:
        raise CannotRebuild(f"it would map {pages:,} pages, more than a real run's snapshot shows")


def _reservation_base(group: list, events, stream: int, small: bool, large_page: int,
                      total_memory: int) -> int:
    """Where the stream's reservation starts: its first mapped range, or lower where the trace
    maps this stream's pages of this pool below it, whole pages away (within the
    1.125x-the-GPU a reservation spans), before it unmaps any (after that the reservation
    may have been given back and made anew elsewhere).  A map of a whole number of large
    pages is taken for the large pool's (a small one that size is rare)."""
    first = group[0]["address"]
    page = kSmallBuffer if small else large_page
    span = total_memory + total_memory // 8
    for e in events:
        if e["action"] == "segment_unmap" and e["stream"] == stream:
            break
        if e["action"] == "segment_map" and e["stream"] == stream and first - span < e["addr"] < first \
                and (first - e["addr"]) % page == 0 and (e["size"] % large_page != 0) == small:
            first = e["addr"]
    return first


def _carve(allocator, pool, stream, block, size: int, requested: int, split: bool) -> Allocation:
    """``alloc_found_block`` on the front ``size`` bytes of the free ``block`` (as malloc does)."""
    params = AllocParams(size, size, pool, stream)
    params.block = block
    pool.remove(block)                       # get_free_block's erase
    found = allocator.device_allocator.alloc_found_block(params, requested, split)
    return allocator.native_allocator.add_allocated_block(found)
