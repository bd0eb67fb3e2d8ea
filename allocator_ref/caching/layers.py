"""Which PyTorch layer each method of the three allocator classes mirrors, and under which name.

``CUDACachingAllocator.cpp`` keeps three layers apart, and so does this package:

* ``DEVICE``: ``DeviceCachingAllocator`` (device_caching_allocator.py), one device's pools, blocks
  and stats.  Every method is a member of PyTorch's ``class DeviceCachingAllocator``, under its
  name in snake_case; the value is PyTorch's name.
* ``NATIVE``: ``NativeCachingAllocator`` (native.py): the pointer -> Block map, the argument
  checks, the uncached path.  The value is the PyTorch ``NativeCachingAllocator`` member or
  free function of the .cpp it mirrors.
* ``TORCH_CUDA``: ``CachingAllocator`` (allocator.py), the Python API above them
  (``torch/cuda/memory.py``, ``torch._C``), which the .cpp does not have.  The value is the
  torch.cuda function.
* ``OWN``: this project's own helpers, each with why it exists (no PyTorch twin): methods of
  ``CachingAllocator`` and plain functions of the caching package.  None is a method of
  DeviceCachingAllocator.

``PYTORCH_DEVICE_MEMBERS`` lists the member functions of PyTorch's ``DeviceCachingAllocator``
(62, the constructor not counted), in the .cpp's order, and ``PYTORCH_2_11_DEVICE_MEMBERS`` the
ones 2.11 added that this package mirrors.  tests/test_caching_layers.py checks the maps
against the classes.
"""
from __future__ import annotations

# Read from c10/cuda/CUDACachingAllocator.cpp, class DeviceCachingAllocator, as stored at commit
# 001074d25084fdb87a799823e395a50f5ec044d3 of pytorch/pytorch (public section, then the private
# one after "All private methods do not acquire the allocator mutex").  That copy predates 2.11;
# the members 2.11 added are listed apart below.
PYTORCH_DEVICE_MEMBERS = (
    # public
    "recordHistory", "recordAnnotation", "isHistoryEnabled", "checkPoolLiveAllocations",
    "attachOutOfMemoryObserver", "attachAllocatorTraceTracker", "maybeGatherContext",
    "malloc", "alloc_found_block", "free", "getBaseAllocation", "shareIpcHandle", "recordStream",
    "setMemoryFraction", "emptyCache", "cacheInfo", "getStats", "resetAccumulatedStats",
    "resetPeakStats", "getCheckpointState", "freeBlocksAllocatedToPool",
    "setSegmentStateToCheckpoint", "setCheckpointPoolState", "snapshot", "trace",
    "roundup_power2_next_division", "round_size", "beginAllocateToPool", "endAllocateToPool",
    "releasePool", "addPeerAccess", "peers", "hasAllocatedExpandableSegments",
    # private
    "get_all_blocks", "get_private_pool_head_blocks", "find_expandable_block", "map_block",
    "try_allocate_expandable_block", "free_block", "try_merge_blocks", "get_pool",
    "get_stat_types_for_pool", "should_split", "get_allocation_size", "get_free_block",
    "trigger_free_memory_callbacks", "garbage_collect_cached_blocks", "alloc_block",
    "release_available_cached_blocks", "release_cached_blocks", "release_expandable_segment",
    "release_block", "unmap_block", "release_blocks", "create_event_internal",
    "synchronize_and_free_events", "remove_cudagraph_stream_uses", "insert_events",
    "insert_events_deferred_until_no_capture", "process_events", "cache_info_aux", "record_trace",
)

# Members of 2.11's DeviceCachingAllocator that the copy above lacks and this package mirrors.
# Each is in a newer CUDACachingAllocator.cpp (the one with setNoSplit, record_free_markers and
# free_safe_blocks_in_capture); search the .cpp of the v2.11.0 tag by name to read them.
PYTORCH_2_11_DEVICE_MEMBERS = (
    "getMemoryFraction", "create_or_incref_pool", "get_private_pool", "getPoolUseCount",
    "setUseOnOOM", "setNoSplit", "try_mempool_fallback", "record_free_markers",
    "free_safe_blocks_in_capture",
)

