"""Keep private-pool routing when a snapshot is replayed.

A snapshot taken while ``MemPool``s or CUDA graphs held private pools says which segment
belonged to which pool (``segment_pool_id``), and the reference allocator's trace entries
carry a ``pool_id`` (PyTorch's ``record_trace`` has one too).  To make the same decisions,
the replay must send each such request into the same pool, as the ``use_mem_pool`` context
or the capture did when it was recorded (``beginAllocateToPool`` .. ``endAllocateToPool``).

Where a request's pool comes from, in order:

1. the ``alloc`` entry's own ``pool_id`` (when the trace has it);
2. the address: a request whose block lies in a segment that the trace (a ``segment_alloc``
   or ``segment_map`` with a ``pool_id``) or the final ``segments`` list attributes to a
   private pool.

The pools are created when first needed and kept alive to the end (``use_count`` 1), like a
graph or MemPool that outlived the recording.  Only the caching allocator has pools; another
policy gets every request in its one pool.
"""
from __future__ import annotations

from bisect import bisect_right
from contextlib import contextmanager, nullcontext

from ..events import NEW_MEMORY

DEFAULT = (0, 0)


class PoolRouter:
    """Which private pool each replayed request belongs to, and the routing context for it."""

    def __init__(self, events: list, finals: list) -> None:
        ranges = {}
        for seg in finals:
            pool_id = tuple(seg.get("segment_pool_id") or DEFAULT)
            if pool_id != DEFAULT:
                ranges[seg["address"]] = (seg["address"] + seg["total_size"], pool_id)
        for e in events:
            pool_id = tuple(e.get("pool_id") or DEFAULT)
            if pool_id != DEFAULT and e["action"] in NEW_MEMORY:
                ranges[e["addr"]] = (e["addr"] + e["size"], pool_id)
        self._starts = sorted(ranges)
        self._ranges = ranges
        self.pools_seen: set = {pool for _, pool in ranges.values()}

    def __bool__(self) -> bool:
        return bool(self._starts)

    def pool_of(self, event: dict) -> tuple:
        """The private pool of an ``alloc`` (or ``oom``) entry, (0, 0) for the default pools."""
        pool_id = tuple(event.get("pool_id") or DEFAULT)
        if pool_id != DEFAULT:
            self.pools_seen.add(pool_id)
            return pool_id
        addr = event.get("addr")
        if addr is None or not self._starts:
            return DEFAULT
        i = bisect_right(self._starts, addr) - 1
        if i >= 0:
            end, pool = self._ranges[self._starts[i]]
            if addr < end:
                return pool
        return DEFAULT

    def route(self, allocator, pool_id: tuple):
        """A context that sends every request into ``pool_id`` (nothing for the default pools)."""
        if pool_id == DEFAULT or not hasattr(allocator, "device_allocator"):   # the policies have no pools
            return nullcontext()
        return _routed(allocator, pool_id)


@contextmanager
def _routed(allocator, pool_id: tuple):
    da = allocator.device_allocator
    if pool_id not in da.graph_pools:
        da.create_or_incref_pool(pool_id)                # held to the end, like a live graph
    da.begin_allocate_to_pool(pool_id, lambda stream: True)
    try:
        yield
    finally:
        da.end_allocate_to_pool(pool_id)
        da.release_pool(pool_id)
