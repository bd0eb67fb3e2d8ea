"""Run CuPy on a reference allocator: ``with use(allocator): ...``.

The hook is CuPy's own (``cupy.cuda.set_allocator``, ``cupy/cuda/memory.pyx``)::

    cupy.cuda.set_allocator(fn)      # fn(size: int) -> cupy.cuda.MemoryPointer

``fn`` asks the reference allocator for ``size`` bytes on CuPy's current
stream, wraps the address in ``cupy.cuda.memory.UnownedMemory(ptr, size,
owner, device_id)`` and returns ``MemoryPointer(mem, 0)``.  ``owner`` is a
:class:`Lease`: CuPy keeps it alive exactly as long as the memory, and when
CuPy drops the last reference the lease's destructor frees the block back to
the reference allocator (the RMM ``rmm_cupy_allocator`` pattern).  So every
CuPy array becomes a ``malloc`` and its release a ``free`` in the reference
allocator's trace, stats and block map.

CuPy is imported lazily, on the first ``use()`` without ``cupy_module``.  On a
machine without a GPU pass ``cupy_module=cupy_standin.new()`` (a CuPy-free
stand-in with the same calls) to exercise the same code on the simulated device.
"""
from __future__ import annotations

import contextlib
import sys
from typing import Any, Callable, Iterator, Optional

# CUDA's special stream handles: legacy default (0 or 1) and per-thread default (2).
_DEFAULT_STREAM_HANDLES = (0, 1, 2)


def _import_cupy():
    try:
        import cupy
    except Exception as exc:           # pragma: no cover - depends on the machine
        raise RuntimeError(f"CuPy is not importable here ({type(exc).__name__}: {exc}); "
                           "pass cupy_module=allocator_ref.integrations.cupy_standin.new() "
                           "to run the hook without a GPU") from exc
    return cupy


class Lease:
    """The owner CuPy keeps alive; its destruction frees the block to our allocator."""

    __slots__ = ("allocator", "allocation", "__weakref__")

    def __init__(self, allocator: Any, allocation: Any) -> None:
        self.allocator = allocator
        self.allocation = allocation

    @property
    def ptr(self) -> int:
        return self.allocation.ptr

    def release(self) -> None:
        allocation, self.allocation = self.allocation, None
        if allocation is not None and not allocation.freed:
            self.allocator.free(allocation)

    def __del__(self) -> None:
        if sys is None or getattr(sys, "is_finalizing", lambda: False)():
            return                     # interpreter shutdown: the device is going away anyway
        self.release()


class StreamMap:
    """CuPy's current stream (a raw handle) -> the reference device's Stream object.

    The default-stream handles map to ``device.default_stream``; a handle the
    device already knows maps to that stream; on the simulated device an
    unknown handle gets a stream with that same handle (so traces show CuPy's
    stream numbers).  A real GPU's foreign streams cannot be adopted: create
    them through the device instead.
    """

    def __init__(self, device: Any) -> None:
        self.device = device
        self.adopted: dict[int, Any] = {}

    def __call__(self, handle: int) -> Any:
        dev = self.device
        if handle in _DEFAULT_STREAM_HANDLES:
            return dev.default_stream
        known = getattr(dev, "_streams", {}).get(handle) or self.adopted.get(handle)
        if known is not None:
            return known
        if getattr(dev.info, "simulated", False):
            stream = dev.create_stream(handle=handle)
            self.adopted[handle] = stream
            return stream
        raise ValueError(f"CuPy's current stream {handle:#x} is not a stream of {dev!r}: create "
                         "streams with device.create_stream() and wrap them in "
                         "cupy.cuda.ExternalStream(stream.handle)")


def malloc_hook(allocator: Any, cupy_module: Any = None) -> Callable[[int], Any]:
    """The callable to hand to ``cupy.cuda.set_allocator``: ``size -> MemoryPointer``.

    Not an allocator (``allocator_ref.make_allocator`` builds those): a hook that sends CuPy's
    requests to ``allocator``."""
    cp = cupy_module if cupy_module is not None else _import_cupy()
    memory = cp.cuda.memory
    UnownedMemory, MemoryPointer = memory.UnownedMemory, memory.MemoryPointer
    streams = StreamMap(allocator.device)
    our_index = getattr(allocator.device.info, "index", 0)

    def cupy_malloc(size: int):
        dev_id = cp.cuda.Device().id
        if dev_id != our_index:
            raise ValueError(f"CuPy's current device is {dev_id} but the reference allocator "
                             f"manages device {our_index}")
        if size == 0:                  # CuPy may ask for 0 bytes: a null pointer, no block
            return MemoryPointer(UnownedMemory(0, 0, None, dev_id), 0)
        stream = streams(int(cp.cuda.get_current_stream().ptr))
        allocation = allocator.malloc(size, stream)
        lease = Lease(allocator, allocation)
        return MemoryPointer(UnownedMemory(allocation.ptr, size, lease, dev_id), 0)

    cupy_malloc.reference_allocator = allocator    # for inspection
    cupy_malloc.stream_map = streams
    return cupy_malloc


@contextlib.contextmanager
def use(allocator: Any, cupy_module: Any = None, *, pool: bool = False) -> Iterator[Callable]:
    """Make CuPy allocate through ``allocator`` inside the ``with`` block.

    ``pool=True`` puts CuPy's own ``MemoryPool`` on top (CuPy caches, our
    allocator sees only its misses).  The previous allocator is restored on
    exit, even on an exception; arrays still alive keep their blocks and free
    them to ``allocator`` when they are released later.
    """
    cp = cupy_module if cupy_module is not None else _import_cupy()
    hook = malloc_hook(allocator, cp)
    installed = cp.cuda.MemoryPool(hook).malloc if pool else hook
    previous = cp.cuda.get_allocator()
    cp.cuda.set_allocator(installed)
    try:
        yield hook
    finally:
        cp.cuda.set_allocator(previous)


__all__ = ["use", "malloc_hook", "Lease", "StreamMap"]
