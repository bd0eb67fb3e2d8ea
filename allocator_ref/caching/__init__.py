"""The reference caching allocator: PyTorch 2.11's ``CUDACachingAllocator`` in Python.

config.py      PYTORCH_CUDA_ALLOC_CONF, rounding and segment sizes
block.py       Block and BlockPool (the ordered free lists)
device_caching_allocator.py  DeviceCachingAllocator: one device's pools, blocks, stats (PyTorch's members only)
native.py      NativeCachingAllocator: pointer -> Block map, argument checks, caching switched off
allocator.py   CachingAllocator: the torch.cuda functions above them, the object a notebook holds
layers.py      which PyTorch member or torch.cuda function each method mirrors
expandable.py  ExpandableSegment: a virtual range mapped page by page (VMM calls)
stats.py       memory_stats() counters
snapshot.py    block states and the stats/snapshot consistency check
summary.py     memory_summary()
oom.py         OutOfMemoryError and its message
tokenizer.py   ConfigTokenizer: std::stoull / std::stod as PyTorch reads numbers
backend.py     which allocator the environment selects (native or cudaMallocAsync)
unsafe.py      where PyTorch would free live memory, a clear error instead
private_pool.py PrivatePool and pool ids (graph_pools' entries)
pools.py       pool ids and the thread filter of use_mem_pool (the routing is get_pool's)
mempool.py     MemPool, use_mem_pool, graph_pool_handle (torch.cuda's API)
pluggable.py   a custom allocator for a pool (CUDAPluggableAllocator)
capture_rules.py the capture rules, listed (the code is DeviceCachingAllocator's), update_visited
graph.py       CUDAGraph and the graph() context manager
host_allocator.py CachingHostAllocator: pinned host memory (pin_memory), host_memory_stats()
"""
from .allocator import CachingAllocator
from .device_caching_allocator import DeviceCachingAllocator
from .native import NativeCachingAllocator
from .backend import get_allocator_backend
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
from .host_allocator import CachingHostAllocator

__all__ = [
    "CachingAllocator", "DeviceCachingAllocator", "NativeCachingAllocator", "AllocatorConfig", "OutOfMemoryError", "format_size",
    "check_stats_consistency", "round_size", "get_allocation_size",
    "roundup_power2_next_division", "kMinBlockSize", "kSmallSize", "kSmallBuffer",
    "kMinLargeAlloc", "kRoundLarge", "get_allocator_backend",
    "AllocatorConfigWarning", "SplitSegmentReleaseError",
    "MemPool", "use_mem_pool", "graph_pool_handle", "PluggableAllocator", "device_allocator",
    "CUDAGraph", "graph", "CachingHostAllocator",
]
