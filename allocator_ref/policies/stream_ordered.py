"""The stream-ordered pool: a Python model of ``cudaMallocAsync`` / ``cudaFreeAsync``.

What CUDA does (the CUDA Programming Guide's stream-ordered allocator chapter): each device has one
memory pool.  ``cudaMallocAsync(size, stream)`` carves memory out of it,
``cudaFreeAsync(ptr, stream)`` gives it back *in stream order*: the memory
is free once the stream reaches the free, not when the host calls it.  So

* a later malloc on the **same stream** may reuse it at once (stream order
  already puts the new work after the old);
* a malloc on **another stream** T may reuse it only under one of the pool's
  three reuse policies (``cudaMemPoolReuse*`` attributes, all on by default):

  - ``follow_event_dependencies``: T already waits on an event recorded on
    the freeing stream after the free (``cudaStreamWaitEvent``);
  - ``allow_opportunistic``: the free has already completed, with no
    dependency between it and T: the *driver* checks whether the freeing
    stream's execution has passed the free ("the stream has passed the point
    of execution indicated by the free", CUDA Programming Guide, reuse
    policies); nobody on the host has to query anything.  This model asks the
    same question with the free's event (``free_event.query()``), which reads
    the simulated stream's progress, not a host observation;
  - ``allow_internal_dependencies``: only when the pool *fails to grow* (the
    driver cannot allocate and map more physical memory), it inserts a wait
    of T on the free, then reuses (T may now stall behind the other stream).
    On a device with room the pool grows instead: the CUDA Programming Guide,
    "Stream-Ordered Memory Allocator", reuse policies,
    ``cudaMemPoolReuseAllowInternalDependencies``;

* memory above the **release threshold** (``cudaMemPoolAttrReleaseThreshold``)
  goes back to the OS at the next synchronisation: CUDA's default is 0
  (every sync trims), PyTorch's backend sets ``UINT64_MAX`` (never trims).

The driver does all this invisibly.  Here, on the simulated device, the pool
is written out in Python so a learner can watch it decide: it takes backing
*chunks* with ``cudaMalloc`` (``chunk_bytes``, default 32 MiB, or the request
rounded up to 2 MiB), sub-allocates them best-fit at 512 B granularity and
splits and merges free ranges.  To know which stream waits on which, the
allocator keeps a vector clock per stream, fed by its own :meth:`record_event`
/ :meth:`wait_event` / :meth:`stream_wait` (the device keeps no dependency
graph).  On a real GPU (``device.simulated`` False) the same class calls the
real ``cudaMallocAsync`` / ``cudaFreeAsync`` and keeps the same statistics.

PyTorch's ``backend:cudaMallocAsync`` (``c10/cuda/CUDAMallocAsyncAllocator.cpp``)
is mirrored for what a user sees: ``memory_stats()`` with every key of
``DeviceStats`` but only six of them filled (the rest read 0, as
``getDeviceStats`` leaves them), ``record_stream`` through a unifying stream,
the memory-fraction check and the OOM message.

Where the six figures come from differs.  PyTorch's ``getDeviceStats`` asks the
driver: ``cudaMemPoolAttrUsedMemCurrent`` / ``UsedMemHigh`` of the device's
*default* pool become allocated (and active) bytes, ``ReservedMemCurrent`` /
``ReservedMemHigh`` reserved bytes.  Every library that calls
``cudaMallocAsync`` without a pool of its own shares that pool, so
``torch.cuda.memory_allocated()`` / ``memory_reserved()`` include their bytes
too.  This model counts its own blocks and chunks (and, on a real GPU, reads
``ReservedMemCurrent`` after each driver call, ``_sync_reserved``): it agrees
with PyTorch while it is the pool's only user.
"""
from __future__ import annotations

from typing import Any, Optional

from sortedcontainers import SortedDict, SortedList

from allocator_ref.allocation import Allocation
from allocator_ref.caching.stats import AGGREGATE
from allocator_ref.device.errors import CudaOutOfMemoryError

