"""Routing allocations into private pools: the allocator's side of MemPool and CUDA graphs.

Mirrors these ``DeviceCachingAllocator`` members of ``c10/cuda/CUDACachingAllocator.cpp``
(2.11): ``graph_pools``, ``graph_pools_freeable``, ``captures_underway``,
``use_on_oom_pools``, ``no_split_pools`` and the functions ``create_or_incref_pool``,
``beginAllocateToPool``, ``endAllocateToPool``, ``releasePool``, ``getPoolUseCount``,
``setUseOnOOM``, ``setNoSplit``, ``get_pool``, ``try_mempool_fallback``, the private-pool
half of ``release_cached_blocks`` and the OOM message's ``allocated_in_private_pools``.

The rule in one sentence: while ``captures_underway`` holds an entry whose filter
accepts the request (this thread, for ``use_mem_pool``; this capturing stream, for a
CUDA graph), ``malloc`` serves it from that entry's private pool -- the newest
matching entry wins, so contexts nest.
"""
from __future__ import annotations

import threading
from typing import Any, Callable, Optional

from .block import BlockPool
from .config import kSmallSize
from .private_pool import PrivatePool

DEFAULT_POOL_ID = (0, 0)


def check_pool_id(pool_id: Any) -> tuple:
    """A pool id is a pair of non-negative ints, as ``MempoolId_t``; anything else is refused."""
    if (not isinstance(pool_id, tuple) or len(pool_id) != 2
            or not all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in pool_id)):
        raise TypeError(f"a memory pool id is a pair of non-negative ints like (0, 3) "
                        f"(MemPool.id or graph_pool_handle()), got {pool_id!r}")
    return pool_id


def current_thread_filter() -> Callable[[Any], bool]:
    """``_cuda_beginAllocateCurrentThreadToPool``'s filter: only the calling thread's requests."""
    tid = threading.get_ident()
    return lambda stream: threading.get_ident() == tid


