"""The reference caching allocator: PyTorch 2.11's ``CUDACachingAllocator`` in Python.

config.py      PYTORCH_CUDA_ALLOC_CONF, rounding and segment sizes
block.py       Block and BlockPool (the ordered free lists)
allocator.py   malloc / free / release: the decisions
expandable.py  ExpandableSegment: a virtual range mapped page by page (VMM calls)
stats.py       memory_stats() counters
snapshot.py    _snapshot() and the stats/snapshot consistency check
summary.py     memory_summary()
oom.py         OutOfMemoryError and its message
tokenizer.py   ConfigTokenizer: std::stoull / std::stod as PyTorch reads numbers
backend.py     which allocator the environment selects (native or cudaMallocAsync)
uncached.py    caching switched off: raw cudaMalloc / cudaFree
unsafe.py      where PyTorch would free live memory, a clear error instead
private_pool.py PrivatePool and pool ids (graph_pools' entries)
pools.py       routing into private pools: use_mem_pool, captures, use_on_oom, no_split
mempool.py     MemPool, use_mem_pool, graph_pool_handle (torch.cuda's API)
pluggable.py   a custom allocator for a pool (CUDAPluggableAllocator)
capture_rules.py what changes while a CUDA graph is captured
graph.py       CUDAGraph and the graph() context manager
"""
from .allocator import CachingAllocator
from .backend import get_allocator_backend, make_allocator
from .config import (AllocatorConfig, get_allocation_size, kMinBlockSize, kMinLargeAlloc,
                     kRoundLarge, kSmallBuffer, kSmallSize, round_size,
                     roundup_power2_next_division)
from .oom import OutOfMemoryError, format_size
from .snapshot import check_stats_consistency
from .tokenizer import AllocatorConfigWarning
from .unsafe import SplitSegmentReleaseError
from .mempool import MemPool, graph_pool_handle, use_mem_pool
from .pluggable import PluggableAllocator, device_allocator
from .graph import CUDAGraph, graph

__all__ = [
    "CachingAllocator", "AllocatorConfig", "OutOfMemoryError", "format_size",
    "check_stats_consistency", "round_size", "get_allocation_size",
    "roundup_power2_next_division", "kMinBlockSize", "kSmallSize", "kSmallBuffer",
    "kMinLargeAlloc", "kRoundLarge", "get_allocator_backend", "make_allocator",
    "AllocatorConfigWarning", "SplitSegmentReleaseError",
    "MemPool", "use_mem_pool", "graph_pool_handle", "PluggableAllocator", "device_allocator",
    "CUDAGraph", "graph",
]
