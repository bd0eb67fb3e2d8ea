"""Out-of-memory: PyTorch's exception and the exact words of its message.

Mirrors the end of ``DeviceCachingAllocator::malloc`` and
``format_size`` of ``CUDACachingAllocator.cpp``.
"""
from __future__ import annotations

KiB, MiB, GiB = 1024, 1024**2, 1024**3

DOCS_URL = ("https://docs.pytorch.org/docs/stable/notes/cuda.html"
            "#optimizing-memory-usage-with-pytorch-cuda-alloc-conf")


class OutOfMemoryError(RuntimeError):
    """``torch.OutOfMemoryError``: the allocator ran out of options (a ``RuntimeError``)."""


def format_size(size: int) -> str:
    """``format_size``: '512 bytes', '2.00 MiB', '79.10 GiB' (2 decimals, binary units)."""
    if size <= 1024:
        return f"{size} bytes"
    if size <= MiB:
        return f"{size / KiB:.2f} KiB"
    if size <= GiB:
        return f"{size / MiB:.2f} MiB"
    return f"{size / GiB:.2f} GiB"


def oom_message(*, device_index: int, alloc_size: int, total: int, free: int,
                allocated: int, reserved: int, allowed: int | None,
                process_in_use: int | None, private_pools: int = 0) -> str:
    """The message ``malloc`` raises with; every figure comes from the caller's allocator."""
    proc_info = ""
    if process_in_use is not None:
        # From NVML on a GPU; the simulated device knows its own process exactly.
        proc_info = (f"Including non-PyTorch memory, this process has "
                     f"{format_size(process_in_use)} memory in use. ")
    allowed_info = f"{format_size(allowed)} allowed; " if allowed is not None else ""
    private_msg = (f"with {format_size(private_pools)} allocated in private pools "
                   f"(e.g., CUDA Graphs), ") if private_pools > 0 else ""
    return (
        f"CUDA out of memory. Tried to allocate {format_size(alloc_size)}. "
        f"GPU {device_index} has a total capacity of {format_size(total)} of which "
        f"{format_size(free)} is free. {proc_info}{allowed_info}"
        f"Of the allocated memory {format_size(allocated + private_pools)} is allocated by PyTorch, "
        f"{private_msg}and {format_size(reserved - allocated - private_pools)} is reserved by PyTorch "
        f"but unallocated. If reserved but unallocated memory is large try setting "
        f"PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  "
        f"See documentation for Memory Management  ({DOCS_URL})"
    )


EXABYTE_MESSAGE = "CUDA out of memory. Tried to allocate more than 1EB memory."

