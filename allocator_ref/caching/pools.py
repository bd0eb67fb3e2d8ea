"""Private pools: the ids and the thread filter; the routing itself is DeviceCachingAllocator's.

The ``DeviceCachingAllocator`` members of the routing are methods of ``DeviceCachingAllocator``
(device_caching_allocator.py, section "private pools"), as in ``c10/cuda/CUDACachingAllocator.cpp``
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
from typing import Any, Callable

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
