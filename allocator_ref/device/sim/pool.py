"""cudaMallocAsync / cudaFreeAsync on the device's default memory pool (simulated).

The model, kept deliberately simple (the course's StreamOrderedAllocator
policy is the full design; this is what the *driver* does underneath):

* The pool holds **blocks**; each block is one piece of device memory the pool
  got from the device, rounded up to 2 MiB.  ``mempool_reserved()`` is their
  total (cudaMemPoolAttrReservedMemCurrent) and counts against capacity.
* ``free_async(p, s)`` returns the block to the pool *in stream order*: it
  becomes free when stream ``s`` reaches that point (``ready_us``).
* ``malloc_async(n, s)`` reuses the smallest free block that fits and that is
  safe: freed on the same stream ``s`` (stream order makes it safe, no device
  call at all), or whose free the host already knows completed
  (cudaMemPoolReuseAllowOpportunistic).  Otherwise the pool grows: a miss,
  costing like cudaMalloc.  The driver's other reuse rules (following event
  dependencies, inserting waits) are not modelled.
* The release threshold (cudaMemPoolAttrReleaseThreshold) defaults to 0, as
  in CUDA: at every synchronize the pool hands free blocks back until it holds
  no more than the threshold -- which is why a naive alloc/free/sync loop
  pays the cudaMalloc price every time (Cytnx PR #850).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import cuda_error
from .address_space import round_up
from .backing import LazyPages
from .checks import check_size
from .device_allocation import DeviceAllocation

POOL_GRANULE = 2 << 20


@dataclass
class PoolBlock:
    base: int
    size: int
    stream: object        # the stream whose free_async released it
    ready_us: float       # when that stream reaches the free


class PoolCalls:
    """The cudaMallocAsync half of SimDevice (mixed into SimDevice)."""

    def _init_pool(self) -> None:
        self._pool_free: dict[int, PoolBlock] = {}     # base -> free block
        self._pool_storage: dict[int, object] = {}     # base -> bytes of a free block
        self._pool_reserved = 0
        self._pool_threshold = 0

    # --- the calls --------------------------------------------------------
    def malloc_async(self, nbytes: int, stream=None) -> int:
        """cudaMallocAsync: usable by work queued on ``stream`` after this call."""
        check_size(nbytes, "malloc_async")
        s = self._check_stream(stream)
        self.counters.malloc_async_calls += 1
        size = round_up(nbytes, POOL_GRANULE)
        block = self._pool_best_fit(size, s)
        if block is not None:
            del self._pool_free[block.base]
            self.counters.pool_hits += 1
            self._spend(self.costs.pool_hit_us())
            storage = self._pool_storage.pop(block.base)       # still mapped: same bytes
            self._allocs[block.base] = DeviceAllocation(block.base, nbytes, block.size, "pool", storage)
            self._recently_freed.pop(block.base, None)
            return block.base
        return self._pool_grow(nbytes, size)

    def _pool_best_fit(self, size: int, stream):
        """Smallest free block >= size that is safe to hand to ``stream`` now."""
        now = self._clock.host_us
        best = None
        for b in self._pool_free.values():
            if b.size >= size and (b.stream is stream or b.ready_us <= now):
                if best is None or b.size < best.size:
                    best = b
        return best

    def _pool_grow(self, nbytes: int, size: int) -> int:
        """A miss: the pool asks the device for another block (like cudaMalloc, no sync)."""
        self.counters.pool_misses += 1
        self._spend(self.costs.pool_miss_us(size))
        free, _ = self._free_total()
        if size > free:                            # try handing back what is safely free first
            self._pool_release(keep=0, only_ready=True)
        self._charge(size, "cudaErrorMemoryAllocation", "cudaMallocAsync")
        try:
            base = self._place("malloc", size, POOL_GRANULE, "malloc_async")
        except Exception:
            self._uncharge(size)
            raise
        self._pool_reserved += size
        self._map_allocation(DeviceAllocation(base, nbytes, size, "pool", LazyPages(size)))
        return base

    def free_async(self, ptr: int, stream=None) -> None:
        """cudaFreeAsync: the block returns to the pool when ``stream`` reaches this point."""
        alloc = self._find_allocation(ptr, "free_async")
        s = self._check_stream(stream)
        if alloc.kind != "pool":
            raise cuda_error("cudaErrorInvalidValue", f"free_async({ptr:#x}): this pointer came from "
                             "malloc (cudaMalloc); the simulated device only frees malloc_async memory "
                             "with free_async -- use free")
        self.counters.free_async_calls += 1
        self._spend(self.costs.pool_free_us())
        self._pool_give_back(alloc, s)

    def _pool_give_back(self, alloc, stream) -> None:
        del self._allocs[alloc.base]
        self._recently_freed[alloc.base] = None
        if alloc.ipc_segment is not None:
            self._retire_export(alloc)
        ready = max(self._clock.host_us, stream.tail_us)
        self._pool_free[alloc.base] = PoolBlock(alloc.base, alloc.charged, stream, ready)
        self._pool_storage[alloc.base] = alloc.storage     # the bytes stay: pool memory stays mapped

    # --- attributes and trimming ------------------------------------------
    def mempool_set_release_threshold(self, nbytes: int) -> None:
        """cudaMemPoolSetAttribute(cudaMemPoolAttrReleaseThreshold)."""
        if isinstance(nbytes, bool) or not isinstance(nbytes, int) or nbytes < 0:
            raise cuda_error("cudaErrorInvalidValue", f"release threshold must be an int >= 0, got {nbytes!r}")
        self._check_open()
        self._pool_threshold = nbytes

    def mempool_release_threshold(self) -> int:
        return self._pool_threshold

    def mempool_reserved(self) -> int:
        """cudaMemPoolAttrReservedMemCurrent: bytes the pool holds (used or free)."""
        return self._pool_reserved

    def mempool_used(self) -> int:
        """cudaMemPoolAttrUsedMemCurrent: bytes handed out and not yet freed."""
        return self._pool_reserved - sum(b.size for b in self._pool_free.values())

    def mempool_trim_to(self, min_bytes_to_keep: int) -> None:
        """cudaMemPoolTrimTo: release free blocks whose free already completed, down to the given size."""
        if isinstance(min_bytes_to_keep, bool) or not isinstance(min_bytes_to_keep, int) or min_bytes_to_keep < 0:
            raise cuda_error("cudaErrorInvalidValue", f"mempool_trim_to needs an int >= 0, got {min_bytes_to_keep!r}")
        self._check_open()
        self._pool_release(keep=min_bytes_to_keep, only_ready=True)

    def _pool_on_sync(self) -> None:
        """Called after every synchronize: trim above the release threshold."""
        if self._pool_reserved > self._pool_threshold:
            self._pool_release(keep=self._pool_threshold, only_ready=True)

    def _pool_release(self, keep: int, only_ready: bool) -> None:
        """Hand free blocks back to the device, largest first, until the pool holds <= keep."""
        now = self._clock.host_us
        for block in sorted(self._pool_free.values(), key=lambda b: -b.size):
            if self._pool_reserved <= keep:
                break
            if only_ready and block.ready_us > now:
                continue
            del self._pool_free[block.base]
            self._pool_storage.pop(block.base)
            self._pages.remove(block.base)
            self._space.release(block.base)
            self._pool_reserved -= block.size
            self._uncharge(block.size)
            self.counters.pool_releases += 1
            self._spend(self.costs.pool_release_us(block.size))
