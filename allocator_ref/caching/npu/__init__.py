"""torch_npu's NPUCachingAllocator (Ascend), beside PyTorch's: only what differs lives here.

config.py      PYTORCH_NPU_ALLOC_CONF, parsed as torch_npu parses it
rounding.py    the 32-byte pad before rounding, the 16 KiB start of large expandable blocks
stats.py       memory_stats() without the counters torch_npu does not keep
allocator.py   the allocator: the caching core with those rules plugged in
"""
from .allocator import NPUCachingAllocator, NPUDeviceCachingAllocator
from .config import NPU_KEYS, NPUAllocatorConfig, NPUConfigError

__all__ = ["NPUCachingAllocator", "NPUDeviceCachingAllocator", "NPUAllocatorConfig", "NPUConfigError", "NPU_KEYS"]
