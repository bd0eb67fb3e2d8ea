"""A CuPy-free stand-in for the part of CuPy that allocator hooks touch.

It reproduces the call shapes of ``cupy.cuda`` that allocator hooks use (CuPy's
``cupy/cuda/memory.pyx``), so :func:`allocator_ref.integrations.cupy.use` can run on the
simulated device without a GPU or a CUDA driver:

* ``cuda.set_allocator(allocator=None)`` / ``cuda.get_allocator()`` /
  ``cuda.alloc(size)`` / ``cuda.using_allocator(allocator=None)``
  (thread-local; ``set_allocator`` inside it raises ``ValueError``);
* ``cuda.memory.UnownedMemory(ptr, size, owner, device_id=-1)`` and
  ``cuda.memory.MemoryPointer(mem, offset)`` (``.ptr``, ``.device_id``, ``.mem``);
* ``cuda.Device(id).id``, ``cuda.get_current_stream().ptr``, ``cuda.Stream()``
  (a context manager that makes itself current) and ``cuda.ExternalStream(ptr)``;
* ``empty(nbytes)``: an "array" that holds the ``MemoryPointer`` returned by
  the current allocator, exactly as a ``cupy.ndarray`` holds its ``.data``.

With no allocator set, the stand-in's own "cudaMalloc" hands out fake
addresses from a counter (nothing is stored), like CuPy's ``Memory``.
Memory is released when the last reference to the pointer goes away
(CPython reference counting), which is when CuPy would release it too.
"""
from __future__ import annotations

import contextlib
import itertools
import threading
import types
from typing import Any, Callable, Optional


class BaseMemory:
    ptr: int = 0
    size: int = 0
    device_id: int = 0


class Memory(BaseMemory):
    """What the default allocator returns: owns a (fake) cudaMalloc."""

    def __init__(self, size: int, module: "StandInCuPy") -> None:
        self.size = size
        self.device_id = module.cuda.Device().id
        self.ptr = next(module._fake_addresses) * 512 if size else 0
        module.raw_mallocs += 1


class UnownedMemory(BaseMemory):
    """``cupy.cuda.UnownedMemory(ptr, size, owner, device_id=-1)``: keeps ``owner`` alive only."""

    def __init__(self, ptr: int, size: int, owner: object, device_id: int = -1) -> None:
        if device_id < 0:
            if ptr == 0:
                raise ValueError("UnownedMemory: ptr == 0 needs an explicit device_id "
                                 "(the device cannot be looked up from a null pointer)")
            device_id = 0                 # CuPy asks the pointer's attributes; one device here
        self.ptr, self.size, self.device_id = int(ptr), int(size), int(device_id)
        self._owner = owner


class MemoryPointer:
    """``cupy.cuda.MemoryPointer(mem, offset)``: ``ptr = mem.ptr + offset``; keeps ``mem`` alive."""

    def __init__(self, mem: BaseMemory, offset: int) -> None:
        self.mem = mem
        self.ptr = mem.ptr + offset
        self.device_id = mem.device_id

    def __int__(self) -> int:
        return self.ptr


class StandInArray:
    """The slice of ``cupy.ndarray`` an allocator sees: ``.data`` is a MemoryPointer."""

    def __init__(self, nbytes: int, data: MemoryPointer) -> None:
        self.nbytes = nbytes
        self.data = data

    def __repr__(self) -> str:
        return f"StandInArray(nbytes={self.nbytes}, ptr={self.data.ptr:#x})"


class StandInCuPy:
    """One stand-in "cupy" module; ``module.cuda`` carries the allocator API."""

    def __init__(self, device_id: int = 0) -> None:
        self._device_id = device_id
        self._fake_addresses = itertools.count(1 << 20)
        self._global_allocator: Optional[Callable[[int], MemoryPointer]] = None
        self._local = threading.local()
        self._stream_ptrs = itertools.count(0x1000)
        self.raw_mallocs = 0           # calls that went to the default (non-hooked) allocator
        module = self

        class Device:
            def __init__(self, device: Optional[int] = None) -> None:
                self.id = module._device_id if device is None else int(device)

        class Stream:
            """A non-default stream; ``with Stream():`` makes it current (thread-local)."""

            def __init__(self, ptr: Optional[int] = None) -> None:
                self.ptr = next(module._stream_ptrs) if ptr is None else int(ptr)
                self._prev: list = []

            def __enter__(self):
                self._prev.append(getattr(module._local, "stream", None))
                module._local.stream = self
                return self

            def __exit__(self, *exc) -> None:
                module._local.stream = self._prev.pop()

        class ExternalStream(Stream):
            def __init__(self, ptr: int, device_id: int = -1) -> None:
                super().__init__(ptr)

        null_stream = Stream(0)

        def get_current_stream():
            return getattr(module._local, "stream", None) or null_stream

        def _default_malloc(size: int) -> MemoryPointer:
            return MemoryPointer(Memory(size, module), 0)

        def get_allocator():
            local = getattr(module._local, "allocator", None)
            if local is not None:
                return local
            return module._global_allocator or _default_malloc

        def set_allocator(allocator=None) -> None:
            if getattr(module._local, "allocator", None) is not None:
                raise ValueError("Can't change the global allocator inside ``using_allocator`` context manager")
            module._global_allocator = allocator

        @contextlib.contextmanager
        def using_allocator(allocator=None):
            prev = getattr(module._local, "allocator", None)
            module._local.allocator = allocator or _default_malloc
            try:
                yield
            finally:
                module._local.allocator = prev

        def alloc(size: int) -> MemoryPointer:
            return get_allocator()(size)

        memory = types.SimpleNamespace(
            BaseMemory=BaseMemory, Memory=Memory, UnownedMemory=UnownedMemory,
            MemoryPointer=MemoryPointer, set_allocator=set_allocator, get_allocator=get_allocator,
            alloc=alloc, using_allocator=using_allocator)
        self.cuda = types.SimpleNamespace(
            memory=memory, MemoryPointer=MemoryPointer, UnownedMemory=UnownedMemory,
            BaseMemory=BaseMemory, set_allocator=set_allocator, get_allocator=get_allocator,
            alloc=alloc, using_allocator=using_allocator, Device=Device, Stream=Stream,
            ExternalStream=ExternalStream, get_current_stream=get_current_stream)
        self.__name__ = "allocator_ref.integrations.cupy_standin"

    def empty(self, nbytes: int) -> StandInArray:
        """An "array" of ``nbytes`` bytes allocated the way CuPy does: ``cuda.alloc(nbytes)``."""
        return StandInArray(nbytes, self.cuda.alloc(nbytes))


def new(device_id: int = 0) -> StandInCuPy:
    """A fresh stand-in module (its allocator state is its own)."""
    return StandInCuPy(device_id)


__all__ = ["StandInCuPy", "StandInArray", "MemoryPointer", "UnownedMemory", "Memory", "new"]
