"""Private pools: memory a program (or a CUDA graph) owns, away from the default pools.

Mirrors ``struct PrivatePool`` of ``c10/cuda/CUDACachingAllocator.cpp`` and
``c10::generate_mempool_id`` (used by ``at::cuda::MemPool`` and
``CUDAGraph::capture_begin``).

A private pool is two more :class:`BlockPool` objects (small and large) with
two counters:

* ``use_count`` -- how many owners hold it: the ``MemPool`` object, each
  ``use_mem_pool`` context and each live CUDA graph that captured into it.
  While it is above 0 nobody may ``cudaFree`` the pool's memory, because a
  graph replay (or the owner) may still write to those addresses.
* ``cudaMalloc_count`` -- segments (or expandable mappings) the pool still
  holds.  A pool with ``use_count == 0`` is *freeable*: ``empty_cache``
  releases its whole free segments; when ``cudaMalloc_count`` reaches 0 the
  pool itself is forgotten.
"""
from __future__ import annotations

import itertools
import threading
from typing import Any, Optional

from .block import BlockPool

# c10::generate_mempool_id: user-created pools count in the second number, pools a
# CUDAGraph makes for itself (no pool= given) in the first; both start at 1 so that
# (0, 0) can always mean "the default pools".
_uid = itertools.count(1)     # MemPool() and graph_pool_handle()
_uuid = itertools.count(1)    # a CUDAGraph's own pool
_id_lock = threading.Lock()   # the counters are std::atomic in C++


def generate_mempool_id(is_user_created: bool = True) -> tuple[int, int]:
    """``c10::generate_mempool_id``: ``(0, n)`` for a user's pool, ``(n, 0)`` for a graph's own."""
    with _id_lock:
        return (0, next(_uid)) if is_user_created else (next(_uuid), 0)


class PrivatePool:
    """``PrivatePool``: one pool id's small and large free lists and its two counters."""

    def __init__(self, pool_id: tuple, allocator: Optional[Any] = None) -> None:
        self.id = tuple(pool_id)
        self.use_count = 1              # whoever created it holds it
        self.cudaMalloc_count = 0       # segments / mappings not yet given back
        self.allocator = allocator      # a PluggableAllocator, or None for cudaMalloc
        self.large_blocks = BlockPool(is_small=False, owner=self)
        self.small_blocks = BlockPool(is_small=True, owner=self)

    def free_bytes(self) -> int:
        """Bytes in this pool's free lists (what the OOM message calls "allocated in private pools")."""
        return sum(b.size for b in self.large_blocks) + sum(b.size for b in self.small_blocks)

    def __repr__(self) -> str:
        custom = ", custom allocator" if self.allocator is not None else ""
        return (f"PrivatePool(id={self.id}, use_count={self.use_count}, "
                f"cudaMalloc_count={self.cudaMalloc_count}{custom})")


def allocated_in_private_pools(graph_pools: dict) -> int:
    """The figure ``malloc``'s OOM message prints: the *free* blocks of every private pool (PyTorch's
    quirk: its loop sums ``pool.blocks``, the free set).  PyTorch inlines this in malloc; a function
    here so a chapter can print it."""
    return sum(pool.free_bytes() for pool in graph_pools.values())
