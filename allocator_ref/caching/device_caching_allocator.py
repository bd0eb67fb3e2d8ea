"""``DeviceCachingAllocator``: one device's pools, blocks, stats and history, as in PyTorch 2.11.

Read this file next to ``c10/cuda/CUDACachingAllocator.cpp``: the class below holds only members
of PyTorch's ``class DeviceCachingAllocator``, under their names (snake_case for camelCase), in
the .cpp's order: the public section, then the private one, with the .cpp's groupings as
section comments.  Nothing else is a method here: the project's own helpers are plain
functions (expandable.py, capture_rules.py, private_pool.py) or live in the layers above,
``NativeCachingAllocator`` (native.py: the pointer -> Allocation map, the argument checks,
the uncached path) and ``CachingAllocator`` (allocator.py: the torch.cuda-shaped API).

The life of a request (``malloc``):

1. ``process_events``: blocks whose cross-stream uses finished become free.
2. ``round_size``: 512 B multiples (or power-of-two divisions).
3. ``get_pool``: the small (<= 1 MiB) or large pool (or a private pool); ``get_allocation_size``.
4. ``get_free_block``: best fit on the same stream.
5. on a miss: garbage collection (if configured), ``alloc_block`` (cudaMalloc a new
   segment), ``try_mempool_fallback``, ``release_available_cached_blocks`` + retry,
   ``release_cached_blocks`` (empty the cache) + retry, and finally ``OutOfMemoryError``.
6. ``should_split`` and ``alloc_found_block``: split the block if the remainder is worth keeping.
"""
from __future__ import annotations

from collections import deque
from contextlib import nullcontext
from typing import Any, Callable, Optional

from ..device.errors import CudaOutOfMemoryError
from ..events import TraceEntry, TraceRecorder, gather_python_stack
from .block import Block, BlockPool
from .capture_rules import stream_get_capture_info, update_visited
from .checkpoint import PrivatePoolState, RestoreResult, SegmentState
from .config import SIZE_MAX, AllocatorConfig, get_allocation_size, kMinBlockSize, kSmallSize, round_size
from .expandable import ExpandableSegment, allocatable, expandable_size, is_expandable_segments_active
from .oom import EXABYTE_MESSAGE, OutOfMemoryError, oom_message
from .pools import DEFAULT_POOL_ID, check_pool_id, current_thread_filter
from .private_pool import PrivatePool, allocated_in_private_pools
from .snapshot import block_state
from .stats import AGGREGATE, DeviceStats
from .unsafe import split_segment_release_error


class AllocParams:
    """``AllocParams``: one request travelling down the malloc ladder."""

    __slots__ = ("size", "alloc_size", "pool", "stream", "stream_key", "block", "err", "expandable")

    def __init__(self, size: int, alloc_size: int, pool: BlockPool, stream: Any) -> None:
        self.size = size                # rounded request
        self.alloc_size = alloc_size    # segment size cudaMalloc would be asked for
        self.pool = pool
        self.stream = stream
        self.stream_key = stream.handle
        self.block: Optional[Block] = None
        self.err: Optional[str] = None
        self.expandable = False         # is_expandable_segments_active (set by malloc)


# Two free functions of the .cpp, above the class as there: the device calls of alloc_block and
# release_block.  They take the device (PyTorch's are global: the current device).

def cuda_malloc_maybe_capturing(device: Any, size: int, pool: BlockPool, captures_underway: list) -> Optional[int]:
    """``cudaMallocMaybeCapturing`` + ``allocPrimitive``: the pointer, or None when out of memory.

    A custom-allocator pool asks its allocator (``raw_alloc``); a stream that is
    capturing gets ``cudaMalloc`` in relaxed capture mode (new addresses, not a graph node).
    """
    owner = pool.owner_PrivatePool
    capturing = captures_underway and getattr(device, "is_capturing", None) is not None and device.is_capturing()
    guard = device.capture_mode("relaxed") if capturing else nullcontext()
    with guard:
        if owner is not None and owner.allocator is not None:
            return owner.allocator.raw_alloc(size)
        try:
            return device.malloc(size)
        except CudaOutOfMemoryError:
            return None


def cuda_free(device: Any, ptr: int, pool: BlockPool) -> None:
    """``release_block``'s ``C10_CUDA_CHECK(cudaFree(ptr))``, or the pool's custom allocator's ``raw_delete``."""
    owner = pool.owner_PrivatePool
    if owner is not None and owner.allocator is not None:
        owner.allocator.raw_delete(ptr)
    else:
        device.free(ptr)



class PyTorchWording:
    """The out-of-memory text ``DeviceCachingAllocator::malloc`` builds inline when it is out of rungs,
    filled from ``allocator``'s counters (a callable object, so an allocator holds it as data)."""

    def __call__(self, allocator, alloc_size: int, total: int, free: int) -> str:
        stats = allocator.stats
        return oom_message(
            device_index=allocator.device.info.index, alloc_size=alloc_size, total=total, free=free,
            allocated=stats.allocated_bytes[AGGREGATE].current,
            reserved=stats.reserved_bytes[AGGREGATE].current,
            allowed=allocator.allowed_memory_maximum,
            process_in_use=(total - free) if allocator.device.info.simulated else None,
            private_pools=allocated_in_private_pools(allocator.graph_pools))


PYTORCH_WORDING = PyTorchWording()


