"""torch_npu's ``memory_stats()``: PyTorch's keys, less the three counters torch_npu does not keep.

``DeviceStats`` in ``torch_npu/csrc/core/npu/NPUCachingAllocator.h`` (Ascend/pytorch v2.11.0-26.1.0)
has PyTorch's stat arrays, ``num_alloc_retries``, ``num_ooms``, ``max_split_size`` and the oversize
stats, but no ``num_sync_all_streams``, ``num_device_alloc`` or ``num_device_free``; and
``THNPModule_memoryStats`` (``torch_npu/csrc/npu/Module.cpp``) writes only what it has.  The mirror
still counts them (the caching core is shared), it just does not report them, as torch_npu does not.
"""
from __future__ import annotations

NOT_IN_TORCH_NPU = ("num_sync_all_streams", "num_device_alloc", "num_device_free")


def npu_memory_stats(pytorch_stats: dict) -> dict:
    """``torch.npu.memory_stats()`` from the caching core's ``torch.cuda.memory_stats()`` dict."""
    return {key: value for key, value in pytorch_stats.items() if key not in NOT_IN_TORCH_NPU}