class PrivatePoolsMixin:
    """Private pools, mixed into CachingAllocator."""

    def _init_private_pools(self) -> None:
        self.graph_pools: dict[tuple, PrivatePool] = {}
        self.graph_pools_freeable: dict[tuple, PrivatePool] = {}   # use_count reached 0
        self.captures_underway: list[tuple[tuple, Callable]] = []   # (pool id, filter), newest last
        self.use_on_oom_pools: dict[tuple, None] = {}              # an ordered set
        self.no_split_pools: set = set()

    # ------------------------------------------------------------- bookkeeping
    def create_or_incref_pool(self, pool_id: tuple, allocator: Any = None) -> PrivatePool:
        """``create_or_incref_pool``: a new pool starts at use_count 1; a known one gets +1."""
        pool_id = check_pool_id(pool_id)
        if pool_id == DEFAULT_POOL_ID:
            raise ValueError("(0, 0) names the default pools; a private pool needs its own id")
        pool = self.graph_pools.get(pool_id)
        if pool is None:
            pool = self.graph_pools[pool_id] = PrivatePool(pool_id, allocator)
            return pool
        if pool.use_count <= 0:
            # TORCH_INTERNAL_ASSERT(use_count > 0): a released pool cannot be revived.
            raise ValueError(f"pool {pool_id} was released (use_count 0) and cannot be used again; "
                             "create a new MemPool or graph_pool_handle()")
        if allocator is not None:
            raise ValueError(f"pool {pool_id} already exists; its custom allocator cannot be replaced")
        pool.use_count += 1
        return pool

    def get_private_pool(self, pool_id: tuple) -> PrivatePool:
        """``get_private_pool``, with a clear error instead of an assertion."""
        pool = self.graph_pools.get(check_pool_id(pool_id))
        if pool is None:
            raise ValueError(f"no private pool with id {pool_id} on this allocator "
                             "(it was never used, or it was released and emptied)")
        return pool

    def begin_allocate_to_pool(self, pool_id: tuple, filter: Callable[[Any], bool]) -> None:
        """``beginAllocateToPool``: route requests that ``filter(stream)`` accepts to the pool."""
        if any(entry_id == pool_id for entry_id, _ in self.captures_underway):
            raise RuntimeError(f"beginAllocateToPool: already recording to mempool_id {pool_id}")
        self.create_or_incref_pool(pool_id)
        self.captures_underway.append((pool_id, filter))

    def end_allocate_to_pool(self, pool_id: tuple) -> None:
        """``endAllocateToPool``: stop routing to the pool (its use_count is unchanged)."""
        self._end_capture_reuse(pool_id)          # graph_capture_record_stream_reuse (capture_rules.py)
        for i, (entry_id, _) in enumerate(self.captures_underway):
            if entry_id == pool_id:
                del self.captures_underway[i]
                return
        raise RuntimeError(f"endAllocatePool: not currently recording to mempool_id {pool_id}")

    def release_pool(self, pool_id: tuple) -> None:
        """``releasePool``: one owner fewer; at 0 the pool becomes freeable by ``empty_cache``."""
        pool = self.get_private_pool(pool_id)
        if pool.use_count <= 0:
            raise ValueError(f"pool {pool_id} was already released by all its owners")
        pool.use_count -= 1
        if pool.use_count == 0:
            self.graph_pools_freeable[pool.id] = pool

    def get_pool_use_count(self, pool_id: tuple) -> int:
        """``getPoolUseCount`` (``MemPool.use_count()``)."""
        return self.get_private_pool(pool_id).use_count

    def set_use_on_oom(self, pool_id: tuple, use_on_oom: bool) -> None:
        """``setUseOnOOM``: the pool's free blocks may serve default-pool requests before an OOM."""
        if use_on_oom:
            self.use_on_oom_pools[check_pool_id(pool_id)] = None
        else:
            self.use_on_oom_pools.pop(pool_id, None)

    def set_no_split(self, pool_id: tuple) -> None:
        """``setNoSplit``: blocks of this pool are never split (one block per segment)."""
        self.no_split_pools.add(check_pool_id(pool_id))

    # ----------------------------------------------------------------- routing
    def _capture_pool(self, size: int, stream: Any) -> Optional[BlockPool]:
        """``get_pool``'s first half: the newest ``captures_underway`` entry that accepts ``stream``."""
        for pool_id, accepts in reversed(self.captures_underway):
            if accepts(stream):
                pool = self.graph_pools[pool_id]
                return pool.small_blocks if size <= kSmallSize else pool.large_blocks
        return None

    def _expandable_for(self, pool: BlockPool) -> bool:
        """``is_expandable_segments_active``: never in a pool whose memory comes from a custom allocator."""
        owner = pool.owner_PrivatePool
        return self.config.expandable_segments and (owner is None or owner.allocator is None)

    def _splits_allowed(self, pool: BlockPool) -> bool:
        """``should_split``'s first test: pools made with ``no_split=True`` never split."""
        return not self.no_split_pools or pool.owner_id not in self.no_split_pools

    def try_mempool_fallback(self, p: Any) -> bool:
        """``try_mempool_fallback``: before freeing cached memory, look in the ``use_on_oom`` pools.

        Only for requests that are not already routed to a private pool.  Like PyTorch it
        routes the current thread to each pool in turn (begin/end/release) and only *searches*
        its free blocks: nothing new is cudaMalloc'ed for it.
        """
        if p.pool.owner_PrivatePool is not None or not self.use_on_oom_pools:
            return False
        for pool_id in list(self.use_on_oom_pools):
            self.begin_allocate_to_pool(pool_id, current_thread_filter())
            saved_pool, p.pool = p.pool, self.get_pool(p.size, p.stream)
            found = self.get_free_block(p)
            self.end_allocate_to_pool(pool_id)
            self.release_pool(pool_id)
            if found:
                p.expandable = False      # mempool_params is built with is_expandable_segments_active false
                return True
            p.pool = saved_pool
        return False

    # ----------------------------------------------------------------- release
    def _count_pool_segment(self, pool: BlockPool, change: int) -> None:
        """A private pool's ``cudaMalloc_count`` follows every cudaMalloc / map and cudaFree / unmap."""
        owner = pool.owner_PrivatePool
        if owner is not None:
            owner.cudaMalloc_count += change

    def allocated_in_private_pools(self) -> int:
        """The OOM message's figure: the *free* blocks of every private pool (PyTorch's quirk)."""
        return sum(pool.free_bytes() for pool in self.graph_pools.values())

    def _private_pool_blocks(self):
        """Free blocks of every private pool (``get_all_blocks``'s middle part)."""
        for pool in self.graph_pools.values():
            yield from pool.small_blocks
            yield from pool.large_blocks

    def _private_pool_head_blocks(self, pool_id: tuple):
        """``get_private_pool_head_blocks``: the first block of each of the pool's segments."""
        pool = self.graph_pools.get(pool_id)
        if pool is None:
            return []
        own = (pool.small_blocks, pool.large_blocks)
        heads = [b for b in self.active_blocks.values() if b.pool in own and b.prev is None]
        heads += [b for b in pool.small_blocks if b.prev is None]
        heads += [b for b in pool.large_blocks if b.prev is None]
        return heads
