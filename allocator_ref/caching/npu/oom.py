"""Out of memory on an NPU: torch_npu's exception message, word for word.

torch_npu words the error as PyTorch did before 2.0, not as PyTorch 2.11 does (../oom.py).
``DeviceCachingAllocator::malloc`` of ``torch_npu/csrc/core/npu/NPUCachingAllocator.cpp``
(Ascend/pytorch v2.11.0-26.1.0), when ``alloc_block`` failed with ``ACL_ERROR_RT_MEMORY_ALLOCATION``:

    "NPU out of memory. Tried to allocate " + format_size(alloc_size) + " (NPU " + device + "; " +
    format_size(device_total) + " total capacity; " + allocated + " already allocated; " +
    active + " current active; " + format_size(device_free) + " free; " + allowed_info +
    reserved + " reserved in total by PyTorch)." +
    "If reserved memory is >> allocated memory try setting max_split_size_mb to avoid fragmentation."

So it prints the *active* bytes too (PyTorch 2.11 does not), no "this process has ... in use",
no private-pool clause, no link, and points at ``max_split_size_mb``, not at expandable segments.
The missing space after "PyTorch)." is torch_npu's.  ``format_size`` (same file) is PyTorch's.
``NpuCachingAllocator::allocate`` refuses 1 EB and more with EXABYTE_MESSAGE below.
"""
from __future__ import annotations

from ..oom import format_size

EXABYTE_MESSAGE = "NPU out of memory. Tried to allocate more than 1EB memory."


def npu_oom_message(*, device_index: int, alloc_size: int, total: int, free: int, allocated: int,
                    active: int, reserved: int, allowed: int | None) -> str:
    """The message torch_npu's ``malloc`` raises with; every figure comes from the caller's allocator."""
    # allowed_info: only under torch.npu.set_per_process_memory_fraction (allowed_memory_maximum).
    allowed_info = f"{format_size(allowed)} allowed; " if allowed is not None else ""
    return (
        f"NPU out of memory. Tried to allocate {format_size(alloc_size)} "
        f"(NPU {device_index}; {format_size(total)} total capacity; "
        f"{format_size(allocated)} already allocated; {format_size(active)} current active; "
        f"{format_size(free)} free; {allowed_info}"
        f"{format_size(reserved)} reserved in total by PyTorch)."
        "If reserved memory is >> allocated memory try setting max_split_size_mb to avoid fragmentation."
    )


class NpuWording:
    """torch_npu's out-of-memory text (``NPUCachingAllocator.cpp``, ``malloc``), filled from ``allocator``'s
    counters: it prints the active bytes where PyTorch prints what the process holds."""

    def __call__(self, allocator, alloc_size: int, total: int, free: int) -> str:
        from ..stats import AGGREGATE
        stats = allocator.stats
        return npu_oom_message(
            device_index=allocator.device.info.index, alloc_size=alloc_size, total=total, free=free,
            allocated=stats.allocated_bytes[AGGREGATE].current, active=stats.active_bytes[AGGREGATE].current,
            reserved=stats.reserved_bytes[AGGREGATE].current, allowed=allocator.allowed_memory_maximum)


NPU_WORDING = NpuWording()
