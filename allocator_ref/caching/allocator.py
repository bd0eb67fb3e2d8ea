"""The caching allocator as a learner uses it: PyTorch 2.11's native CUDA allocator, three layers.

``CUDACachingAllocator.cpp`` keeps three layers apart, and so does this package:

* ``DeviceCachingAllocator`` (device_caching_allocator.py): one device's pools, blocks, stats and
  history; ``malloc(size, stream) -> Block``, ``free(block)``, and every decision between.
* ``NativeCachingAllocator`` (native.py): the map from each pointer handed out to its Block,
  the argument checks, and the uncached path (caching switched off).
* ``CachingAllocator`` (this file): the ``torch.cuda`` functions above them
  (``memory_stats``, ``memory_summary``, ``snapshot``, ``use_mem_pool``,
  ``_record_memory_history``, ...), as methods of the one object a notebook holds.

``a = CachingAllocator(device, "expandable_segments:True")`` builds all three;
``a.device_allocator`` is the DeviceCachingAllocator (its pools, stats and decisions: read it
with the .cpp open), ``a.native_allocator`` the NativeCachingAllocator.  layers.py maps every
method of the three classes to its PyTorch name.
"""
from __future__ import annotations

import copy
from typing import Any, Optional

from ..allocation import Allocation, require_device
from ..events import TraceRecorder
from ..provenance import mark_course_made
from .backend import backend_mismatch_error, force_uncached_from_env, get_allocator_backend
from .block import plural
from .checkpoint import CheckpointDelta, PrivatePoolState
from .config import AllocatorConfig
from .device_caching_allocator import AllocParams, DeviceCachingAllocator
from .expandable import is_expandable_segments_active
from .mempool import use_mem_pool
from .native import NativeCachingAllocator
from .oom import format_size
from .pools import DEFAULT_POOL_ID, current_thread_filter
from .stats import AGGREGATE
from .summary import memory_summary


