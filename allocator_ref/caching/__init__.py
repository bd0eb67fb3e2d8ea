"""The reference caching allocator: PyTorch 2.11's ``CUDACachingAllocator`` in Python.

config.py      PYTORCH_CUDA_ALLOC_CONF, rounding and segment sizes
block.py       Block and BlockPool (the ordered free lists)
allocator.py   malloc / free / release: the decisions
expandable.py  expandable segments on the VMM calls
stats.py       memory_stats() counters
snapshot.py    _snapshot() and the stats/snapshot consistency check
summary.py     memory_summary()
oom.py         OutOfMemoryError and its message
"""
from .allocator import CachingAllocator
from .config import (AllocatorConfig, get_allocation_size, kMinBlockSize, kMinLargeAlloc,
                     kRoundLarge, kSmallBuffer, kSmallSize, round_size,
                     roundup_power2_next_division)
from .oom import OutOfMemoryError, format_size
from .snapshot import check_stats_consistency

__all__ = [
    "CachingAllocator", "AllocatorConfig", "OutOfMemoryError", "format_size",
    "check_stats_consistency", "round_size", "get_allocation_size",
    "roundup_power2_next_division", "kMinBlockSize", "kSmallSize", "kSmallBuffer",
    "kMinLargeAlloc", "kRoundLarge",
]
