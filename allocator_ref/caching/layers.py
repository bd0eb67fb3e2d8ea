"""Which of PyTorch's three layers each ``CachingAllocator`` method belongs to.

``CUDACachingAllocator.cpp`` keeps three layers apart, and ``CachingAllocator`` (allocator.py)
holds all three in one class (one object a learner can poke at).  Read with the .cpp open,
this map says where to look for each method:

* ``DEVICE``: a member of ``class DeviceCachingAllocator`` (one device's pools, blocks and
  stats), under its own name in snake_case.  The value is PyTorch's name.
* ``NATIVE``: ``class NativeCachingAllocator`` (the allocated-block map, ``allocate`` /
  ``raw_alloc`` / ``raw_delete``, the argument checks, the uncached path), or a free function
  of the .cpp.  The value is PyTorch's name.
* ``TORCH_CUDA``: the Python API above them (``torch/cuda/memory.py``, ``torch/cuda/memory.py``'s
  ``use_mem_pool``, ``torch._C``), which the .cpp does not have.
* ``OWN``: this project's own helpers, each with why it exists (no PyTorch twin).

``malloc``, ``free``, ``record_stream`` and ``empty_cache`` are where two layers meet: the
method does NativeCachingAllocator's part (look up the Allocation, check the arguments) and
then DeviceCachingAllocator's, in one Python call (the warm path takes no extra layer).
tests/test_caching_layers.py checks that every method is in exactly one of these maps.
"""
from __future__ import annotations

DEVICE = {
    # public section of class DeviceCachingAllocator, in the .cpp's order
    "attach_out_of_memory_observer": "attachOutOfMemoryObserver",
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
    "segments": "snapshot",
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
    "set_per_process_memory_fraction": "NativeCachingAllocator::setMemoryFraction (its checks)",
    "caching_allocator_enable": "NativeCachingAllocator::enable",
    "is_caching_enabled": "NativeCachingAllocator::isEnabled",
    "raw_alloc": "NativeCachingAllocator::raw_alloc",
    "raw_delete": "NativeCachingAllocator::raw_delete",
    "_uncached_malloc": "NativeCachingAllocator::allocate (forceUncachedAllocator: cudaMalloc)",
    "_uncached_free": "uncached_delete",
    "_lookup": "NativeCachingAllocator::get_allocated_block",
    "live_allocations": "NativeCachingAllocator::allocated_blocks",
    "_check_stream": "the stream checks of allocate / recordStream",
    "cuda_malloc_maybe_capturing": "cudaMallocMaybeCapturing (a free function)",
    "cuda_free": "C10_CUDA_CHECK(cudaFree) in release_block / unmap (a free function here)",
    "set_allocator_settings": "setAllocatorSettings (CUDAAllocatorConfig)",
}

TORCH_CUDA = {
    "memory_stats", "memory_allocated", "max_memory_allocated", "memory_reserved",
    "max_memory_reserved", "reset_peak_memory_stats", "reset_accumulated_memory_stats",
    "memory_summary", "record_memory_history", "set_memory_metadata", "get_memory_metadata",
    "snapshot", "use_mem_pool", "get_per_process_memory_fraction",
}

OWN = {
    "__init__": "the constructor: PyTorch's DeviceCachingAllocator() plus the config string",
    "__repr__": "a one-line summary for notebooks",
    "close": "hand every segment back to the device at the end of a notebook or test",
    "can_serve_from_cache": "replay asks whether a malloc would hit the cache (runs get_free_block, undoes it)",
    "release_unmapped_segments": "gives back expandable segments left wholly unmapped",
    "_gc_enabled": "set_fraction && garbage_collection_threshold() > 0, asked in malloc",
    "_expandable_for": "is_expandable_segments_active for a pool (custom-allocator pools never)",
    "_splits_allowed": "a no_split pool's rule, asked by should_split's caller",
    "_count_pool_segment": "the private pool's cudaMalloc_count",
    "allocated_in_private_pools": "the sum malloc's OOM message prints",
    "_private_pool_blocks": "the free blocks of every private pool (get_all_blocks' loop)",
    "_capture_info": "stream_get_capture_info on a device that may not capture",
    "before_malloc_in_capture": "malloc's capture branch (free_safe_blocks_in_capture, no process_events)",
    "defer_free_during_capture": "free's capture branch (needs_events_deferred_until_no_capture)",
    "_end_capture_reuse": "endAllocateToPool's graph_capture_record_stream_reuse cleanup",
}
