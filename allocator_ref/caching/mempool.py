"""``torch.cuda.MemPool`` and ``torch.cuda.use_mem_pool`` for the reference allocator.

Mirrors ``torch/cuda/memory.py`` (``MemPool``, ``use_mem_pool``) and
``aten/src/ATen/cuda/MemPool.cpp`` (``MemPool::MemPool``, ``MemPool::~MemPool``):

* creating a pool makes its ``PrivatePool`` at once (``createOrIncrefPool``,
  use_count 1) and registers the ``use_on_oom`` / ``no_split`` options;
* ``with use_mem_pool(pool):`` routes *the calling thread's* requests into it
  (``beginAllocateToPool`` with a current-thread filter) and holds one more
  reference until the block ends (``endAllocateToPool`` + ``releasePool``).
  The pool is then an entry of ``captures_underway``, exactly like a graph
  capture, so while it is open *every* thread gets the capture rules
  (capture_rules.py; pytorch/pytorch#175015).  Opening a pool already open
  fails after its ``use_count`` went up (2.11's ``beginAllocateToPool``);
* destroying the pool (``del pool`` or ``pool.close()``) drops the use_on_oom flag,
  releases its reference and empties *that* pool's cache
  (``emptyCache(id)``): memory still held by live tensors stays until they are
  freed and ``empty_cache()`` runs.

Unlike PyTorch there is no global allocator, so a pool is made for one
``CachingAllocator``: ``MemPool(allocator)``.
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Optional

from .pools import current_thread_filter
from .private_pool import generate_mempool_id


class MemPool:
    """A pool of memory a program owns (``torch.cuda.MemPool``).

    ``custom`` is a :class:`~allocator_ref.caching.pluggable.PluggableAllocator`
    (``CUDAPluggableAllocator``): the pool's segments come from its alloc/free
    functions, and expandable segments are never used for it.
    """

    def __init__(self, allocator: Any, *, custom: Optional[Any] = None,
                 use_on_oom: bool = False, no_split: bool = False) -> None:
        # Asked by capability, not isinstance: allocator.py imports this file (use_mem_pool),
        # so importing CachingAllocator here would close an import circle.
        if not callable(getattr(getattr(allocator, "device_allocator", None), "create_or_incref_pool", None)):
            raise TypeError(f"MemPool(allocator): give the CachingAllocator the pool belongs to, "
                            f"got {type(allocator).__name__}")
        if custom is not None and not (hasattr(custom, "raw_alloc") and hasattr(custom, "raw_delete")):
            raise TypeError("custom= must be a PluggableAllocator (with raw_alloc and raw_delete), "
                            f"got {type(custom).__name__}")
        self.allocator = allocator
        self.custom = custom
        self._id = generate_mempool_id(is_user_created=True)
        self._closed = False
        # MemPool::MemPool reaches the DeviceCachingAllocator through NativeCachingAllocator's
        # one-line forwarders (createOrIncrefPool, setUseOnOOM, setNoSplit): called directly here.
        da = allocator.device_allocator
        da.create_or_incref_pool(self._id, custom)
        if use_on_oom:
            da.set_use_on_oom(self._id, True)
        if no_split:
            da.set_no_split(self._id)

    @property
    def id(self) -> tuple[int, int]:
        """The pool's id, a pair of ints; ``(0, n)`` for a pool a user made."""
        return self._id

    def use_count(self) -> int:
        """``MemPool.use_count()``: owners holding the pool (this object, contexts, graphs)."""
        self._check_open("use_count")
        return self.allocator.device_allocator.get_pool_use_count(self._id)

    def snapshot(self) -> list[dict]:
        """``MemPool.snapshot()`` = ``torch.cuda.memory_snapshot(pool.id)``: this pool's segments."""
        return self.allocator.segments(mempool_id=self._id)

    def close(self) -> None:
        """``MemPool::~MemPool``: drop use_on_oom, release this object's reference, empty the pool."""
        if self._closed:
            return
        self._closed = True
        da = self.allocator.device_allocator
        da.set_use_on_oom(self._id, False)
        da.release_pool(self._id)
        self.allocator.empty_cache(self._id)

    def __del__(self) -> None:
        try:
            if not getattr(self, "_closed", True):
                self.close()
        except Exception:       # an interpreter shutting down: nothing sensible to do
            pass

    def _check_open(self, what: str) -> None:
        if self._closed:
            raise ValueError(f"MemPool {self._id} was closed; {what} needs a live pool")

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"use_count={self.allocator.device_allocator.get_pool_use_count(self._id)}"
        custom = ", custom allocator" if self.custom is not None else ""
        return f"MemPool(id={self._id}, {state}{custom})"


@contextmanager
def use_mem_pool(pool: MemPool):
    """``torch.cuda.use_mem_pool``: route this thread's allocations into ``pool`` (nestable)."""
    if not isinstance(pool, MemPool):
        raise TypeError(f"use_mem_pool expects a MemPool, got {type(pool).__name__}")
    pool._check_open("use_mem_pool")
    da = pool.allocator.device_allocator
    da.begin_allocate_to_pool(pool.id, current_thread_filter())   # _cuda_beginAllocateCurrentThreadToPool
    try:
        yield pool
    finally:
        da.end_allocate_to_pool(pool.id)
        da.release_pool(pool.id)


def graph_pool_handle() -> tuple[int, int]:
    """``torch.cuda.graph_pool_handle``: a fresh pool id for graphs to share (no pool exists yet)."""
    return generate_mempool_id(is_user_created=True)