from allocator_ref.front_door import check_request_size, stream_is_destroyed
from allocator_ref.editions.messages import translator

from .common import (UINT64_MAX, MiB, BlockRecord, PolicyAllocator, check_byte_option,
                     format_size, OutOfMemoryError, parse_config, round_up, stat_keys,
                     stream_handle, warn)

tr = translator("doctor")   # a refusal a learner reads, in the reader's language

ROUND_BYTES = 512          # sub-allocation granularity of the model (cudaMalloc's alignment)
CHUNK_GRANULARITY = 2 * MiB

DEFAULTS = {
    "release_threshold": UINT64_MAX,        # PyTorch's backend; CUDA's own default is 0
    "follow_event_dependencies": True,      # cudaMemPoolReuseFollowEventDependencies
    "allow_opportunistic": True,            # cudaMemPoolReuseAllowOpportunistic
    "allow_internal_dependencies": True,    # cudaMemPoolReuseAllowInternalDependencies
    "chunk_bytes": 32 * MiB,                # backing memory taken per cudaMalloc (model only)
}


# cudaMemPoolGetAttribute's statistics (CUDA runtime API, cudaMemPoolAttr), by their runtime name,
# with the driver API's name the real device reads them by.
POOL_ATTRIBUTES = {
    "cudaMemPoolAttrUsedMemCurrent": "CU_MEMPOOL_ATTR_USED_MEM_CURRENT",
    "cudaMemPoolAttrUsedMemHigh": "CU_MEMPOOL_ATTR_USED_MEM_HIGH",
    "cudaMemPoolAttrReservedMemCurrent": "CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT",
    "cudaMemPoolAttrReservedMemHigh": "CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH",
    "cudaMemPoolAttrReleaseThreshold": "CU_MEMPOOL_ATTR_RELEASE_THRESHOLD",
}
# Where the model keeps each of them: (memory_stats kind, current or peak).
_MODEL_FIGURES = {
    "cudaMemPoolAttrUsedMemCurrent": ("allocated_bytes", "current"),
    "cudaMemPoolAttrUsedMemHigh": ("allocated_bytes", "peak"),
    "cudaMemPoolAttrReservedMemCurrent": ("reserved_bytes", "current"),
    "cudaMemPoolAttrReservedMemHigh": ("reserved_bytes", "peak"),
}


class _Chunk:
    """Backing memory the model took with cudaMalloc (the driver's pool pages)."""

    __slots__ = ("ptr", "size")

    def __init__(self, ptr: int, size: int) -> None:
        self.ptr, self.size = ptr, size


class _Block:
    """A range of a chunk: allocated to a caller, or free with the story of its free."""

    __slots__ = ("ptr", "size", "chunk", "allocated", "requested_size", "stream", "stream_uses",
                 "freed_on", "free_tick", "free_event", "free_knows")

    def __init__(self, ptr: int, size: int, chunk: _Chunk) -> None:
        self.ptr, self.size, self.chunk = ptr, size, chunk
        self.allocated = False
        self.requested_size = 0
        self.stream = None          # the creation stream while allocated
        self.stream_uses: list = []
        # For a free block: which stream's order the free belongs to (None: never used,
        # anyone may take it), its position on that stream, and the event recorded
        # there right after the free (what other streams can wait on or query).
        self.freed_on: Optional[int] = None
        self.free_tick = 0
        self.free_event = None
        self.free_knows: dict = {}

    def take_free_story(self, other: "_Block") -> None:
        self.freed_on, self.free_tick = other.freed_on, other.free_tick
        self.free_event, self.free_knows = other.free_event, other.free_knows