DEVICE = {
    # the constructor
    "__init__": "DeviceCachingAllocator",
    # public section of class DeviceCachingAllocator, in the .cpp's order
    "record_history": "recordHistory",
    "attach_out_of_memory_observer": "attachOutOfMemoryObserver",
    "attach_allocator_trace_tracker": "attachAllocatorTraceTracker",
    "maybe_gather_context": "maybeGatherContext",
    "malloc": "malloc",
    "alloc_found_block": "alloc_found_block",
    "free": "free",
    "record_stream": "recordStream",
    "set_memory_fraction": "setMemoryFraction",
    "get_memory_fraction": "getMemoryFraction",
    "empty_cache": "emptyCache",
    "get_stats": "getStats",
    "reset_accumulated_stats": "resetAccumulatedStats",
    "reset_peak_stats": "resetPeakStats",
    "get_checkpoint_state": "getCheckpointState",
    "free_blocks_allocated_to_pool": "freeBlocksAllocatedToPool",
    "set_segment_state_to_checkpoint": "setSegmentStateToCheckpoint",
    "set_checkpoint_pool_state": "setCheckpointPoolState",
    "snapshot": "snapshot",
    "round_size": "round_size",
    "create_or_incref_pool": "create_or_incref_pool",
    "get_private_pool": "get_private_pool",
    "begin_allocate_to_pool": "beginAllocateToPool",
    "end_allocate_to_pool": "endAllocateToPool",
    "release_pool": "releasePool",
    "get_pool_use_count": "getPoolUseCount",
    "set_use_on_oom": "setUseOnOOM",
    "set_no_split": "setNoSplit",
    # private section
    "get_all_blocks": "get_all_blocks",
    "get_private_pool_head_blocks": "get_private_pool_head_blocks",
    "find_expandable_block": "find_expandable_block",
    "map_block": "map_block",
    "try_allocate_expandable_block": "try_allocate_expandable_block",
    "free_block": "free_block",
    "try_merge_blocks": "try_merge_blocks",
    "get_pool": "get_pool",
    "should_split": "should_split",
    "get_allocation_size": "get_allocation_size",
    "get_free_block": "get_free_block",
    "trigger_free_memory_callbacks": "trigger_free_memory_callbacks",
    "garbage_collect_cached_blocks": "garbage_collect_cached_blocks",
    "alloc_block": "alloc_block",
    "try_mempool_fallback": "try_mempool_fallback",
    "release_available_cached_blocks": "release_available_cached_blocks",
    "release_cached_blocks": "release_cached_blocks",
    "release_expandable_segment": "release_expandable_segment",
    "release_block": "release_block",
    "unmap_block": "unmap_block",
    "release_blocks": "release_blocks",
    "synchronize_and_free_events": "synchronize_and_free_events",
    "remove_cudagraph_stream_uses": "remove_cudagraph_stream_uses",
    "insert_events": "insert_events",
    "insert_events_deferred_until_no_capture": "insert_events_deferred_until_no_capture",
    "process_events": "process_events",
    "record_free_markers": "record_free_markers",
    "free_safe_blocks_in_capture": "free_safe_blocks_in_capture",
    "record_trace": "record_trace",
}

NATIVE = {
    "__init__": "NativeCachingAllocator::init (one DeviceCachingAllocator; here one device)",
    "malloc": "NativeCachingAllocator::allocate + malloc (the checks, then device_allocator->malloc)",
    "add_allocated_block": "NativeCachingAllocator::add_allocated_block",
    "free": "NativeCachingAllocator::free",
    "record_stream": "NativeCachingAllocator::recordStream",
    "raw_alloc": "NativeCachingAllocator::raw_alloc / raw_alloc_with_stream",
    "raw_delete": "NativeCachingAllocator::raw_delete",
    "get_allocated_block": "NativeCachingAllocator::get_allocated_block",
    "check_stream": "the stream and device checks of allocate / recordStream (getCurrentCUDAStream)",
    "set_memory_fraction": "NativeCachingAllocator::setMemoryFraction (its argument checks)",
    "set_checkpoint_pool_state": "NativeCachingAllocator::setCheckpointPoolState",
    "enable": "NativeCachingAllocator::enable",
    "is_enabled": "NativeCachingAllocator::isEnabled (with forceUncachedAllocator)",
    "uncached_allocate": "NativeCachingAllocator::allocate's forceUncachedAllocator branch (cudaMalloc)",
    "uncached_delete": "uncached_delete (a free function of the .cpp; here it also forgets the pointer)",
}

