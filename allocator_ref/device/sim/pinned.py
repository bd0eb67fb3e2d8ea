"""Pinned (page-locked) host memory mapped into the device: zero-copy (simulated).

``host_alloc(n, mapped=True)`` models cudaHostAlloc(cudaHostAllocMapped) +
cudaHostGetDevicePointer: the host gets a memoryview, the device gets an
address, and both are *the same bytes* -- a kernel writing through
``device_ptr`` is visible in ``buf.host`` with no copy, because the page
table maps that address straight onto the host buffer.

``host_register(bytearray)`` models cudaHostRegister(cudaHostRegisterMapped):
the same, on memory the user already owns.

Pinning is slow (milliseconds, see costs.json) and cudaFreeHost waits for the
device like cudaFree, which is why frameworks pool pinned memory too.
"""
from __future__ import annotations

import mmap

from ..errors import cuda_error
from ..protocol import HostBuffer
from .address_space import round_up
from .backing import FlatBuffer
from .checks import check_size
from .pagetable import Mapping

HOST_PAGE = 4096


class _PinnedRecord:
    """The device's side of one HostBuffer."""

    def __init__(self, view: memoryview, buffer, registered: bool) -> None:
        self.view = view
        self.buffer = buffer          # the mmap (host_alloc) or the user's bytearray (host_register)
        self.registered = registered
        self.device_ptr = None


class PinnedCalls:
    """The cudaHostAlloc / cudaHostRegister part of SimDevice (mixed into SimDevice)."""

    def _init_pinned(self) -> None:
        self._pinned: dict[int, _PinnedRecord] = {}      # id(record) -> record

    def _map_host(self, rec: _PinnedRecord, nbytes: int) -> None:
        """Give the host bytes a device address (cudaHostGetDevicePointer)."""
        span = round_up(nbytes, HOST_PAGE)
        start = self._space.allocate(span, HOST_PAGE)
        self._pages.add(Mapping(start, nbytes, FlatBuffer(rec.view), kind="pinned"))
        rec.device_ptr = start

    def host_alloc(self, nbytes: int, mapped: bool = True) -> HostBuffer:
        """cudaHostAlloc(nbytes, cudaHostAllocMapped if mapped)."""
        check_size(nbytes, "host_alloc")
        self._check_open()
        self.counters.host_alloc_calls += 1
        self._spend(self.costs.host_alloc_us(nbytes))
        memory = mmap.mmap(-1, nbytes)                    # page-aligned, zeroed, like pinned pages
        rec = _PinnedRecord(memoryview(memory), memory, registered=False)
        if mapped:
            self._map_host(rec, nbytes)
        self._pinned[id(rec)] = rec
        return HostBuffer(host=rec.view, nbytes=nbytes, device_ptr=rec.device_ptr,
                          registered=False, _owner=rec)

    def host_register(self, buffer: bytearray) -> HostBuffer:
        """cudaHostRegister(buffer, cudaHostRegisterMapped): pin user memory in place."""
        if not isinstance(buffer, bytearray):
            raise cuda_error("cudaErrorInvalidValue", f"host_register needs a bytearray, got "
                             f"{type(buffer).__name__}")
        check_size(len(buffer), "host_register")
        self._check_open()
        if any(r.buffer is buffer for r in self._pinned.values()):
            raise cuda_error("cudaErrorInvalidValue", "host_register: this bytearray is already "
                             "registered (cudaErrorHostMemoryAlreadyRegistered)")
        self.counters.host_alloc_calls += 1
        self._spend(self.costs.host_register_us(len(buffer)))
        rec = _PinnedRecord(memoryview(buffer), buffer, registered=True)
        self._map_host(rec, len(buffer))
        self._pinned[id(rec)] = rec
        return HostBuffer(host=rec.view, nbytes=len(buffer), device_ptr=rec.device_ptr,
                          registered=True, _owner=rec)

    def _pinned_record(self, buf, registered: bool, call: str) -> _PinnedRecord:
        rec = getattr(buf, "_owner", None)
        if not isinstance(buf, HostBuffer) or self._pinned.get(id(rec)) is not rec:
            raise cuda_error("cudaErrorInvalidValue", f"{call}: not a live HostBuffer of this device "
                             "(already freed, or from another device)")
        if rec.registered != registered:
            other = "host_unregister" if rec.registered else "host_free"
            raise cuda_error("cudaErrorInvalidValue", f"{call}: this buffer must be released with {other}")
        return rec

    def _unpin(self, rec: _PinnedRecord) -> None:
        del self._pinned[id(rec)]
        if rec.device_ptr is not None:
            self._pages.remove(rec.device_ptr)
            self._space.release(rec.device_ptr)

    def host_free(self, buf: HostBuffer) -> None:
        """cudaFreeHost.  The memoryview stops working (the memory is gone).

        Like cudaFree it waits for the device first: PyTorch's CachingHostAllocator.h
        exists to avoid "device synchronizations due to cudaFreeHost calls".
        """
        rec = self._pinned_record(buf, registered=False, call="host_free")
        if self.costs.free_syncs_device:
            self._implicit_sync()
        self._spend(self.costs.host_free_us(buf.nbytes))
        self._unpin(rec)
        rec.view.release()
        try:
            rec.buffer.close()
        except BufferError:          # a slice of the view is still alive somewhere: let GC close it
            pass

    def host_unregister(self, buf: HostBuffer) -> None:
        """cudaHostUnregister: the bytearray is ordinary memory again."""
        rec = self._pinned_record(buf, registered=True, call="host_unregister")
        self._unpin(rec)
        rec.view.release()

    def _close_pinned(self) -> None:
        for rec in list(self._pinned.values()):
            self._unpin(rec)
