"""What a caller holds after ``malloc``: an :class:`Allocation`.

PyTorch hands a tensor a ``DataPtr`` whose address is the block's address;
the caller never sees the block itself.  Here the handle also remembers the
sizes a learner wants to look at (the rounded block size and the size asked
for) and which allocator and stream it came from, so freeing it through the
wrong allocator or twice is caught with a clear error.

Every allocator in the package (``CachingAllocator`` and the policies in
``allocator_ref.policies``) follows :class:`Allocator`, so chapters, labs and
the replay tool can swap one for another on the same workload.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional, Protocol, runtime_checkable


@dataclass(eq=False, slots=True)
class Allocation:
    """A live allocation.  ``ptr`` is what a kernel would use."""

    ptr: int
    size: int                 # bytes actually reserved for it (the rounded block size)
    requested_size: int       # bytes the caller asked for
    stream: Any               # the Stream it belongs to (its free blocks are reused on that stream only)
    allocator: Any = field(repr=False, default=None)
    _block: Any = field(repr=False, default=None)   # the allocator's own record (opaque to callers)
    freed: bool = field(default=False)

    def __int__(self) -> int:
        return self.ptr

    def __bool__(self) -> bool:
        # A zero-byte request returns a null allocation (ptr 0), as PyTorch does.
        return self.ptr != 0


@runtime_checkable
class Allocator(Protocol):
    """The interface every allocator design in the course shares."""

    device: Any
    trace: Any          # a TraceRecorder: every decision is an event

    def malloc(self, nbytes: int, stream: Optional[Any] = None) -> Allocation: ...
    def free(self, allocation: Allocation) -> None: ...
    def record_stream(self, allocation: Allocation, stream: Any) -> None: ...
    def empty_cache(self) -> None: ...
    def memory_stats(self) -> dict: ...
    def memory_allocated(self) -> int: ...
    def memory_reserved(self) -> int: ...
    def max_memory_allocated(self) -> int: ...
    def max_memory_reserved(self) -> int: ...


# What an allocator calls on its device, checked when it is built: a wrong argument
# (``CachingAllocator(device='gpu')``) is one clear error there, not an AttributeError
# deep inside the first malloc.
DEVICE_CALLS = ("malloc", "free", "mem_get_info", "synchronize", "create_event", "default_stream", "info")


def require_device(device: Any, who: str) -> Any:
    """``device`` itself if it offers the calls an allocator makes, else a TypeError saying what to pass."""
    missing = [name for name in DEVICE_CALLS if not hasattr(device, name)]
    if missing:
        hint = (f" ({device!r} is a name: open it with allocator_ref.device.open_device({device!r}) "
                "or build one with SimDevice('h100-80gb'))") if isinstance(device, str) else ""
        raise TypeError(f"{who}: device must be a device (SimDevice(...), open_device(...), or None for the "
                        f"course's device), got a {type(device).__name__} without "
                        f"{', '.join(missing)}{hint}")
    return device