# Free functions of the .cpp that are module functions here (device_caching_allocator.py).
FREE_FUNCTIONS = {
    "cuda_malloc_maybe_capturing": "cudaMallocMaybeCapturing",
    "cuda_free": "C10_CUDA_CHECK(cudaFree) in release_block (or the pool's custom allocator)",
}

TORCH_CUDA = {
    "malloc": "torch.cuda.caching_allocator_alloc",
    "free": "torch.cuda.caching_allocator_delete",
    "record_stream": "Tensor.record_stream",
    "raw_alloc": "torch.cuda.caching_allocator_alloc (a bare pointer)",
    "raw_delete": "torch.cuda.caching_allocator_delete (a bare pointer)",
    "empty_cache": "torch.cuda.empty_cache",
    "caching_allocator_enable": "torch.cuda.memory.caching_allocator_enable",
    "is_caching_enabled": "isEnabled asked from Python (torch.cuda has no getter for caching_allocator_enable)",
    "memory_stats": "torch.cuda.memory_stats",
    "memory_allocated": "torch.cuda.memory_allocated",
    "max_memory_allocated": "torch.cuda.max_memory_allocated",
    "memory_reserved": "torch.cuda.memory_reserved",
    "max_memory_reserved": "torch.cuda.max_memory_reserved",
    "reset_peak_memory_stats": "torch.cuda.reset_peak_memory_stats",
    "reset_accumulated_memory_stats": "torch.cuda.reset_accumulated_memory_stats",
    "memory_summary": "torch.cuda.memory_summary",
    "set_per_process_memory_fraction": "torch.cuda.set_per_process_memory_fraction",
    "get_per_process_memory_fraction": "torch.cuda.get_per_process_memory_fraction",
    "record_memory_history": "torch.cuda.memory._record_memory_history",
    "set_memory_metadata": "torch.cuda.memory._set_memory_metadata",
    "get_memory_metadata": "torch.cuda.memory._get_memory_metadata",
    "attach_out_of_memory_observer": "torch._C._cuda_attach_out_of_memory_observer",
    "attach_allocator_trace_tracker": "c10::cuda::CUDACachingAllocator::attachAllocatorTraceTracker (C++ only: torch.cuda has no binding)",
    "segments": "torch.cuda.memory._snapshot()['segments'] (torch.cuda.memory_snapshot)",
    "snapshot": "torch.cuda.memory._snapshot",
    "use_mem_pool": "torch.cuda.use_mem_pool",
    "begin_allocate_current_thread_to_pool": "torch._C._cuda_beginAllocateCurrentThreadToPool",
    "end_allocate_to_pool": "torch._C._cuda_endAllocateToPool",
    "release_pool": "torch._C._cuda_releasePool",
    "get_checkpoint_state": "torch._C._cuda_getCheckpointState",
    "set_checkpoint_pool_state": "torch._C._cuda_setCheckpointPoolState",
    "set_allocator_settings": "torch._C._accelerator_setAllocatorSettings",
    "config": "torch._C._accelerator_getAllocatorSettings (the parsed PYTORCH_CUDA_ALLOC_CONF)",
    "trace": "torch.cuda.memory._snapshot()['device_traces'] (the history ring buffer)",
}

OWN = {
    "__init__": "builds the three layers from a device and a PYTORCH_CUDA_ALLOC_CONF string",
    "__repr__": "a one-line summary for notebooks",
    "close": "hand every segment back to the device at the end of a notebook or test",
    "can_serve_from_cache": "replay asks whether a malloc would hit the cache (runs get_free_block, undoes it)",
    "live_allocations": "what is handed out and not freed, for notebooks and tests",
    # plain functions, not DeviceCachingAllocator members
    "is_expandable_segments_active": "expandable.py: the setting, except in a custom-allocator pool",
    "stream_get_capture_info": "capture_rules.py: cudaStreamGetCaptureInfo on a device that may not capture",
    "allocated_in_private_pools": "private_pool.py: the sum malloc's OOM message prints",
}