class StreamOrderedAllocator(PolicyAllocator):
    """``cudaMallocAsync`` with one pool per device, a release threshold and three reuse switches."""

    # PyTorch's backend fills only these (CudaMallocAsyncAllocator::getDeviceStats); the other keys
    # of DeviceStats are still returned by memory_stats(), as zeros (see memory_stats below).
    STAT_KEYS = stat_keys(("allocated_bytes", "active_bytes", "reserved_bytes"), metrics=("current", "peak"))

    def __init__(self, device: Any, config: Any = None, *, driver_pool: Optional[bool] = None,
                 **options: Any) -> None:
        super().__init__(device)
        self.options = parse_config(options, parse_config(config, DEFAULTS))
        self._check_threshold(self.options["release_threshold"], "release_threshold")
        # More than the device holds could never be taken in one cudaMalloc.
        check_byte_option("chunk_bytes", self.options["chunk_bytes"], 1, device.mem_get_info()[1])
        # On a GPU the driver's own pool does the work; the simulated device gets the Python model.
        self.driver_pool = (not device.simulated) if driver_pool is None else driver_pool
        if self.driver_pool:
            self._setup_driver_pool()
        self.memory_limit = UINT64_MAX      # set_per_process_memory_fraction (a PyTorch-side check)
        self.reuse_counts = {"same_stream": 0, "fresh": 0, "event_dependency": 0,
                             "opportunistic": 0, "internal_dependency": 0}
        self._blocks: SortedDict = SortedDict()   # ptr -> _Block, every block of every chunk
        self._free: SortedList = SortedList()     # (size, ptr) of free blocks: best fit first
        self._chunks: dict[int, _Chunk] = {}
        self._tick = 0                            # a counter ordering every recorded event
        self._clock: dict[int, dict[int, int]] = {}   # stream -> {stream it waits on: up to which tick}
        self._event_clocks: dict[int, tuple] = {}     # id(event) -> (event, what it proves)
        self._unifying = None                     # side stream for frees after record_stream

    # ------------------------------------------------------------------ options
    @property
    def release_threshold(self) -> int:
        return self.options["release_threshold"]

    def set_release_threshold(self, nbytes: int) -> None:
        """cudaMemPoolSetAttribute(cudaMemPoolAttrReleaseThreshold)."""
        self._check_threshold(nbytes, "release threshold")
        self.options["release_threshold"] = nbytes
        if self.driver_pool:
            self.device.mempool_set_release_threshold(nbytes)

    @staticmethod
    def _check_threshold(nbytes: Any, what: str) -> None:
        if isinstance(nbytes, bool) or not isinstance(nbytes, int) or not 0 <= nbytes <= UINT64_MAX:
            raise ValueError(f"{what} must be an int between 0 and UINT64_MAX, got {nbytes!r}")

    def _setup_driver_pool(self) -> None:
        switches = ("follow_event_dependencies", "allow_opportunistic", "allow_internal_dependencies")
        if not all(self.options[s] for s in switches):
            raise ValueError("the reuse switches can only be turned off in the simulated model: the Device "
                             "protocol has no cudaMemPoolSetAttribute(cudaMemPoolReuse*) call "
                             "(the driver's defaults, all on, are what PyTorch uses)")
        self.device.mempool_set_release_threshold(self.release_threshold)

    def set_per_process_memory_fraction(self, fraction: float) -> None:
        """PyTorch's backend: a hard limit of ``fraction * total`` bytes checked before each malloc."""
        if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) or not 0 <= fraction <= 1:
            raise ValueError(f"invalid fraction {fraction!r}: it must be between 0 and 1")
        _free, total = self.device.mem_get_info()
        self.memory_limit = int(fraction * total)

    # ------------------------------------------------------------------ events and dependencies
    def _next_tick(self) -> int:
        self._tick += 1
        return self._tick

    def _record_event_on(self, stream: Any) -> tuple[Any, dict]:
        """cudaEventRecord on ``stream``; returns the event and what waiting on it proves."""
        event = self.device.create_event(timing=False)
        event.record(stream)
        knows = dict(self._clock.get(stream_handle(stream), {}))
        knows[stream_handle(stream)] = self._next_tick()
        return event, knows

    def _wait(self, waiter: Any, event: Any, knows: dict) -> None:
        """cudaStreamWaitEvent: ``waiter`` now runs after everything ``event`` proves."""
        self.device.wait_event(waiter, event)
        clock = self._clock.setdefault(stream_handle(waiter), {})
        for handle, tick in knows.items():
            if tick > clock.get(handle, 0):
                clock[handle] = tick

    def record_event(self, stream: Optional[Any] = None) -> Any:
        """Record a CUDA event on ``stream`` that the pool can later see a stream wait on."""
        self._check_open("record_event")
        stream = self._resolve_stream(stream, "record_event")
        event, knows = self._record_event_on(stream)
        self._event_clocks[id(event)] = (event, knows)
        return event

    def wait_event(self, stream: Optional[Any], event: Any) -> None:
        """cudaStreamWaitEvent through the pool, so ``follow_event_dependencies`` can see it.

        An event the pool did not record (made directly on the device) is
        still waited on, but the pool cannot tell which frees it covers.
        """
        self._check_open("wait_event")
        stream = self._resolve_stream(stream, "wait_event")
        entry = self._event_clocks.get(id(event))
        if entry is not None and entry[0] is event:
            self._wait(stream, event, entry[1])
        else:
            self.device.wait_event(stream, event)

    def stream_wait(self, waiter: Optional[Any], waitee: Optional[Any]) -> None:
        """Make ``waiter`` wait for everything queued on ``waitee`` so far (record + wait)."""
        self.wait_event(waiter, self.record_event(waitee))

    def _depends_on_free(self, stream: Any, block: _Block) -> bool:
        return self._clock.get(stream_handle(stream), {}).get(block.freed_on, 0) >= block.free_tick

    # ------------------------------------------------------------------ malloc
    def malloc(self, nbytes: int, stream: Optional[Any] = None) -> Allocation:
        self._check_open("malloc")
        size = check_request_size(nbytes)
        stream = self._resolve_stream(stream, "malloc")
        if size == 0:
            return self._null_allocation(stream)
        if self._used_bytes() + size > self.memory_limit:
            self._raise_oom(size, size, stream)          # PyTorch checks the fraction first
        if self.driver_pool:
            block = self._driver_malloc(size, stream)
        else:
            block = self._find_or_grow(round_up(size, ROUND_BYTES), size, stream)
            block.allocated = True
        block.requested_size, block.stream, block.stream_uses = size, stream, []
        return self._hand_out(block, stream)

    def _used_bytes(self) -> int:
        """PyTorch's ``pytorch_used_bytes``: the sizes callers asked for and still hold."""
        return self.stats["requested_bytes"][AGGREGATE].current

    def _find_or_grow(self, rounded: int, size: int, stream: Any) -> _Block:
        """The driver's order: reuse without waiting, else grow, else insert a wait, else trim and retry.

        An internal dependency is the pool's last resort before trimming: the CUDA
        Programming Guide (reuse policies, ``cudaMemPoolReuseAllowInternalDependencies``)
        has the driver look for memory freed on another stream only after it fails to
        allocate and map more physical memory.  So on a device with room the pool grows
        and the two streams keep running side by side.
        """
        block = self._reuse_without_waiting(rounded, stream) or self._grow(rounded, stream)
        if block is None:
            block = self._reuse_with_inserted_wait(rounded, stream)
        if block is None:
            self.trim_to(0)                       # newest PyTorch: trim the pool, retry once
            block = self._grow(rounded, stream)
        if block is None:
            self._raise_oom(size, rounded, stream)
        return block

    def _reuse_without_waiting(self, rounded: int, stream: Any) -> Optional[_Block]:
        """Best fit among the free blocks ``stream`` may take as they are (no new wait)."""
        for _size, ptr in self._free.irange((rounded, -1)):
            block = self._blocks[ptr]
            rule = self._reuse_rule(block, stream)
            if rule:
                self.reuse_counts[rule] += 1
                return self._carve(block, rounded)
        return None

    def _reuse_with_inserted_wait(self, rounded: int, stream: Any) -> Optional[_Block]:
        """allow_internal_dependencies: make ``stream`` wait on another stream's free, then reuse."""
        best_fit = next(iter(self._free.irange((rounded, -1))), None)   # every block left needs a wait
        if best_fit is None or not self.options["allow_internal_dependencies"]:
            return None
        block = self._blocks[best_fit[1]]
        self._wait(stream, block.free_event, block.free_knows)   # the driver inserts this wait
        self.reuse_counts["internal_dependency"] += 1
        return self._carve(block, rounded)

    def _reuse_rule(self, block: _Block, stream: Any) -> Optional[str]:
        """Why ``stream`` may take this free block without waiting, or None."""
        if block.freed_on is None:
            return "fresh"
        if block.freed_on == stream_handle(stream):
            return "same_stream"
        if self.options["follow_event_dependencies"] and self._depends_on_free(stream, block):
            return "event_dependency"
        if self.options["allow_opportunistic"] and block.free_event.query():
            return "opportunistic"
        return None

    def _carve(self, block: _Block, rounded: int) -> _Block:
        """Take ``rounded`` bytes from the start of a free block; the rest stays free with the same story."""
        self._free.remove((block.size, block.ptr))
        if block.size > rounded:
            rest = _Block(block.ptr + rounded, block.size - rounded, block.chunk)
            rest.take_free_story(block)
            self._insert_free(rest)
            block.size = rounded
        return block

    def _insert_free(self, block: _Block) -> None:
        self._blocks[block.ptr] = block
        self._free.add((block.size, block.ptr))

    def _grow(self, rounded: int, stream: Any) -> Optional[_Block]:
        """Take a new backing chunk (the default chunk size, else just enough); None if the device is full."""
        exact = round_up(rounded, CHUNK_GRANULARITY)
        for chunk_size in dict.fromkeys((max(self.options["chunk_bytes"], exact), exact)):
            ptr = self._try_cuda_malloc(chunk_size)
            if ptr is not None:
                break
        else:
            return None
        chunk = _Chunk(ptr, chunk_size)
        self._chunks[ptr] = chunk
        self.stats.num_device_alloc += 1
        self._stat_increase(("segment",), 1)
        self._stat_increase(("reserved_bytes",), chunk_size)
        self._emit("segment_alloc", ptr, chunk_size, stream)
        self._insert_free(_Block(ptr, chunk_size, chunk))
        self.reuse_counts["fresh"] += 1
        return self._carve(self._blocks[ptr], rounded)

    def _try_cuda_malloc(self, nbytes: int) -> Optional[int]:
        if nbytes > self.device.info.total_memory:      # (info: no simulated cudaMemGetInfo call)
            # More than the whole GPU: the driver answers out of memory (PyTorch: OutOfMemoryError,
            # as every other design here), not the simulated device's "absurd size" invalid value.
            return None
        try:
            return self.device.malloc(nbytes)
        except CudaOutOfMemoryError:
            return None

    def _raise_oom(self, size: int, rounded: int, stream: Any) -> None:
        """The cudaMallocAsync backend's message (``CUDAMallocAsyncAllocator.cpp``'s mallocAsync), with this pool's figures."""
        self._trace_oom(rounded, stream)
        free, total = self.device.mem_get_info()
        raise OutOfMemoryError(
            f"Allocation on device {self.device.info.index} would exceed allowed memory. (out of memory)"
            f"\nCurrently allocated     : {format_size(self._used_bytes())}"
            f"\nRequested               : {format_size(size)}"
            f"\nDevice limit            : {format_size(total)}"
            f"\nFree (according to CUDA): {format_size(free)}"
            f"\nPyTorch limit (set by user-supplied memory fraction)"
            f"\n                        : {format_size(self.memory_limit)}")

    # ------------------------------------------------------------------ free
    def free(self, allocation: "Allocation | int") -> None:
        """cudaFreeAsync on the creation stream, or on the unifying stream after record_stream."""
        self._check_open("free")
        found = self._check_allocation(allocation, "free")
        if found is None:                          # a null allocation (not its ptr field: the caller's)
            if isinstance(allocation, Allocation):
                allocation.freed = True
            return
        allocation = found
        block = allocation._block
        owner = block.stream              # our record: allocation.stream is the caller's to read, not to steer
        if stream_is_destroyed(owner) or any(stream_is_destroyed(s) for s in block.stream_uses):
            # The device drains first (see _drain_destroyed); then the free is ordered on
            # what is left alive, or on the default stream if the creation stream is gone.
            block.stream_uses = self._drain_destroyed(block.stream_uses)
            if stream_is_destroyed(owner):
                owner = self.device.default_stream
        free_stream = self._free_stream(allocation, owner)
        self._take_back(allocation)
        if self.driver_pool:
            self.device.free_async(block.ptr, free_stream)
            self._complete_free(block)
            self._sync_reserved()
            return
        event, knows = self._record_event_on(free_stream)   # the free point on that stream
        block.allocated, block.stream_uses = False, []
        block.freed_on, block.free_tick = stream_handle(free_stream), knows[stream_handle(free_stream)]
        block.free_event, block.free_knows = event, knows
        self._complete_free(block)      # in the pool's books at once; usable in stream order
        self._insert_free(self._coalesce(block))

    def _free_stream(self, allocation: Allocation, owner: Any) -> Any:
        """PyTorch's backend: a block used on other streams is freed on a side stream that waits for all."""
        uses = allocation._block.stream_uses
        if not uses:
            return owner
        if self._unifying is None:
            self._unifying = self.device.create_stream()
        for stream in [owner, *uses]:
            event, knows = self._record_event_on(stream)
            self._wait(self._unifying, event, knows)
        return self._unifying

    def _coalesce(self, block: _Block) -> _Block:
        """Merge with free neighbours of the same chunk freed on the same stream, or never used.

        Never-used memory has no pending work, so joining it to this stream's
        free is safe (only more conservative for other streams), and it lets a
        chunk freed piece by piece on one stream become whole again.  A
        neighbour freed on *another* stream keeps its own story: merged, the
        block would need both streams' conditions at once.
        """
        for neighbour in (self._neighbour(block, before=True), self._neighbour(block, before=False)):
            if neighbour is None or neighbour.allocated or neighbour.chunk is not block.chunk:
                continue
            if neighbour.freed_on not in (None, block.freed_on):
                continue                            # another stream's free: keep its own story
            self._free.remove((neighbour.size, neighbour.ptr))
            del self._blocks[neighbour.ptr]
            if neighbour.ptr < block.ptr:
                del self._blocks[block.ptr]
                block.ptr = neighbour.ptr
            block.size += neighbour.size
        return block

    def _neighbour(self, block: _Block, before: bool) -> Optional[_Block]:
        if before:
            # The block just below: irange walks the sorted keys without the positional index
            # that peekitem(i) rebuilds after every insert and delete (O(n) each time).
            below = next(self._blocks.irange(maximum=block.ptr, inclusive=(True, False), reverse=True), None)
            if below is None:
                return None
            candidate = self._blocks[below]
            return candidate if candidate.ptr + candidate.size == block.ptr else None
        candidate = self._blocks.get(block.ptr + block.size)
        return candidate

    # ------------------------------------------------------------------ record_stream
    def record_stream(self, allocation: "Allocation | int", stream: Any) -> None:
        """``Tensor.record_stream``: the free will be ordered after the work queued on ``stream``."""
        self._check_open("record_stream")
        checked = self._check_allocation(allocation, "record_stream")
        resolved = self._resolve_stream(stream, "record_stream")
        if checked is not None and resolved is checked._block.stream:
            warn("Called record_stream on tensor whose original creation stream matches the recorded "
                 "stream. This is unnecessary and has no effect.")
            return
        found = self._validated_record_stream(allocation, stream)
        if found:
            block, stream = found
            block.stream_uses.append(stream)

    # ------------------------------------------------------------------ synchronise, trim, empty
    def synchronize(self, stream: Optional[Any] = None) -> None:
        """A device (or stream) synchronisation: the pool trims itself down to the release threshold."""
        self._check_open("synchronize")
        if stream is None:
            self.device.synchronize()
        else:
            self._resolve_stream(stream, "synchronize").synchronize()
        if self.driver_pool:
            self._sync_reserved()                   # the driver trims by itself
        elif self.memory_reserved() > self.release_threshold:
            self.trim_to(self.release_threshold)

    def trim_to(self, min_bytes_to_keep: int) -> None:
        """cudaMemPoolTrimTo: release whole unused chunks while at least ``min_bytes_to_keep`` stays.

        A chunk goes only when every byte of it is free *and* the host has seen
        each free complete (an async free not yet observed cannot be released).
        """
        self._check_open("trim_to")
        self._check_threshold(min_bytes_to_keep, "min_bytes_to_keep")
        if self.driver_pool:
            self.device.mempool_trim_to(min_bytes_to_keep)
            self._sync_reserved()
            return
        for chunk in sorted(self._chunks.values(), key=lambda c: (-c.size, c.ptr)):
            if self.memory_reserved() - chunk.size >= min_bytes_to_keep and self._releasable(chunk):
                self._release_chunk(chunk)

    def _chunk_blocks(self, chunk: _Chunk) -> list[_Block]:
        return list(self._blocks.values()[self._blocks.bisect_left(chunk.ptr):
                                          self._blocks.bisect_left(chunk.ptr + chunk.size)])

    def _releasable(self, chunk: _Chunk) -> bool:
        return all(not b.allocated and (b.free_event is None or b.free_event.query())
                   for b in self._chunk_blocks(chunk))

    def _release_chunk(self, chunk: _Chunk) -> None:
        for block in self._chunk_blocks(chunk):
            self._free.discard((block.size, block.ptr))
            del self._blocks[block.ptr]
        del self._chunks[chunk.ptr]
        self.device.free(chunk.ptr)
        self.stats.num_device_free += 1
        self._stat_decrease(("segment",), 1)
        self._stat_decrease(("reserved_bytes",), chunk.size)
        self._emit("segment_free", chunk.ptr, chunk.size, None)

    def empty_cache(self) -> None:
        """PyTorch's backend: cudaDeviceSynchronize + cudaMemPoolTrimTo(pool, 0)."""
        self._check_open("empty_cache")
        self.device.synchronize()
        self.trim_to(0)

    # ------------------------------------------------------------------ the real driver pool
    def _driver_malloc(self, size: int, stream: Any) -> BlockRecord:
        """cudaMallocAsync itself (GPU): the driver rounds and picks; we only keep the books."""
        try:
            ptr = self.device.malloc_async(size, stream)
        except CudaOutOfMemoryError:
            self.device.mempool_trim_to(0)
            try:
                ptr = self.device.malloc_async(size, stream)
            except CudaOutOfMemoryError:
                self._raise_oom(size, size, stream)
        self._sync_reserved()
        return BlockRecord(ptr=ptr, size=size, requested_size=size, stream=stream)

    def _sync_reserved(self) -> None:
        """Read cudaMemPoolAttrReservedMemCurrent into reserved_bytes (its peak follows)."""
        delta = self.device.mempool_reserved() - self.memory_reserved()
        if delta > 0:
            self._stat_increase(("reserved_bytes",), delta)
        elif delta < 0:
            self._stat_decrease(("reserved_bytes",), -delta)

    # ------------------------------------------------------------------ the pool's own counters
    def get_pool_attribute(self, attr: str) -> int:
        """``cudaMemPoolGetAttribute(pool, attr)`` for one of ``POOL_ATTRIBUTES``.

        PyTorch's ``CudaMallocAsyncAllocator::getDeviceStats`` reads the first four into
        ``memory_stats()`` (UsedMem* as allocated and active bytes, ReservedMem* as reserved
        bytes), so under ``backend:cudaMallocAsync`` these *are* PyTorch's figures.  On a GPU
        the driver answers; on the simulated device the model's books do (the simulated
        device's own pool keeps no high marks).
        """
        if attr not in POOL_ATTRIBUTES:
            raise ValueError(f"unknown pool attribute {attr!r}: choose one of {', '.join(POOL_ATTRIBUTES)}")
        self._check_open("get_pool_attribute")
        if attr == "cudaMemPoolAttrReleaseThreshold":
            return self.release_threshold
        if self.driver_pool and not self.device.simulated:
            return self.device.mempool_attribute(POOL_ATTRIBUTES[attr])
        kind, metric = _MODEL_FIGURES[attr]
        return getattr(self.stats[kind][AGGREGATE], metric)

    def pool_attributes(self) -> dict:
        """Every attribute of ``POOL_ATTRIBUTES``, by its CUDA name."""
        return {attr: self.get_pool_attribute(attr) for attr in POOL_ATTRIBUTES}

    def reset_pool_high_marks(self) -> None:
        """``cudaMemPoolSetAttribute(pool, cudaMemPool{Reserved,Used}MemHigh, 0)``: each high mark
        drops to its current value (0 is the only value the driver accepts).

        This is what ``torch.cuda.reset_peak_memory_stats()`` does under the async backend
        (``CudaMallocAsyncAllocator::resetPeakStats``).
        """
        self._check_open("reset_pool_high_marks")
        if self.driver_pool and not self.device.simulated:
            self.device.mempool_reset_high_marks()
        self.reset_peak_memory_stats()

    # ------------------------------------------------------------------ statistics
    def memory_stats(self) -> dict:
        """Every key ``torch.cuda.memory_stats()`` returns, with only six of them filled.

        ``THCPModule_memoryStats`` (torch/csrc/cuda/Module.cpp) builds the dict from a
        whole ``DeviceStats`` whatever the backend, and ``CudaMallocAsyncAllocator::
        getDeviceStats`` fills only the ``.all`` current/peak of allocated, active and
        reserved bytes, leaving every other ``Stat`` zeroed (and ``max_split_size`` at
        the struct's default 0).  So a dashboard reads "0 OOMs, 0 retries, 0 segments"
        under this backend: zeros that mean "not tracked", not "did not happen".
        """
        flat = self.stats.as_flat_dict()
        stats = {key: 0 for key in flat}
        stats.update({key: flat[key] for key in self.STAT_KEYS})
        return stats

    # ------------------------------------------------------------------ snapshot and teardown
    def allocator_settings(self) -> dict:
        return {"PYTORCH_CUDA_ALLOC_CONF": "backend:cudaMallocAsync", **self.options}

    def snapshot(self) -> dict:
        if self.driver_pool:
            raise RuntimeError(tr("cudaMallocAsync does not yet support getMemorySnapshot: the driver's pool "
                                  "is not visible (use the simulated device to see the model's chunks)"))
        return super().snapshot()

    def _segments(self) -> list[dict]:
        segments = []
        for chunk in self._chunks.values():
            blocks = [self._block_dict(b.ptr, b.size, b.requested_size if b.allocated else 0,
                                       "active_allocated" if b.allocated else "inactive")
                      for b in self._chunk_blocks(chunk)]
            segments.append(self._segment_dict(chunk.ptr, blocks))
        return segments

    def close(self) -> None:
        """Free what is still live, synchronise, and give every chunk back to the device."""
        if self._closed:
            return
        self.device.synchronize()
        for allocation in self.live_allocations():
            block = self._take_back(allocation)
            if self.driver_pool:
                self.device.free_async(block.ptr, None)
            self._complete_free(block)
        if self.driver_pool:
            self.device.synchronize()
            self.device.mempool_trim_to(0)
            self._sync_reserved()
        else:
            for chunk in list(self._chunks.values()):
                self._release_chunk(chunk)
        if self._unifying is not None:
            self.device.destroy_stream(self._unifying)
            self._unifying = None
        self._closed = True
