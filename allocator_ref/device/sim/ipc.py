"""IPC on the simulated device: sharing device memory with another OS process.

Legacy CUDA IPC (cudaIpcGetMemHandle / cudaIpcOpenMemHandle), for cudaMalloc memory:

* ``ipc_get_mem_handle(base)`` (cudaIpcGetMemHandle) -> 64 bytes naming the
  whole allocation.  The pointer must be an allocation *base*.  On the first
  export the allocation's bytes move into a shared segment (``/dev/shm``) and
  stay there, so both processes see the same bytes from then on.
* ``ipc_open_mem_handle(handle)`` (cudaIpcOpenMemHandle), in another process
  with its own SimDevice -> a pointer in *that* device's address space.
  Opening the same handle twice returns the same pointer (reference counted).
* When the exporter frees the allocation or exits, importers get
  CUDA_ERROR_INVALID_CONTEXT "the exporting process freed this allocation or
  exited" on their next access (on a real GPU this is undefined behaviour;
  the model makes the mistake visible).

VMM shareable handles (cuMemExportToShareableHandle, POSIX fd):

* ``mem_export_fd(handle)`` -> a new file descriptor (the caller owns it and
  closes it) for a memfd holding the handle's bytes; send it to another
  process with ``multiprocessing.reduction.send_handle`` or fork inheritance.
* ``mem_import_fd(fd)`` -> a physical handle in this device; map it with
  mem_map + mem_set_access as usual.  The memory is the exporter's, so it is
  not counted against this device's capacity; the memfd keeps it alive while
  any process holds it, as CUDA does for shareable handles.
"""
from __future__ import annotations

import itertools
import os
import secrets
import struct
import weakref

from ..errors import cuda_error
from .backing import FlatBuffer
from .pagetable import Mapping
from .shared_segment import SharedSegment, map_fd, memfd_segment, sweep_once

IPC_HANDLE_SIZE = 64
_HANDLE_MAGIC = b"ARSIMIPC"
_HANDLE_FMT = "<8sQQQQ"          # magic, exporter pid, segment seq, token, size  (+ padding to 64)
_segment_seqs = itertools.count(1)    # per process: names stay unique across devices


def handle_exporter_pid(handle: bytes):
    """The pid of the process that exported a SimDevice IPC handle (None: not one of ours)."""
    if not isinstance(handle, (bytes, bytearray)) or len(handle) != IPC_HANDLE_SIZE:
        return None
    magic, pid, _seq, _token, _size = struct.unpack_from(_HANDLE_FMT, handle)
    return pid if magic == _HANDLE_MAGIC else None


def _retire_all(segments: dict) -> None:
    """Finalizer: at close, garbage collection or interpreter exit, leave nothing in /dev/shm."""
    for seg in list(segments.values()):
        seg.retire()
        seg.close()
    segments.clear()


class _Import:
    def __init__(self, ptr: int, segment: SharedSegment) -> None:
        self.ptr, self.segment, self.refs = ptr, segment, 1