class DeviceCachingAllocator:
    """PyTorch's ``DeviceCachingAllocator``: the caching allocator of one device.

    ``malloc(size, stream)`` returns a ``Block``, ``free(block)`` takes one back: callers hold
    Blocks here.  The layer above (``NativeCachingAllocator``, native.py) turns them into the
    Allocations a user holds.  ``config`` is this allocator's CUDAAllocatorConfig (global in
    PyTorch, one per allocator here, so two allocators in a notebook can differ).
    """

    # ``NativeCachingAllocator::malloc`` refuses 1 EB and more with these words (a port may reword them).
    exabyte_message = EXABYTE_MESSAGE
    # The words malloc raises with when it is out of rungs: PyTorch's (oom.py).  A data attribute, not a
    # method, so a port that words its error differently (torch_npu: npu/oom.py) sets its own and nobody
    # has to recognise a message by its text; every method here stays one of PyTorch's members.
    oom_wording = PYTORCH_WORDING

    def __init__(self, device: Any, config: AllocatorConfig) -> None:
        """``DeviceCachingAllocator()``: empty pools; max_split_size frozen into the stats."""
        self.device = device
        self.config = config
        self.stats = DeviceStats()
        ms = config.max_split_size
        self.stats.max_split_size = -1 if ms == SIZE_MAX else ms
        self.large_blocks = BlockPool(is_small=False)
        self.small_blocks = BlockPool(is_small=True)
        self.active_blocks: dict[int, Block] = {}     # ptr -> block (allocated, or waiting for events)
        self.captures_underway: list[tuple[tuple, Callable]] = []   # (pool id, filter), newest last
        self.deferred_blocks: dict = {}                 # needs_events_deferred_until_no_capture: block -> free markers
        self.cuda_events: dict[int, deque] = {}        # stream handle -> FIFO of (event, block)
        self.total_allocated_memory = 0                # bytes of all segments / mapped pages
        self.allowed_memory_maximum: Optional[int] = None   # None is PyTorch's set_fraction == false
        self.expandable_segments_: list = []
        self.trace = TraceRecorder()                   # record_history, record_context_, alloc_buffer
        # Private pools: MemPool and CUDA graph pools (section "private pools" below).
        self.graph_pools: dict[tuple, PrivatePool] = {}
        self.graph_pools_freeable: dict[tuple, PrivatePool] = {}   # use_count reached 0
        self.use_on_oom_pools: dict[tuple, None] = {}              # an ordered set
        self.no_split_pools: set = set()
        self.oom_observers: list = []                  # oom_observers_
        self.block_to_cudagraph_stream_uses: dict = {}   # block -> streams recorded during capture
        # graph_capture_record_stream_reuse: per capture, the graph nodes each stream has seen.
        self.graph_reuse_context: dict = {}              # capture id -> {stream handle: visited nodes}
        self.mempool_to_capture_id: dict = {}
        self.free_memory_callbacks: list = []          # FreeCudaMemoryCallbacksRegistry (global in PyTorch)
        # Not PyTorch's: what oversize_allocations / oversize_segments counted, so a max_split_size
        # changed mid-run cannot drive them negative (PyTorch re-reads the threshold at free).
        self._oversize_blocks: set = set()
        self._oversize_segments: set = set()

    # ================================================================ public
    # ---- history and observers (recordHistory .. maybeGatherContext)
    def record_history(self, enabled: Optional[str], context: Optional[str], max_entries: int,
                       clear_history: bool = False, skip_actions=None) -> None:
        """``recordHistory``: switch the history ring buffer on or off (``alloc_buffer``,
        ``record_context_``); events.py's TraceRecorder keeps the entries."""
        self.trace.configure(enabled=enabled, context=context, max_entries=max_entries,
                             clear_history=clear_history, skip_actions=skip_actions)

    def attach_out_of_memory_observer(self, observer) -> None:
        """``attachOutOfMemoryObserver``: ``observer(device, alloc_size, allowed, free)`` runs before an OOM is raised."""
        self.oom_observers.append(observer)

    def attach_allocator_trace_tracker(self, tracker) -> None:
        """``attachAllocatorTraceTracker``: ``tracker(entry)`` sees every TraceEntry ``record_trace``
        builds, history on or off (``trace_trackers_``; ProcessGroupNCCL's register hooks are two)."""
        self.trace.add_listener(tracker)

    def maybe_gather_context(self, levels: tuple) -> Optional[list]:
        """``maybeGatherContext``: the caller's Python stack, when history is on with a context
        level in ``levels`` (PyTorch passes the lowest level; here the levels that include it)."""
        if self.trace.enabled is None or self.trace.context not in levels:
            return None
        return gather_python_stack()

    # ---- malloc and free ("All public methods (except the above) acquire the allocator mutex")
    def malloc(self, orig_size: int, stream: Any) -> Block:
        """``malloc``: a Block of at least ``orig_size`` bytes usable on ``stream`` (the ladder in
        this file's docstring).

        The caller (``NativeCachingAllocator::malloc``, native.py) has checked the arguments."""
        # maybeGatherContext(RecordContext::STATE): the caller's stack, passed down to every
        # function that records a trace entry or stamps a block (None when history is off).
        context = self.maybe_gather_context(("state", "alloc", "all")) if self.trace.enabled is not None else None
        if self.captures_underway:                 # a MemPool context or a CUDA graph capture
            # No process_events while capturing (cudaEventQuery is illegal then); with
            # graph_capture_record_stream_reuse, free what the graph provably no longer uses.
            if self.config.graph_capture_record_stream_reuse:
                self.free_safe_blocks_in_capture(context, stream)
        elif self.cuda_events or self.deferred_blocks:     # (process_events has nothing to do otherwise)
            self.process_events(context)
        size = self.round_size(orig_size)
        pool = self.get_pool(size, stream)
        params = AllocParams(size, self.get_allocation_size(size), pool, stream)
        # The setting is asked first so the warm path makes no call when it is off.
        params.expandable = self.config.expandable_segments and is_expandable_segments_active(self.config, pool)

        # Rung 1: reuse a cached block (best fit on this stream); if none, let the registered
        # callbacks free memory (e.g. cached IPC handles) and search once more.
        found = self.get_free_block(params) or (
            self.trigger_free_memory_callbacks() and self.get_free_block(params))
        if not found:
            # Rung 2: nothing cached fits, so a new segment is needed; under a memory fraction
            # with garbage_collection_threshold, first free blocks unused for longest.
            if self.allowed_memory_maximum is not None and self.config.garbage_collection_threshold > 0:
                self.garbage_collect_cached_blocks(context)
            # Rung 3: cudaMalloc (or map expandable pages) a new segment.
            found = (self.alloc_block(params, False, context)
                     # Rung 4: take a free block from a MemPool created with use_on_oom.
                     or self.try_mempool_fallback(params)
                     # Rung 5: free just enough cached oversize blocks (max_split_size), retry.
                     or (self.release_available_cached_blocks(params, context)
                         and self.alloc_block(params, False, context))
                     # Rung 6: empty the whole cache (never mid-capture), retry one last time.
                     or (not self.captures_underway
                         and self.release_cached_blocks(context)
                         and self.alloc_block(params, True, context)))
        if not found:
            # Out of rungs: count the OOM, trace it, tell the observers, raise with the figures
            # (inline, as at the end of PyTorch's malloc).
            free, total = self.device.mem_get_info()
            self.record_trace("oom", free, params.size, params.stream_key, context, params.pool)
            stats = self.stats
            stats.num_ooms += 1
            limit = self.allowed_memory_maximum if self.allowed_memory_maximum is not None else total
            for observer in self.oom_observers:
                observer(self.device.info.index, params.alloc_size, limit, free)
            raise OutOfMemoryError(self.oom_wording(self, params.alloc_size, total, free))
        # 2.11 asks the config, not the block: toggling the flag changes splitting for every block.
        split = self.should_split(params.block, size, params.expandable)
        return self.alloc_found_block(params, orig_size, split, context)

    def alloc_found_block(self, p: AllocParams, orig_size: int, split: bool,
                          context: Optional[list] = None) -> Block:
        """``alloc_found_block``: split if asked, mark allocated, count it, trace it."""
        block, size, pool = p.block, p.size, p.pool
        stat_types = pool.stat_types
        in_expandable = block.expandable_segment is not None
        already_split = block.is_split()
        if split:
            # The NEW block takes the front; the old object becomes the remainder.
            remaining = block
            block = Block(remaining.ptr, size, remaining.stream, remaining.stream_key, pool,
                          expandable_segment=remaining.expandable_segment)
            block.splice(remaining.prev, remaining)
            remaining.ptr += size
            remaining.size -= size
            pool.insert_into_blocks(remaining)
            if already_split and not in_expandable:
                # An already-split inactive block is being shrunk by size bytes.
                self.stats.decrease("inactive_split_bytes", stat_types, block.size)
            elif not in_expandable:
                # A new split inactive block is being created from a previously unsplit block.
                for stat_type in stat_types:      # for_each_selected_stat_type
                    self.stats.inactive_split_bytes[stat_type].increase(remaining.size)
                    self.stats.inactive_split[stat_type].increase(1)
        elif already_split and not in_expandable:
            # An already-split block is becoming active.
            for stat_type in stat_types:      # for_each_selected_stat_type
                self.stats.inactive_split_bytes[stat_type].decrease(block.size)
                self.stats.inactive_split[stat_type].decrease(1)
        block.allocated = True
        block.requested_size = orig_size
        block.frames = context or []       # context_when_allocated
        self.active_blocks[block.ptr] = block
        if self.trace.active:
            self.record_trace("alloc", block.ptr, orig_size, block.stream_key, context, pool)
        self.stats.on_alloc_found_block(stat_types, block.size, orig_size)
        if block.size >= self.config.max_split_size:
            self._oversize_blocks.add(block.ptr)       # decreased by what was counted (see free)
            self.stats.oversize_allocations.increase(1)
        return block

    def free(self, block: Block) -> None:
        """``free``: the user is done with ``block``; it returns to the cache (maybe after events)."""
        # maybeGatherContext(RecordContext::ALL): only context="all" records the stack of a free.
        context = self.maybe_gather_context(("all",)) if self.trace.enabled is not None else None
        block.allocated = False
        self.stats.on_free(block.pool.stat_types, block.size)
        if self.trace.active:
            self.record_trace("free_requested", block.ptr, block.requested_size, block.stream_key,
                         context or block.frames, block.pool)
        if self._oversize_blocks and block.ptr in self._oversize_blocks:
            # PyTorch's free re-reads max_split_size; a threshold lowered since the malloc
            # would make oversize_allocations.current negative.  Undo what was counted.
            self._oversize_blocks.discard(block.ptr)
            self.stats.oversize_allocations.decrease(1)
        if block.stream_uses and self.captures_underway:
            # No events while capturing: needs_events_deferred_until_no_capture holds the block
            # (with graph_capture_record_stream_reuse, with the graph nodes that must precede reuse).
            reuse = self.config.graph_capture_record_stream_reuse
            self.deferred_blocks[block] = self.record_free_markers(block) if reuse else []
        elif block.stream_uses:
            self.insert_events(block)      # stays active ("active_pending_free") until they complete
            if block.event_count == 0:     # (every using stream was destroyed and has drained)
                self.free_block(block, context)
        else:
            self.free_block(block, context)

    def record_stream(self, block: Block, stream: Any) -> None:
        """``recordStream``: remember another stream used this memory (ignored on the owner)."""
        if stream.handle == block.stream_key:
            return
        block.stream_uses.add(stream)
        if self.captures_underway:                 # remember which uses the capture added
            self.block_to_cudagraph_stream_uses.setdefault(block, set()).add(stream)

    # ---- memory fraction ("set memory fraction to limit maximum allocated memory")
    def set_memory_fraction(self, fraction: float) -> None:
        """``setMemoryFraction``: the limit cudaMalloc may not pass (NativeCachingAllocator checks the argument)."""
        total = self.device.info.total_memory
        # 2.11: the limit only exists for fractions below 1.
        self.allowed_memory_maximum = int(fraction * total) if fraction < 1.0 else None

    def get_memory_fraction(self) -> float:
        """``getMemoryFraction``: allowed / total as PyTorch computes it (not the number set)."""
        if self.allowed_memory_maximum is None:
            return 1.0
        return self.allowed_memory_maximum / self.device.info.total_memory

    # ---- caching ("returns cached blocks to the system allocator")
    def empty_cache(self, mempool_id: tuple = DEFAULT_POOL_ID) -> None:
        """``emptyCache``: release every cached segment that is whole and free.

        Like 2.11 it gathers the caller's stack first (``maybeGatherContext(RecordContext::ALL)``),
        so with context="all" the segment_free / segment_unmap entries carry it.  Private pools
        give memory back only once freeable (``use_count`` 0); ``mempool_id`` limits the call to
        that one pool, as ``MemPool``'s destructor does.
        """
        context = self.maybe_gather_context(("all",)) if self.trace.enabled is not None else None
        self.release_cached_blocks(context, tuple(mempool_id))

    # ---- stats ("Returns a copy of the memory allocator stats", "Resets the historical ... stats")
    def get_stats(self) -> DeviceStats:
        """``getStats``: the DeviceStats themselves (PyTorch returns a copy under the lock)."""
        return self.stats

    def reset_accumulated_stats(self) -> None:
        """``resetAccumulatedStats``: allocated/freed counters and the event counts to 0."""
        self.stats.reset_accumulated()

    def reset_peak_stats(self) -> None:
        """``resetPeakStats``: every peak back to its current value."""
        self.stats.reset_peak()

    # ---- checkpoints (Note [Checkpointing PrivatePoolState])
    def get_checkpoint_state(self, pool_id: tuple) -> PrivatePoolState:
        """``getCheckpointState``: the pool's segments and blocks, after the deferred frees got events."""
        context = self.maybe_gather_context(("all",)) if self.trace.enabled is not None else None
        self.insert_events_deferred_until_no_capture(context)
        pool = self.graph_pools.get(check_pool_id(pool_id))
        if pool is None:
            raise RuntimeError(f"Could not find pool of id {pool_id}")
        # (PyTorch tests graph_pools first, so a freeable pool still listed there is checkpointed too)
        heads = self.get_private_pool_head_blocks(pool.id)
        return PrivatePoolState(pool.id, tuple(SegmentState.of(head) for head in heads))

    def free_blocks_allocated_to_pool(self, private: PrivatePool, rr: RestoreResult) -> None:
        """``freeBlocksAllocatedToPool``: free every allocated block of the pool, segment by segment."""
        for head in self.get_private_pool_head_blocks(private.id):
            block = head
            while block is not None:
                # A free merges free neighbours *into* block (its ptr never changes), so block.next
                # is read after the free, as PyTorch does.
                if block.allocated:
                    if block.event_count != 0:
                        raise RuntimeError("Events should have synchronized when setting checkpointed block")
                    rr.allocations_freed.append(block.ptr)
                    self.free(block)
                block = block.next

    def set_segment_state_to_checkpoint(self, block: Block, segment: SegmentState,
                                        context: Optional[list], rr: RestoreResult) -> None:
        """``setSegmentStateToCheckpoint``: allocate every block of the segment as it was, then free
        those the checkpoint had free (their requested size becomes their size, as in PyTorch)."""
        pool, n = block.pool, len(segment.blocks)
        curr, made = block, []
        for i, bs in enumerate(segment.blocks):
            if i == n - 1 and curr.expandable_segment is not None:
                assert curr.next is None and not curr.mapped and not curr.allocated   # the unmapped rest
                continue
            params = AllocParams(bs.size, bs.size, pool, bs.stream)
            params.expandable = curr.expandable_segment is not None
            pool.remove(curr)
            params.block = curr
            curr = self.alloc_found_block(params, bs.size, curr.size > bs.size, context)
            if curr.ptr != bs.ptr or curr.size != bs.size:
                raise RuntimeError("the pool's segment no longer matches the checkpoint")
            made.append((bs, curr))
            curr = curr.next
        for bs, made_block in made:
            if bs.allocated:
                rr.allocations_created.append(made_block)
            else:
                self.free(made_block)

    def set_checkpoint_pool_state(self, state: PrivatePoolState) -> RestoreResult:
        """``setCheckpointPoolState``: free every block allocated in the pool, then allocate each
        checkpointed segment block by block (splitting as it was) and free the blocks that were free.
        The caller (``NativeCachingAllocator::setCheckpointPoolState``) updates its pointer map."""
        if not isinstance(state, PrivatePoolState):
            raise TypeError(f"Expected PrivatePoolState (from get_checkpoint_state), got {type(state).__name__}")
        context = self.maybe_gather_context(("state", "alloc", "all")) if self.trace.enabled is not None else None
        if state.owner_id in self.graph_pools_freeable:
            raise RuntimeError("Not expected to checkpoint freeable graph")
        private = self.graph_pools.get(state.owner_id)
        if private is None:
            raise RuntimeError(f"Could not find private pool id {state.owner_id}")
        rr = RestoreResult()
        self.free_blocks_allocated_to_pool(private, rr)
        ptrs_to_blocks = {b.ptr: b for pool in (private.small_blocks, private.large_blocks) for b in pool}
        for segment in state.segments:
            ptr = segment.blocks[0].ptr
            if ptr not in ptrs_to_blocks:
                raise RuntimeError(f" could not find {ptr:#x}")
            self.set_segment_state_to_checkpoint(ptrs_to_blocks[ptr], segment, context, rr)
        return rr

    # ---- snapshot ("Dump a complete snapshot of the memory held by the allocator")
    def snapshot(self, record: bool = True, mempool_id: tuple = (0, 0)) -> list[dict]:
        """``snapshot``: the segments, one entry per segment (per contiguous mapped range if expandable).

        Like PyTorch, taking a snapshot is itself a trace event (``snapshot``); pictures that
        look at the allocator after every event pass ``record=False`` to leave history alone.
        """
        result = []
        total_active = 0
        for head in self.get_all_blocks(tuple(mempool_id)):
            if head.prev is not None and head.prev.mapped:
                continue
            segment = {
                "device": self.device.info.index, "address": head.ptr, "total_size": 0,
                "allocated_size": 0, "active_size": 0, "requested_size": 0,
                "stream": head.stream_key,
                "segment_type": "small" if head.pool.is_small else "large",
                "segment_pool_id": head.pool.owner_id,
                "is_expandable": head.expandable_segment is not None,
                "frames": list(head.segment_frames), "blocks": [],
            }
            block = head
            while block is not None and block.mapped:
                state = block_state(block)
                segment["blocks"].append({"address": block.ptr, "size": block.size,
                                          "requested_size": block.requested_size,
                                          "state": state, "frames": list(block.frames)})
                segment["total_size"] += block.size
                if block.allocated:
                    segment["allocated_size"] += block.size
                if state != "inactive":
                    segment["active_size"] += block.size
                    segment["requested_size"] += block.requested_size
                block = block.next
            total_active += segment["active_size"]
            result.append(segment)
        result.sort(key=lambda s: s["address"])
        if record:
            self.record_trace("snapshot", 0, total_active, 0)
        return result

    # ---- rounding
    def round_size(self, size: int) -> int:
        """``round_size``: 512 B multiples, or power-of-two divisions (config.py; labs override it)."""
        return round_size(size, self.config)

    # ---- private pools ("See Note [Interaction with CUDA graph capture]": MemPool and CUDA graph pools)
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
        """``beginAllocateToPool``: route requests that ``filter(stream)`` accepts to the pool.

        As in 2.11 the pool is created or incref'ed *before* the duplicate check, so a refused
        second routing still counts one owner more (its ``use_count`` never comes back down)."""
        self.create_or_incref_pool(pool_id)
        if any(entry_id == pool_id for entry_id, _ in self.captures_underway):
            err = RuntimeError(f"beginAllocateToPool: already recording to mempool_id {pool_id}")
            err.add_note("PyTorch 2.11 increments the pool's use_count before this check: the pool now "
                         "counts one owner that nobody will release (allocator.release_pool(id) undoes it)")
            raise err
        self.captures_underway.append((pool_id, filter))

    def end_allocate_to_pool(self, pool_id: tuple) -> None:
        """``endAllocateToPool``: stop routing to the pool (its use_count is unchanged)."""
        if self.config.graph_capture_record_stream_reuse:
            # The capture is over: its deferred blocks can be freed now (pre-capture uses still get events).
            capture_id = self.mempool_to_capture_id.pop(pool_id, None)
            self.graph_reuse_context.pop(capture_id, None)
            pool = self.graph_pools.get(pool_id)
            for block in [b for b in self.deferred_blocks if pool is not None and b.pool.owner_PrivatePool is pool]:
                del self.deferred_blocks[block]
                self.remove_cudagraph_stream_uses(block)
                if block.stream_uses:
                    self.insert_events(block)
                    if block.event_count == 0:
                        self.free_block(block)
                else:
                    self.free_block(block)
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

    # =============================================================== private
    # ("All private methods do not acquire the allocator mutex.")
    # ---- blocks of every pool
    def get_all_blocks(self, mempool_id: tuple = (0, 0)):
        """``get_all_blocks``: free blocks of every pool and every active block (all mapped);
        for a private pool's id, only that pool's segment heads (``get_private_pool_head_blocks``)."""
        if mempool_id != (0, 0):
            yield from self.get_private_pool_head_blocks(mempool_id)
            return
        yield from self.small_blocks
        yield from self.large_blocks
        for private in self.graph_pools.values():
            yield from private.small_blocks
            yield from private.large_blocks
        yield from self.active_blocks.values()

    def get_private_pool_head_blocks(self, pool_id: tuple):
        """``get_private_pool_head_blocks``: the first block of each of the pool's segments."""
        pool = self.graph_pools.get(pool_id)
        if pool is None:
            return []
        own = (pool.small_blocks, pool.large_blocks)
        heads = [b for b in self.active_blocks.values() if b.pool in own and b.prev is None]
        heads += [b for b in pool.small_blocks if b.prev is None]
        heads += [b for b in pool.large_blocks if b.prev is None]
        return heads

    # ---- expandable segments (Note [Expandable Segments])
    def find_expandable_block(self, stream: Any, pool: BlockPool, size: int) -> Block:
        """``find_expandable_block``: lowest address with ``size`` free-or-unmapped bytes, else a new segment."""
        def has_room(block: Optional[Block]) -> bool:
            room = 0
            while room < size and allocatable(block):
                room += block.size
                block = block.next
            return room >= size

        start = pool.unmapped.bisect_left((stream.handle, 0))
        for entry in pool.unmapped[start:]:
            if entry[0] != stream.handle:
                break
            candidate = entry[2]
            if allocatable(candidate.prev):
                candidate = candidate.prev      # a free block just before the unmapped range can join it
            if has_room(candidate):
                return candidate
        page = self.config.expandable_page_size(pool.is_small)
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
        self.stats.increase("reserved_bytes", pool.stat_types, mapped)
        self.stats.num_device_alloc += 1
        if to_map.prev is None and not to_map.segment_frames:
            to_map.segment_frames = context or []
        self.record_trace("segment_map", mapped_ptr, mapped, to_map.stream_key, context, pool)
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

    # ---- back into the pool
    def free_block(self, block: Block, context: Optional[list] = None) -> None:
        """``free_block``: back into the pool, merged with free neighbours."""
        if self.trace.active:
            self.record_trace("free_completed", block.ptr, block.requested_size, block.stream_key,
                         context or block.frames, block.pool)
        block.frames = []
        original_size, requested = block.size, block.requested_size
        pool = block.pool
        net_blocks = net_bytes = 0
        # PyTorch erases the block from active_blocks after the merges; its active_blocks is a set of
        # Block*, this one a dict keyed by ptr, and a merge with the previous block moves block.ptr.
        # So the entry goes first, under the ptr it was allocated at: same set afterwards.
        del self.active_blocks[block.ptr]
        for candidate in (block.prev, block.next):
            subsumed = self.try_merge_blocks(block, candidate, pool)
            if subsumed > 0:
                net_blocks -= 1
                net_bytes -= subsumed
        pool.insert_into_blocks(block)
        if block.is_split():
            net_blocks += 1
            net_bytes += block.size
        if block.expandable_segment is not None:
            net_blocks = net_bytes = 0       # expandable blocks stay out of inactive_split (as in 2.11)
        self.stats.on_free_block(pool.stat_types, original_size, requested, net_blocks, net_bytes)

    def try_merge_blocks(self, dst: Block, src: Optional[Block], pool: BlockPool) -> int:
        """``try_merge_blocks``: absorb a free neighbour; returns the bytes absorbed (0 if none)."""
        if (src is None or src.allocated or src.event_count > 0 or src.stream_uses
                or dst.mapped != src.mapped):
            return 0
        # PyTorch asserts both are pieces of one split segment (AT_ASSERT(dst->is_split() &&
        # src->is_split()) in DeviceCachingAllocator::try_merge_blocks, c10/cuda/
        # CUDACachingAllocator.cpp, read at pytorch/pytorch 001074d; the check predates 2.11);
        # here also that they are neighbours, so a caller handing in a block of another segment
        # fails loudly instead of relinking both.
        assert dst.is_split() and src.is_split() and (dst.prev is src or dst.next is src), \
            f"try_merge_blocks: {src!r} is not a split neighbour of {dst!r}"
        if dst.prev is src:                       # [src dst]
            dst.ptr = src.ptr
            dst.prev = src.prev
            if dst.prev is not None:
                dst.prev.next = dst
            # 2.11 moves context_when_segment_allocated from src: dst is now the segment's head.
            dst.segment_frames = src.segment_frames
        else:                                     # [dst src]
            dst.next = src.next
            if dst.next is not None:
                dst.next.prev = dst
        dst.size += src.size
        # Then erase src from its set, as PyTorch does (src's key -- stream, size, ptr -- is untouched
        # by the relinking, and dst is never in a set while it merges, so the order changes nothing).
        if src.mapped:
            pool.remove(src)
        else:
            pool.remove_unmapped(src)
        return src.size

    # ---- the malloc ladder's rungs
    def get_pool(self, size: int, stream: Any = None) -> BlockPool:
        """``get_pool``: a private pool if a capture / MemPool context takes this request,
        else rounded sizes up to 1 MiB use the small pool."""
        # captures_underway is usually empty, so it is checked before walking it (as PyTorch does).
        # The newest entry whose filter accepts this stream wins (contexts nest).
        if self.captures_underway:
            for pool_id, accepts in reversed(self.captures_underway):
                if accepts(stream):
                    private = self.graph_pools[pool_id]
                    return private.small_blocks if size <= kSmallSize else private.large_blocks
        return self.small_blocks if size <= kSmallSize else self.large_blocks

    def should_split(self, block: Block, size: int, expandable_active: bool) -> bool:
        """``should_split``: keep the remainder only if it is worth tracking."""
        if self.no_split_pools and block.pool.owner_id in self.no_split_pools:    # MemPool(no_split=True)
            return False
        remaining = block.size - size
        if block.pool.is_small or expandable_active:
            return remaining >= kMinBlockSize
        return size < self.config.max_split_size and remaining > kSmallSize

    def get_allocation_size(self, size: int) -> int:
        """``get_allocation_size``: the segment size a rounded request asks cudaMalloc for."""
        return get_allocation_size(size, self.config)

    def get_free_block(self, p: AllocParams) -> bool:
        """``get_free_block``: best fit = lower bound of (stream, size, 0) in the pool.

        One function, in PyTorch's order: tick the GC clock, lower_bound, the expandable walk
        (``p.expandable`` is ``p.is_expandable_segments_active``, false in ``try_mempool_fallback``),
        the two oversize refusals, then take the block out at the position found."""
        pool = p.pool
        if self.allowed_memory_maximum is not None and self.config.garbage_collection_threshold > 0:
            pool.get_free_blocks_call_count += 1      # the GC clock ticks on every search
        stream_key = p.stream_key
        it = pool.lower_bound(stream_key, p.size)
        block = pool.at(it)
        if block is None or block.stream_key != stream_key:
            return False
        if block.expandable_segment is not None:
            if p.expandable:
                # Best fit counts a segment's growable tail as room it can expand into, so a block
                # that is not the tail may fit as well: walk on while the next one is smaller so.
                while block.expandable_segment is not None:
                    nxt_it = pool.next_position(it)
                    nxt = pool.at(nxt_it)
                    if nxt is None or nxt.stream_key != stream_key or \
                            not expandable_size(nxt) < expandable_size(block):
                        break
                    it, block = nxt_it, nxt
            else:
                # Expandable segments were switched off: only non-expandable blocks may be used.
                while True:
                    it = pool.next_position(it)
                    block = pool.at(it)
                    if block is None or block.stream_key != stream_key:
                        return False
                    if block.expandable_segment is None:
                        break
        max_split = self.config.max_split_size
        # Never hand an oversize block to a normal request ...
        if p.size < max_split and block.size >= max_split:
            return False
        # ... and an oversize request may take a cached block only a little bigger than it.
        if p.size >= max_split and block.size >= p.size + self.config.max_non_split_rounding_size:
            return False
        p.block = block
        pool.erase(it)                                  # pool.blocks.erase(it)
        return True

    def trigger_free_memory_callbacks(self) -> bool:
        """``trigger_free_memory_callbacks``: True if any registered callback freed memory."""
        freed = False
        for callback in self.free_memory_callbacks:
            freed = bool(callback()) or freed
        return freed

    def garbage_collect_cached_blocks(self, context: Optional[list] = None) -> None:
        """``garbage_collect_cached_blocks``: free old unsplit large blocks until under the threshold."""
        gc_threshold = int(self.config.garbage_collection_threshold * self.allowed_memory_maximum)
        if self.total_allocated_memory <= gc_threshold:
            return
        target = self.total_allocated_memory - gc_threshold
        # PyTorch's age sum counts every unsplit block and its freeing loop skips expandable ones; an
        # expandable block is unsplit only when its reservation (1.125x the GPU) is all mapped, which
        # a memory fraction below 1 rules out, so both lists are the same here.
        candidates = [b for b in self.large_blocks
                      if not b.is_split() and b.expandable_segment is None]
        total_age = float(sum(b.gc_count() for b in candidates))
        count = len(candidates)
        if count == 0:
            return
        reclaimed, freed_any = 0, True
        while reclaimed < target and freed_any and count > 0:
            threshold = total_age / count
            freed_any = False
            # Free every block older than the average; do not stop at the target.
            for block in list(self.large_blocks):
                if block.is_split() or block.expandable_segment is not None:
                    continue
                age = block.gc_count()
                if age >= threshold:
                    freed_any = True
                    reclaimed += block.size
                    total_age -= age
                    count -= 1
                    self.release_block(block, context)

    def alloc_block(self, p: AllocParams, is_retry: bool, context: Optional[list] = None) -> bool:
        """``alloc_block``: ask the device for a new segment (or map expandable pages)."""
        if is_retry:
            self.stats.num_alloc_retries += 1
        size = p.alloc_size
        if (self.allowed_memory_maximum is not None
                and self.total_allocated_memory + size > self.allowed_memory_maximum):
            p.err = "cudaErrorMemoryAllocation"          # over the fraction: no cudaMalloc at all
            return False
        if p.expandable:
            p.block = self.try_allocate_expandable_block(p.stream, p.pool, p.size, context)
            p.err = None if p.block is not None else "cudaErrorMemoryAllocation"
            if p.block is not None and p.pool.owner_PrivatePool is not None:
                p.pool.owner_PrivatePool.cudaMalloc_count += 1     # the block is for a private pool
            return p.block is not None
        ptr = cuda_malloc_maybe_capturing(self.device, size, p.pool, self.captures_underway)  # relaxed if capturing
        if ptr is None:
            p.err = "cudaErrorMemoryAllocation"
            return False
        if p.pool.owner_PrivatePool is not None:
            p.pool.owner_PrivatePool.cudaMalloc_count += 1         # the block is for a private pool
        self.total_allocated_memory += size
        p.block = Block(ptr, size, p.stream, p.stream_key, p.pool)
        stat_types = p.pool.stat_types
        self.stats.increase("segment", stat_types, 1)
        self.stats.increase("reserved_bytes", stat_types, size)
        if size >= self.config.max_split_size:
            # PyTorch re-reads max_split_size at release (release_block), so a threshold
            # changed mid-run drives the stat negative; remember what was counted instead.
            self._oversize_segments.add(ptr)
            self.stats.oversize_segments.increase(1)
        self.stats.num_device_alloc += 1
        p.block.segment_frames = context or []        # context_when_segment_allocated
        self.record_trace("segment_alloc", ptr, size, p.stream_key, context, p.pool)
        return True

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
            # mempool_params: this pool, and is_expandable_segments_active *false*, so the search
            # skips the pool's expandable blocks whatever the setting says.
            saved = p.pool, p.expandable
            p.pool, p.expandable = self.get_pool(p.size, p.stream), False
            found = self.get_free_block(p)
            self.end_allocate_to_pool(pool_id)
            self.release_pool(pool_id)
            if found:
                return True                # (params = mempool_params)
            p.pool, p.expandable = saved
        return False

    # ---- giving memory back to the device
    def release_available_cached_blocks(self, p: AllocParams, context: Optional[list] = None) -> bool:
        """``release_available_cached_blocks``: free just enough oversize blocks (max_split_size only).

        2.11: when the lower bound is on another stream, past the end, *or an expandable
        block*, it does not look further right; it walks left from there, releasing
        non-expandable oversize blocks of this stream, largest first, and returns false
        at the pool's first block.
        """
        max_split = self.config.max_split_size
        if max_split == SIZE_MAX:
            return False
        pool = p.pool
        key_size = max(p.size, max_split)
        index = pool.lower_bound_index(p.stream_key, key_size)
        block = pool.block_at(index)
        if block is None or block.stream_key != p.stream_key or block.expandable_segment is not None:
            # No single block is large enough; free multiple oversize blocks, starting with the largest.
            if index == 0:
                return False
            index -= 1                     # back up one: the largest block of this stream
            released = 0
            while released < key_size:
                block = pool.block_at(index)
                if block.size < max_split or block.stream_key != p.stream_key:
                    break
                is_first = index == 0
                if not is_first:
                    index -= 1             # (releasing the block leaves lower indices alone)
                if block.expandable_segment is None:
                    released += block.size
                    self.release_block(block, context)
                if is_first:
                    break
            if released < key_size:
                return False
        else:
            self.release_block(block, context)
        return True

    def release_cached_blocks(self, context: Optional[list] = None, mempool_id: tuple = DEFAULT_POOL_ID) -> bool:
        """``release_cached_blocks`` (= ``empty_cache``): wait for events, free every unsplit segment.

        The default pools only when no capture is underway; then the freeable private pools
        (MemPool, graph pools): ``mempool_id`` (0, 0) means every freeable pool, another id only that pool,
        after waiting for only its events (as ``MemPool``'s destructor asks).
        """
        if mempool_id == DEFAULT_POOL_ID and not self.captures_underway:
            self.synchronize_and_free_events(context)
            self.release_blocks(self.large_blocks, context)
            self.release_blocks(self.small_blocks, context)
        for pool_id, private in list(self.graph_pools_freeable.items()):
            if mempool_id != DEFAULT_POOL_ID:
                if pool_id != mempool_id:
                    continue
                self.synchronize_and_free_events(context, private)
            self.release_blocks(private.small_blocks, context)
            self.release_blocks(private.large_blocks, context)
            if private.cudaMalloc_count == 0:        # nothing left: forget the pool
                del self.graph_pools[pool_id]
                del self.graph_pools_freeable[pool_id]
        return True

    def release_expandable_segment(self, block: Block) -> None:
        """``release_expandable_segment``: the whole range is unmapped: free the reservation."""
        segment = block.expandable_segment
        assert block.size == segment.size() and not block.mapped, "block disagrees with segment"
        self.expandable_segments_.remove(segment)
        block.pool.remove_unmapped(block)
        segment.release()

    def release_block(self, block: Block, context: Optional[list] = None) -> None:
        """``release_block``: cudaFree one whole segment."""
        if block.is_split():
            raise split_segment_release_error(block, self.config.max_split_size)
        self.stats.num_device_free += 1
        self.record_trace("segment_free", block.ptr, block.size, block.stream_key,
                     context or block.segment_frames, block.pool)
        cuda_free(self.device, block.ptr, block.pool)         # or the pool's custom allocator
        self.total_allocated_memory -= block.size
        if block.pool.owner_PrivatePool is not None:
            block.pool.owner_PrivatePool.cudaMalloc_count -= 1     # it belonged to a private pool
        stat_types = block.pool.stat_types
        self.stats.decrease("segment", stat_types, 1)
        self.stats.decrease("reserved_bytes", stat_types, block.size)
        if block.ptr in self._oversize_segments:      # counted when it was allocated (see alloc_block)
            self._oversize_segments.discard(block.ptr)
            self.stats.oversize_segments.decrease(1)
        block.pool.remove(block)

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
        self.stats.decrease("reserved_bytes", pool.stat_types, unmapped)
        if pool.owner_PrivatePool is not None:
            pool.owner_PrivatePool.cudaMalloc_count -= 1           # it belonged to a private pool
        self.stats.num_device_free += 1
        self.record_trace("segment_unmap", start, unmapped, block.stream_key,
                     context or block.segment_frames, pool)   # context_when_segment_allocated

    def release_blocks(self, pool: BlockPool, context: Optional[list] = None) -> None:
        """``release_blocks``: whole unsplit segments go back to the driver; split ones stay."""
        to_unmap = []
        for block in list(pool):
            if block.expandable_segment is not None:
                to_unmap.append(block)
            elif not block.is_split():
                self.release_block(block, context)
        for block in to_unmap:
            self.unmap_block(block, context)
            if not block.is_split() and not block.mapped:
                self.release_expandable_segment(block)

    # ---- events (cross-stream frees) and the capture rules (Note [Interaction with CUDA graph capture])
    def synchronize_and_free_events(self, context: Optional[list] = None, private_pool: Any = None) -> None:
        """``synchronize_and_free_events``: wait for every outstanding event (counts a sync-all).

        With ``private_pool``, only the events of that pool's blocks (``MemPool``'s destructor).
        """
        self.stats.num_sync_all_streams += 1
        if self.captures_underway:
            # TORCH_INTERNAL_ASSERT(captures_underway.empty()): reached when a freeable pool is emptied
            # (MemPool's destructor, emptyCache(id)) while another pool or a capture is open -- the
            # crash pytorch/pytorch#180395 reports after a failed capture_end.
            err = RuntimeError("synchronize_and_free_events: a capture is underway (no syncs while capturing)")
            err.add_note("open pools / captures: "
                         f"{[pid for pid, _ in self.captures_underway]}; PyTorch 2.11 fails an internal assert here. "
                         "Close the other use_mem_pool blocks (or end the capture) before destroying this pool.")
            raise err
        if self.deferred_blocks:
            self.insert_events_deferred_until_no_capture(context)
        for key in list(self.cuda_events):
            kept = deque()
            for event, block in self.cuda_events[key]:
                if private_pool is not None and block.pool.owner_PrivatePool is not private_pool:
                    kept.append((event, block))
                    continue
                event.synchronize()
                block.event_count -= 1
                if block.event_count == 0:
                    self.free_block(block, context)
            if kept:
                self.cuda_events[key] = kept
            else:
                del self.cuda_events[key]

    def remove_cudagraph_stream_uses(self, block: Any) -> None:
        """``remove_cudagraph_stream_uses``: forget the uses recorded during capture (rule 5)."""
        during = self.block_to_cudagraph_stream_uses.pop(block, None)
        if during:
            block.stream_uses = {s for s in block.stream_uses if s not in during}

    def insert_events(self, block: Block) -> None:
        """``insert_events``: one event per using stream; the block is freed when all complete."""
        streams, block.stream_uses = block.stream_uses, set()
        if any(getattr(s, "destroyed", False) for s in streams):
            # A destroyed stream cannot take an event, but its queued work still runs:
            # wait for the device to drain so the memory is surely unused.
            self.device.synchronize()
            streams = {s for s in streams if not getattr(s, "destroyed", False)}
        for stream in sorted(streams, key=lambda s: s.handle):
            event = self.device.create_event(timing=False)
            event.record(stream)
            block.event_count += 1
            self.cuda_events.setdefault(stream.handle, deque()).append((event, block))

    def insert_events_deferred_until_no_capture(self, context: Optional[list] = None) -> None:
        """``insert_events_deferred_until_no_capture``: events for the frees a capture held back."""
        deferred, self.deferred_blocks = self.deferred_blocks, {}
        for block in deferred:
            self.remove_cudagraph_stream_uses(block)
            self.insert_events(block)
            if block.event_count == 0:
                self.free_block(block, context)

    def process_events(self, context: Optional[list] = None) -> None:
        """``process_events``: per stream, free blocks whose events completed (stop at the first not ready)."""
        if self.deferred_blocks:
            self.insert_events_deferred_until_no_capture(context)    # frees held back by a capture
        if not self.cuda_events:
            return
        for key in list(self.cuda_events):
            queue = self.cuda_events[key]
            while queue:
                event, block = queue[0]
                if not event.query():
                    break
                block.event_count -= 1
                if block.event_count == 0:
                    self.free_block(block, context)
                queue.popleft()
            if not queue:
                del self.cuda_events[key]

    def record_free_markers(self, block: Any) -> list:
        """``record_free_markers``: the terminals of every stream that used the block, or [] if
        one of them is not capturing (then the free waits for the capture to end)."""
        markers, graph = [], None
        for stream in [block.stream, *sorted(block.stream_uses, key=lambda s: s.handle)]:
            info = stream_get_capture_info(self.device, stream)
            if info is None or info.status != "active":
                return []
            if graph is None:
                graph = info.graph
            elif info.graph is not graph:
                raise RuntimeError("All streams in the same capture should agree on the graph")
            markers.extend(n for n in info.terminals if n not in markers)
        return markers

    def free_safe_blocks_in_capture(self, context: Optional[list], stream: Any) -> None:
        """``free_safe_blocks_in_capture``: free deferred blocks of this stream whose every free
        marker is an ancestor of the stream's current terminals (so all later work follows them)."""
        info = stream_get_capture_info(self.device, stream)
        if info is None or info.status != "active" or not info.terminals:
            return
        if info.capture_id not in self.graph_reuse_context:
            for pool_id, accepts in reversed(self.captures_underway):
                if accepts(stream):
                    self.graph_reuse_context[info.capture_id] = {}
                    self.mempool_to_capture_id[pool_id] = info.capture_id
                    break
            else:
                raise RuntimeError("Could not find memory pool id for capture.")
        visited = self.graph_reuse_context[info.capture_id].setdefault(stream.handle, set())
        update_visited(info.terminals, visited)
        for block, markers in list(self.deferred_blocks.items()):
            if not markers or block.stream is not stream:
                continue
            if all(m in visited for m in markers):
                block.stream_uses = set()      # the graph orders the uses; no events needed
                self.free_block(block, context)
                del self.deferred_blocks[block]

    # ---- history
    def record_trace(self, action: str, addr: int, size: int, stream_key: int,
                     frames: Optional[list] = None, pool: Optional[BlockPool] = None) -> None:
        """``record_trace``: one TraceEntry into the history ring buffer (and its listeners)."""
        if not self.trace.active:
            return                    # nobody is listening: do not even build the entry
        # Trace entries carry a stack only from context "alloc" up (record_trace's RecordContext::ALLOC).
        if not frames or self.trace.context not in ("alloc", "all"):
            frames = None
        entry = TraceEntry(action, addr, size, stream_key, int(self.device.now_us()), frames)
        if pool is not None and pool.owner_PrivatePool is not None:
            entry.pool_id = pool.owner_id          # record_trace's mempool_id
        self.trace.record(entry)
