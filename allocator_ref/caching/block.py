"""Blocks and block pools: the caching allocator's two data structures.

Mirrors ``Block`` and ``BlockPool`` of ``c10/cuda/CUDACachingAllocator.cpp``
(their comments and members, field for field).

A *segment* is one piece of memory the allocator got from the driver
(cudaMalloc, or a mapped range of an expandable segment).  A segment is cut
into *blocks* that tile it exactly; neighbours in the same segment are linked
through ``prev``/``next`` so a freed block can merge with free neighbours.

Free blocks wait in a :class:`BlockPool`, a set ordered by
``(stream, size, address)``: a lower-bound search finds the best fit (the
smallest block that is big enough, lowest address among equals) in O(log n).
PyTorch uses a ``std::set``; here it is a ``sortedcontainers.SortedList``.
"""
from __future__ import annotations

import copy
from bisect import bisect_left
from typing import Any, Optional

from sortedcontainers import SortedList

from .oom import format_size
from .stats import AGGREGATE, LARGE_POOL, SMALL_POOL


def plural(n: int, word: str) -> str:
    """'1 free block', '2 free blocks' (for the one-line reprs)."""
    return f"{n} {word}{'' if n == 1 else 's'}"


class Block:
    """A piece of a segment: allocated to a caller, or free in its pool."""

    __slots__ = (
        "ptr", "size", "requested_size", "stream", "stream_key", "pool",
        "allocated", "mapped", "prev", "next", "event_count", "gc_count_base",
        "stream_uses", "expandable_segment", "frames", "segment_frames",
    )

    def __init__(self, ptr: int, size: int, stream: Any, stream_key: int, pool: "BlockPool",
                 expandable_segment: Any = None, mapped: bool = True) -> None:
        self.ptr = ptr
        self.size = size
        self.requested_size = 0        # new blocks start at 0; never reset on free (as in PyTorch)
        self.stream = stream           # the stream that owns it: free blocks are reused on it only
        self.stream_key = stream_key   # its raw handle, the first key of the pool's order
        self.pool = pool
        self.allocated = False
        self.mapped = mapped           # False for the unmapped tail of an expandable segment
        self.prev: Optional[Block] = None
        self.next: Optional[Block] = None
        self.event_count = 0           # outstanding events of other streams that used it
        self.gc_count_base = 0         # pool clock when it became free (for garbage collection)
        self.stream_uses: set = set()  # streams recorded with record_stream
        self.expandable_segment = expandable_segment
        self.frames: list = []
        self.segment_frames: list = []

    def gc_count(self) -> int:
        """``Block::gc_count``: how many free-block searches of its pool ran since it became free."""
        assert self.pool is not None, "gc_count of a block with no pool"
        return self.pool.get_free_blocks_call_count - self.gc_count_base

    def is_split(self) -> bool:
        """True when the block shares its segment with a neighbour."""
        return self.prev is not None or self.next is not None

    def key(self) -> tuple:
        """Its position in the pool: ``BlockComparatorSize`` = (stream, size, address)."""
        return (self.stream_key, self.size, self.ptr, self)

    def splice(self, before: Optional["Block"], after: Optional["Block"]) -> None:
        """``Block::splice``: link this block in between ``before`` and ``after`` (either may be None)."""
        if before is not None:
            assert before.next is after, "splice: before and after are not neighbours"
            before.next = self
        self.prev = before
        if after is not None:
            assert after.prev is before, "splice: before and after are not neighbours"
            after.prev = self
        self.next = after

    def __deepcopy__(self, memo: dict) -> "Block":
        """Copy this block's whole segment chain in one loop, not one Python frame per neighbour.

        The default deepcopy follows ``next`` into ``next`` ...: a segment of a few thousand
        blocks (a real snapshot's large segments hold hundreds) hit Python's recursion limit
        when the replay engine copied its state to try a reading (engine_readings._clone).
        Every block of the chain gets its empty copy first, so the links resolve through
        ``memo`` and the depth no longer grows with the number of blocks."""
        head = self
        while head.prev is not None:
            head = head.prev
        chain, block = [], head
        while block is not None:
            chain.append(block)
            block = block.next
        fresh = [b for b in chain if id(b) not in memo]
        for b in fresh:
            memo[id(b)] = Block.__new__(Block)
        for b in fresh:
            twin = memo[id(b)]
            for name in Block.__slots__:
                value = getattr(b, name)
                if name in ("prev", "next"):
                    value = None if value is None else memo.get(id(value), value)
                else:
                    value = copy.deepcopy(value, memo)
                setattr(twin, name, value)
        return memo[id(self)]

    def __repr__(self) -> str:
        state = "allocated" if self.allocated else ("free" if self.mapped else "unmapped")
        return f"Block(ptr={self.ptr:#x}, size={self.size}, {state}, stream={self.stream_key})"