class IpcCalls:
    """The IPC part of SimDevice (mixed into SimDevice)."""

    def _init_ipc(self) -> None:
        self._exports: dict[int, SharedSegment] = {}     # allocation base -> its segment
        self._imports: dict[bytes, _Import] = {}         # handle bytes -> import
        self._import_ptrs: dict[int, bytes] = {}         # ptr -> handle bytes
        self._finalizer = weakref.finalize(self, _retire_all, self._exports)

    # --- legacy IPC: exporter -------------------------------------------
    def ipc_get_mem_handle(self, ptr: int) -> bytes:
        """cudaIpcGetMemHandle: 64 bytes that name the cudaMalloc allocation starting at ``ptr``."""
        alloc = self._find_allocation(ptr, "ipc_get_mem_handle")
        if alloc.kind != "malloc":
            raise cuda_error("cudaErrorInvalidValue", "ipc_get_mem_handle: cudaMallocAsync pool memory "
                             "cannot use legacy IPC (CUDA needs an exportable pool for that)")
        self.counters.ipc_calls += 1
        seg = alloc.ipc_segment
        if seg is None:
            seg = self._move_to_shared_memory(alloc)
        pid, seq, token = seg.ids
        return struct.pack(_HANDLE_FMT, _HANDLE_MAGIC, pid, seq, token, seg.size).ljust(IPC_HANDLE_SIZE, b"\0")

    def _move_to_shared_memory(self, alloc) -> SharedSegment:
        """From now on this allocation's bytes live in a shared segment."""
        sweep_once()                   # files left by processes killed without cleaning up
        ids = (os.getpid(), next(_segment_seqs), secrets.randbits(63))
        seg = SharedSegment.create(*ids, alloc.charged)
        seg.ids = ids
        alloc.storage.copy_into(seg.data)
        alloc.storage = FlatBuffer(seg.data)
        self._pages.get(alloc.base).storage = alloc.storage
        alloc.ipc_segment = seg
        self._exports[alloc.base] = seg
        return seg

    def _retire_export(self, alloc) -> None:
        """The exported allocation is being freed: importers must learn it."""
        seg = self._exports.pop(alloc.base)
        alloc.storage = None
        seg.retire()
        seg.close()
        alloc.ipc_segment = None

    # --- legacy IPC: importer -------------------------------------------
    def ipc_open_mem_handle(self, handle: bytes) -> int:
        """cudaIpcOpenMemHandle: map another process's allocation; returns its address here."""
        self._check_open()
        if not isinstance(handle, (bytes, bytearray)) or len(handle) != IPC_HANDLE_SIZE:
            raise cuda_error("cudaErrorInvalidValue", f"ipc_open_mem_handle: a handle is {IPC_HANDLE_SIZE} "
                             f"bytes from ipc_get_mem_handle, got {type(handle).__name__} of length "
                             f"{len(handle) if hasattr(handle, '__len__') else '?'}")
        handle = bytes(handle)
        magic, pid, seq, token, size = struct.unpack_from(_HANDLE_FMT, handle)
        if magic != _HANDLE_MAGIC or not 0 < size < 2**60 or pid <= 0:
            raise cuda_error("cudaErrorInvalidValue", "ipc_open_mem_handle: these 64 bytes are not a "
                             "handle made by a SimDevice's ipc_get_mem_handle")
        if any(getattr(s, "ids", None) == (pid, seq, token) for s in self._exports.values()):
            raise cuda_error("cudaErrorDeviceUninitialized", "ipc_open_mem_handle: a handle cannot be "
                             "opened by the device that exported it (open it in another process)")
        self.counters.ipc_calls += 1
        if handle in self._imports:                       # same handle again: same pointer
            self._imports[handle].segment.check_alive()
            self._imports[handle].refs += 1
            return self._imports[handle].ptr
        self._spend(self.costs.ipc_open_us())
        seg = SharedSegment.open(pid, seq, token, size)
        ptr = self._space.allocate(size, 2 << 20)
        self._pages.add(Mapping(ptr, size, FlatBuffer(seg.data, check=seg.check_alive), kind="ipc"))
        self._imports[handle] = _Import(ptr, seg)
        self._import_ptrs[ptr] = handle
        return ptr

    def ipc_mapped_size(self, ptr: int) -> int:
        """How many bytes the import at ``ptr`` maps (what an offset into it must stay within)."""
        handle = self._import_ptrs.get(ptr) if isinstance(ptr, int) else None
        if handle is None:
            raise cuda_error("cudaErrorInvalidValue", f"ipc_mapped_size({ptr!r}): not a pointer "
                             "returned by ipc_open_mem_handle on this device")
        return self._imports[handle].segment.size

    def ipc_close_mem_handle(self, ptr: int) -> None:
        """cudaIpcCloseMemHandle: drop one reference; the last one unmaps it here."""
        self._check_open()
        handle = self._import_ptrs.get(ptr) if isinstance(ptr, int) else None
        if handle is None:
            raise cuda_error("cudaErrorInvalidValue", f"ipc_close_mem_handle({ptr!r}): not a pointer "
                             "returned by ipc_open_mem_handle on this device")
        self.counters.ipc_calls += 1
        imp = self._imports[handle]
        imp.refs -= 1
        if imp.refs == 0:
            self._drop_import(handle)

    def _drop_import(self, handle: bytes) -> None:
        imp = self._imports.pop(handle)
        del self._import_ptrs[imp.ptr]
        self._pages.remove(imp.ptr)
        self._space.release(imp.ptr)
        imp.segment.close()

    # --- VMM shareable handles ------------------------------------------
    def mem_export_fd(self, handle: int) -> int:
        """cuMemExportToShareableHandle(POSIX_FILE_DESCRIPTOR): a new fd the caller must close."""
        h = self._live_handle(handle, "mem_export_fd")
        self.counters.vmm_calls += 1
        self.counters.ipc_calls += 1
        if h.fd < 0:                                      # move the bytes into a memfd, once
            fd, mm = memfd_segment(h.size)
            view = memoryview(mm)
            h.storage.copy_into(view)
            h.fd, h.mmap, h.storage = fd, mm, FlatBuffer(view)
        return os.dup(h.fd)

    def mem_import_fd(self, fd: int) -> int:
        """cuMemImportFromShareableHandle: a physical handle for memory another process exported."""
        from .vmm import PhysicalHandle
        self._check_open()
        if isinstance(fd, bool) or not isinstance(fd, int) or fd < 0:
            raise cuda_error("CUDA_ERROR_INVALID_VALUE", f"mem_import_fd: need a file descriptor, got {fd!r}")
        try:
            own, size, mm = map_fd(fd)
        except (OSError, ValueError) as e:
            raise cuda_error("CUDA_ERROR_INVALID_VALUE", f"mem_import_fd({fd}): not a shareable "
                             f"handle fd ({e})") from None
        if size == 0 or size % self.info.vmm_granularity:
            os.close(own)
            raise cuda_error("CUDA_ERROR_INVALID_VALUE", f"mem_import_fd({fd}): size {size} is not a "
                             "granularity multiple; not an exported handle")
        self.counters.vmm_calls += 1
        self.counters.ipc_calls += 1
        self._spend(self.costs.ipc_import_fd_us())
        h = PhysicalHandle(next(self._handle_ids), size, FlatBuffer(memoryview(mm)), charged=False,
                           fd=own, mmap=mm)
        self._handles[h.id] = h
        return h.id

    def _close_handle_fd(self, h) -> None:
        if isinstance(h.storage, FlatBuffer):
            h.storage.view.release()
            h.storage = None
        if h.fd >= 0:
            os.close(h.fd)
            h.fd = -1
        if h.mmap is not None:
            try:
                h.mmap.close()
            except BufferError:
                pass
            h.mmap = None

    def _close_ipc(self) -> None:
        for handle in list(self._imports):
            self._drop_import(handle)
        for alloc in [a for a in self._allocs.values() if a.ipc_segment is not None]:
            self._retire_export(alloc)
        for h in list(self._handles.values()) + list(self._dying):
            self._close_handle_fd(h)
        self._finalizer()