class CachingAllocator:
    """PyTorch's native CUDA caching allocator for one device, with torch.cuda's functions as methods.

    ``config`` is a ``PYTORCH_CUDA_ALLOC_CONF`` string (or an AllocatorConfig);
    ``read_env=True`` reads the real environment variables instead, as PyTorch does.

    Sections: allocate and free (NativeCachingAllocator does the work); caching; stats;
    history and snapshot; memory pools and checkpoints; settings; this project's own helpers.
    """

    # The DeviceCachingAllocator this front door drives; a port with its own rules (torch_npu's,
    # caching/npu/) names its subclass here and keeps everything else.
    device_allocator_class = DeviceCachingAllocator

    def __init__(self, device: Any = None, config: "str | AllocatorConfig" = "", *,
                 read_env: bool = False) -> None:
        if device is None:
            from ..device import open_device
            device = open_device()
        self.device = require_device(device, "CachingAllocator")
        if read_env:
            config = AllocatorConfig.from_env(loaded_backend=get_allocator_backend())
        elif not isinstance(config, AllocatorConfig):
            config = AllocatorConfig.parse(config, loaded_backend="native")
        if config.backend != "native":
            raise backend_mismatch_error(config.backend, "native")
        self.device_allocator = self.device_allocator_class(self.device, config)
        self.native_allocator = NativeCachingAllocator(self.device, self.device_allocator, owner=self)
        if read_env:
            self.native_allocator.force_uncached = force_uncached_from_env()
        if config.per_process_memory_fraction < 1.0:
            self.set_per_process_memory_fraction(config.per_process_memory_fraction)

    # The two things every allocator of the course offers (allocation.Allocator) that live in the
    # DeviceCachingAllocator: read-only names for them, so replay and the policies read them alike.
    @property
    def config(self) -> AllocatorConfig:
        """The DeviceCachingAllocator's CUDAAllocatorConfig (``set_allocator_settings`` replaces it)."""
        return self.device_allocator.config

    @property
    def trace(self) -> TraceRecorder:
        """The DeviceCachingAllocator's history ring buffer (``record_memory_history`` switches it on)."""
        return self.device_allocator.trace

    # ------------------------------------------------------------ allocate and free
    def malloc(self, nbytes: int, stream: Any = None) -> Allocation:
        """``torch.cuda.caching_allocator_alloc``: an Allocation of at least ``nbytes`` on ``stream``."""
        return self.native_allocator.malloc(nbytes, stream)

    def free(self, allocation: "Allocation | int") -> None:
        """``torch.cuda.caching_allocator_delete``: the memory returns to the cache (maybe after events)."""
        self.native_allocator.free(allocation)

    def record_stream(self, allocation: "Allocation | int", stream: Any) -> None:
        """``Tensor.record_stream``: another stream uses this memory; reuse waits for its work."""
        self.native_allocator.record_stream(allocation, stream)

    def raw_alloc(self, nbytes: int, stream: Any = None) -> int:
        """``torch.cuda.caching_allocator_alloc`` as a bare pointer (``raw_alloc``)."""
        return self.native_allocator.raw_alloc(nbytes, stream)

    def raw_delete(self, ptr: int) -> None:
        """``torch.cuda.caching_allocator_delete`` of a bare pointer (``raw_delete``)."""
        self.native_allocator.raw_delete(ptr)

    def live_allocations(self) -> list[Allocation]:
        """Everything handed out and not yet freed, in address order."""
        live = self.native_allocator.allocated_blocks
        return [live[p] for p in sorted(live)]

    # ------------------------------------------------------------------ caching
    def empty_cache(self, mempool_id: tuple = DEFAULT_POOL_ID) -> None:
        """``torch.cuda.empty_cache()``: give every whole free segment back (``emptyCache``).

        ``mempool_id`` limits it to one private pool, as ``MemPool``'s destructor does."""
        self.device_allocator.empty_cache(tuple(mempool_id))

    def caching_allocator_enable(self, value: bool = True) -> None:
        """``torch.cuda.memory.caching_allocator_enable``: switch the cache on or off."""
        self.native_allocator.enable(value)

    def is_caching_enabled(self) -> bool:
        """False when requests bypass the cache (``forceUncachedAllocator() || !isEnabled()``)."""
        return self.native_allocator.is_enabled()

    # -------------------------------------------------------------------- stats
    def memory_stats(self) -> dict:
        """``torch.cuda.memory_stats()``: 122 keys, sorted (``getStats``, flattened as memory.py does)."""
        return self.device_allocator.get_stats().as_flat_dict()

    def memory_allocated(self) -> int:
        """``torch.cuda.memory_allocated()``."""
        return self.device_allocator.stats.allocated_bytes[AGGREGATE].current

    def max_memory_allocated(self) -> int:
        """``torch.cuda.max_memory_allocated()``."""
        return self.device_allocator.stats.allocated_bytes[AGGREGATE].peak

    def memory_reserved(self) -> int:
        """``torch.cuda.memory_reserved()``."""
        return self.device_allocator.stats.reserved_bytes[AGGREGATE].current

    def max_memory_reserved(self) -> int:
        """``torch.cuda.max_memory_reserved()``."""
        return self.device_allocator.stats.reserved_bytes[AGGREGATE].peak

    def reset_peak_memory_stats(self) -> None:
        """``torch.cuda.reset_peak_memory_stats`` (``resetPeakStats``)."""
        self.device_allocator.reset_peak_stats()

    def reset_accumulated_memory_stats(self) -> None:
        """``torch.cuda.reset_accumulated_memory_stats`` (``resetAccumulatedStats``)."""
        self.device_allocator.reset_accumulated_stats()

    def memory_summary(self, abbreviated: bool = False) -> str:
        """``torch.cuda.memory_summary()``: the same 75-column table."""
        return memory_summary(self.memory_stats(), self.device.info.index, abbreviated)

    def set_per_process_memory_fraction(self, fraction: float) -> None:
        """``torch.cuda.set_per_process_memory_fraction`` (checked by ``setMemoryFraction``)."""
        self.native_allocator.set_memory_fraction(fraction)

    def get_per_process_memory_fraction(self) -> float:
        """``torch.cuda.get_per_process_memory_fraction`` (``getMemoryFraction``)."""
        return self.device_allocator.get_memory_fraction()

    # ------------------------------------------------------ history and snapshot
    def record_memory_history(self, enabled: Optional[str] = "all", context: Optional[str] = "all",
                              stacks: str = "python", max_entries: int = 2**63 - 1,
                              clear_history: bool = False, skip_actions=None) -> None:
        """``torch.cuda.memory._record_memory_history`` (``recordHistory``: the trace ring buffer)."""
        if stacks not in ("python", "all"):
            raise ValueError(f"stacks must be 'python' or 'all', got {stacks!r}")
        self.device_allocator.record_history(enabled, context, max_entries, clear_history, skip_actions)

    def set_memory_metadata(self, metadata: str) -> None:
        """``torch.cuda.memory._set_memory_metadata`` (``setUserMetadata``): stamped on later entries."""
        if not isinstance(metadata, str):
            raise TypeError(f"memory metadata must be a str, got {type(metadata).__name__}")
        self.trace.user_metadata = metadata

    def get_memory_metadata(self) -> str:
        """``torch.cuda.memory._get_memory_metadata`` (``getUserMetadata``)."""
        return self.trace.user_metadata

    def attach_out_of_memory_observer(self, observer) -> None:
        """``torch._C._cuda_attach_out_of_memory_observer``: called as (device, alloc_size, allowed, free)."""
        if not callable(observer):
            raise TypeError(f"an out-of-memory observer must be callable, got {type(observer).__name__}")
        self.device_allocator.attach_out_of_memory_observer(observer)

    def attach_allocator_trace_tracker(self, tracker) -> None:
        """``c10::cuda::CUDACachingAllocator::attachAllocatorTraceTracker`` (C++ only in PyTorch):
        ``tracker(entry)`` is called with every trace entry (segment_alloc, segment_map, alloc, ...),
        even with history off. ProcessGroupNCCL registers segments with NCCL from such a tracker."""
        if not callable(tracker):
            raise TypeError(f"an allocator trace tracker must be callable as tracker(entry), "
                            f"got {type(tracker).__name__}")
        self.device_allocator.attach_allocator_trace_tracker(tracker)

    def segments(self, record: bool = True, mempool_id: tuple = (0, 0)) -> list[dict]:
        """``torch.cuda.memory._snapshot()["segments"]``: one entry per segment (``snapshot``).

        Like PyTorch, taking a snapshot is itself a trace event; pictures that look at the
        allocator after every event pass ``record=False`` to leave history alone."""
        return self.device_allocator.snapshot(record, tuple(mempool_id))

    def snapshot(self) -> dict:
        """``torch.cuda.memory._snapshot()``: segments, device_traces, allocator_settings, external_annotations."""
        # NativeCachingAllocator::snapshot copies the trace (da->trace) before
        # DeviceCachingAllocator::snapshot records its SNAPSHOT entry: that entry shows
        # only in the next snapshot.
        traces = [self.trace.dicts()]
        segments = self.segments()
        # PyTorch's four keys, and the course's mark: a course-made run, not PyTorch's (provenance.py)
        return mark_course_made({
            "segments": segments,
            "device_traces": traces,
            "allocator_settings": self.config.settings_dict(),
            "external_annotations": [],
        })

    # ---------------------------------------------- memory pools and checkpoints
    def use_mem_pool(self, pool: Any):
        """``torch.cuda.use_mem_pool(pool)`` as a method: ``with a.use_mem_pool(pool): ...`` (mempool.py)."""
        if getattr(pool, "allocator", None) is not self:
            raise ValueError("this MemPool belongs to another allocator; use it with that one")
        return use_mem_pool(pool)

    def begin_allocate_current_thread_to_pool(self, pool_id: tuple) -> None:
        """``torch._C._cuda_beginAllocateCurrentThreadToPool(device, pool_id)``: route this thread's
        requests to the pool (what ``use_mem_pool`` does on entry)."""
        self.device_allocator.begin_allocate_to_pool(tuple(pool_id), current_thread_filter())

    def end_allocate_to_pool(self, pool_id: tuple) -> None:
        """``torch._C._cuda_endAllocateToPool(device, pool_id)``: stop routing to the pool (what
        ``use_mem_pool`` does on exit, and what undoes a capture that broke before it ended)."""
        self.device_allocator.end_allocate_to_pool(tuple(pool_id))

    def release_pool(self, pool_id: tuple) -> None:
        """``torch._C._cuda_releasePool(device, pool_id)``: one owner fewer; at 0 the pool's free
        segments go back to the device at the next ``empty_cache()``."""
        self.device_allocator.release_pool(tuple(pool_id))

    def get_checkpoint_state(self, pool_id: tuple) -> PrivatePoolState:
        """``torch._C._cuda_getCheckpointState`` (``getCheckpointState``): a private pool's state."""
        return self.device_allocator.get_checkpoint_state(pool_id)

    def set_checkpoint_pool_state(self, state: PrivatePoolState) -> CheckpointDelta:
        """``torch._C._cuda_setCheckpointPoolState`` (``setCheckpointPoolState``): put a pool back."""
        return self.native_allocator.set_checkpoint_pool_state(state)

    # ------------------------------------------------------------------ settings
    def set_allocator_settings(self, text: str) -> None:
        """``torch._C._accelerator_setAllocatorSettings`` (``setAllocatorSettings``).

        Applied in place, as PyTorch does: when a key is rejected, the keys before it stay
        applied and the snapshot's ``PYTORCH_CUDA_ALLOC_CONF`` shows the rejected string.
        A copy is changed, not the object passed in: two allocators may share one config.
        """
        config = copy.deepcopy(self.device_allocator.config)
        try:
            config.apply(text, loaded_backend="native")
        except ValueError as err:                    # (every config error is one; tokenizer.py)
            err.add_note("The keys before the rejected one stay applied, as in PyTorch's "
                         "setAllocatorSettings (it parses in place).")
            raise
        finally:
            self.device_allocator.config = config

    # ------------------------------------------------------------ our own helpers
    def can_serve_from_cache(self, nbytes: int, stream: Any = None) -> bool:
        """Would ``malloc(nbytes, stream)`` find a cached block right now?  Changes nothing.

        Not a PyTorch function (replay asks it): it runs the device allocator's ``get_free_block``
        and puts back what that changed -- the block, its GC age and the pool's GC clock."""
        da = self.device_allocator
        stream = self.native_allocator.check_stream(stream)
        size = da.round_size(nbytes)
        pool = da.get_pool(size, stream)
        p = AllocParams(size, 0, pool, stream)
        p.expandable = da.config.expandable_segments and is_expandable_segments_active(da.config, pool)
        clock = pool.get_free_blocks_call_count
        found = da.get_free_block(p)
        if found:
            age = p.block.gc_count_base
            pool.insert_into_blocks(p.block)
            p.block.gc_count_base = age
        pool.get_free_blocks_call_count = clock
        return found

    def close(self) -> None:
        """Free every live allocation and empty the cache: the device gets every byte back,
        reservations left wholly unmapped included (PyTorch leaves those to process exit)."""
        for allocation in self.live_allocations():
            self.free(allocation)
        self.empty_cache()
        da = self.device_allocator
        pools = [da.large_blocks, da.small_blocks]
        for private in da.graph_pools.values():     # MemPools and graph pools
            pools += [private.large_blocks, private.small_blocks]
        for pool in pools:
            for _key, _ptr, block in list(pool.unmapped):
                if not block.is_split():
                    da.release_expandable_segment(block)

    def __repr__(self) -> str:
        """One line for a notebook: the device, then what the cache holds."""
        segments = self.segments(record=False)
        free_blocks = sum(1 for s in segments for b in s["blocks"] if b["state"] == "inactive")
        return (f"CachingAllocator({self.device.info.name}: {plural(len(segments), 'segment')}, "
                f"{format_size(self.memory_reserved())} reserved, "
                f"{format_size(self.memory_allocated())} allocated, {plural(free_blocks, 'free block')})")