class BlockPool:
    """Free blocks of one kind (small or large), ordered by (stream, size, address)."""

    def __init__(self, is_small: bool, owner: Any = None) -> None:
        self.is_small = is_small
        self.owner_PrivatePool = owner    # the PrivatePool this pool belongs to (None: the default pools)
        # get_stat_types_for_pool: its blocks count in AGGREGATE and in their pool's stats
        self.stat_types = (AGGREGATE, SMALL_POOL if is_small else LARGE_POOL)
        self.blocks = SortedList()        # free, mapped blocks
        self.unmapped = SortedList()      # expandable segments' unmapped ranges, by (stream, address)
        self.get_free_blocks_call_count = 0   # the garbage collector's clock

    @property
    def owner_id(self) -> tuple:
        """``BlockPool::owner_MempoolId``: the private pool's id, (0, 0) for the default pools."""
        return self.owner_PrivatePool.id if self.owner_PrivatePool is not None else (0, 0)

    def insert_into_blocks(self, block: Block) -> None:
        """``BlockPool::insert_into_blocks``: stamp the GC clock, then insert."""
        block.gc_count_base = self.get_free_blocks_call_count
        self.blocks.add(block.key())

    def remove(self, block: Block) -> None:
        """``blocks.erase(block)``."""
        self.blocks.remove(block.key())

    # ``blocks.lower_bound(key)`` gives an iterator in C++, and ``get_free_block`` reads and
    # erases the block *at* it, with no second search.  Here a position plays the iterator:
    # (sublist, index) in SortedList's internal lists ``_lists`` (their last items are in
    # ``_maxes``), or None for ``blocks.end()``.  Reading through ``blocks[i]`` instead walks
    # SortedList's positional index and costs more than the whole search
    # (benchmarks/bench_warm_path.py); sortedcontainers is pinned below 3 for these internals.
    def lower_bound(self, stream_key: int, size: int) -> Optional[tuple]:
        """``blocks.lower_bound((stream, size, 0))``: where the first free block with a key at least that is."""
        key = (stream_key, size, 0)
        maxes = self.blocks._maxes
        sublist = bisect_left(maxes, key)
        if sublist == len(maxes):
            return None
        return sublist, bisect_left(self.blocks._lists[sublist], key)

    def at(self, it: Optional[tuple]) -> Optional[Block]:
        """``*it``: the block at a position (None at the end)."""
        if it is None:
            return None
        sublist, index = it
        return self.blocks._lists[sublist][index][3]

    def next_position(self, it: tuple) -> Optional[tuple]:
        """``++it``: the position after ``it`` (None past the last block)."""
        sublist, index = it
        if index + 1 < len(self.blocks._lists[sublist]):
            return sublist, index + 1
        return (sublist + 1, 0) if sublist + 1 < len(self.blocks._lists) else None

    def erase(self, it: tuple) -> None:
        """``blocks.erase(it)``: take out the block at a position ``lower_bound`` found."""
        self.blocks._delete(*it)

    def best_fit(self, stream_key: int, size: int) -> Optional[Block]:
        """The first free block with key >= (stream, size, 0), whatever its stream (labs start here)."""
        return self.at(self.lower_bound(stream_key, size))

    def lower_bound_index(self, stream_key: int, size: int) -> int:
        """The same lower bound as a flat index into the pool order, for release_available_cached_blocks:
        it walks left releasing blocks, and a release leaves lower flat indices alone, while it may
        merge two internal sublists and so move the (sublist, index) position to the left."""
        return self.blocks.bisect_left((stream_key, size, 0))

    def block_at(self, index: int) -> Optional[Block]:
        return self.blocks[index][3] if 0 <= index < len(self.blocks) else None

    def add_unmapped(self, block: Block) -> None:
        self.unmapped.add((block.stream_key, block.ptr, block))

    def remove_unmapped(self, block: Block) -> None:
        self.unmapped.remove((block.stream_key, block.ptr, block))

    def __repr__(self) -> str:
        kind = "small" if self.is_small else "large"
        owner = f", pool {self.owner_id}" if self.owner_PrivatePool is not None else ""
        free = sum(entry[1] for entry in self.blocks)
        return (f"BlockPool({kind}{owner}: {plural(len(self.blocks), 'free block')}, {format_size(free)} free, "
                f"{plural(len(self.unmapped), 'unmapped range')})")

    def __iter__(self):
        """Free blocks in (stream, size, address) order."""
        return (entry[3] for entry in self.blocks)

    def __len__(self) -> int:
        return len(self.blocks)
