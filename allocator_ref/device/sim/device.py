"""SimDevice: a simulated GPU that behaves like the real one, on a laptop.

This file holds plain device memory (cudaMalloc/cudaFree/cudaMemGetInfo),
streams and events, and the kernels that touch memory.  The other calls live
next door, one idea per file, and are mixed into :class:`SimDevice`:

* ``pool.py``   -- cudaMallocAsync / cudaFreeAsync and the default memory pool
* ``vmm.py``    -- cuMemAddressReserve / cuMemCreate / cuMemMap / cuMemSetAccess ...
* ``pinned.py`` -- cudaHostAlloc / cudaHostRegister (zero-copy host memory)
* ``ipc.py``    -- cudaIpcGetMemHandle / cudaIpcOpenMemHandle and VMM fd export

What it models (see ``clock.py`` for time, ``backing.py`` for bytes):

* capacity and a CUDA-context reserve from a profile, so ``mem_get_info``
  reports less free memory than "capacity minus my allocations";
* host costs of every call from ``profiles/costs.json`` (each with a source);
* cudaFree's implicit device-wide synchronisation: it waits for every stream
  to drain, visible in :meth:`now_us` and in ``counters.implicit_syncs``;
* real bytes, written when a kernel *runs* (its start time), not when it is
  queued -- so a buffer reused too early on another stream really gets
  overwritten.

Two hooks exist only here, for the trace replay tool:
:meth:`set_address_hint` (place the next malloc/reserve at a given address)
and ``create_stream(handle=...)`` (a stream with a given raw handle).
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Callable, Optional

from ..costs import CostModel, load_profile
from ..errors import cuda_error
from ..protocol import DeviceCounters, DeviceInfo
from .address_space import AddressSpace, AddressSpaceFull, round_up
from .backing import LazyPages
from .checks import check_count, check_ptr, check_size
from .clock import SimEvent, SimStream, Timeline
from .device_allocation import DeviceAllocation
from .graphs import GraphCalls
from .ipc import IpcCalls
from .pagetable import Mapping, PageTable
from .pinned import PinnedCalls
from .pool import PoolCalls
from .vmm import VmmCalls

VA_BASE = 0x7F0000000000          # where device addresses start (looks like a real UVA address)
VA_SIZE = 1 << 44                 # the first 16 TiB of virtual address space (it grows: address_space.py)
LARGE = 2 << 20                   # cudaMalloc of >= 2 MiB gets a 2 MiB aligned, 2 MiB rounded range
_device_serials = itertools.count(1)

AddressHint = Callable[[str, int], Optional[int]]


@dataclass
class SimCounters(DeviceCounters):
    """DeviceCounters plus what only the simulated device can count cheaply."""

    pool_hits: int = 0             # cudaMallocAsync served from the pool
    pool_misses: int = 0           # cudaMallocAsync that grew the pool
    pool_releases: int = 0         # pool blocks handed back to the device (trim / threshold)
    host_alloc_calls: int = 0      # cudaHostAlloc + cudaHostRegister
    ipc_calls: int = 0             # cudaIpc* and shareable-handle export/import
    api_time_us: float = field(default=0.0)   # host time spent inside API calls (waits excluded)


class SimDevice(PoolCalls, VmmCalls, PinnedCalls, IpcCalls, GraphCalls):
    """A simulated GPU (see the module docstring).  ``SimDevice("tiny-1gb")``."""

    simulated = True

    def __init__(self, profile: str = "h100-80gb", index: int = 0) -> None:
        prof = load_profile(profile)          # ValueError naming the known profiles
        self.profile = prof
        self.costs = CostModel(overrides=prof.costs)
        self.serial = next(_device_serials)
        self.info = DeviceInfo(
            name=f"sim-{prof.name} (simulated)", index=index,
            total_memory=prof.total_memory, context_reserve=prof.context_reserve,
            vmm_granularity=prof.vmm_granularity, malloc_alignment=prof.malloc_alignment,
            simulated=True, driver_version="simulated", profile=prof.name)
        self.counters = SimCounters()
        self._clock = Timeline()
        self._space = AddressSpace(VA_BASE, VA_SIZE)
        self._pages = PageTable()
        self._allocs: dict[int, DeviceAllocation] = {}     # base -> allocation
        self._recently_freed: dict[int, None] = {}         # to say "double free" (bounded)
        self._used = prof.context_reserve                   # bytes counted against capacity
        self._hint: Optional[AddressHint] = None
        self._streams: dict[int, SimStream] = {}
        self._stream_handles = itertools.count(1)
        self._destroyed_tail = 0.0          # work of destroyed streams still counts for synchronize
        self.default_stream = SimStream(self, 0)
        self._streams[0] = self.default_stream
        self._closed = False
        self._init_pool()
        self._init_vmm()
        self._init_pinned()
        self._init_ipc()
        self._init_graphs()

    # ------------------------------------------------------------------ text
    def describe(self) -> str:
        free, total = self._free_total()
        gib = 1 << 30
        return (f"SimDevice '{self.profile.name}' (simulated): {self.profile.gpu}, "
                f"{total / gib:.2f} GiB total, {free / gib:.2f} GiB free, "
                f"context reserve {self.info.context_reserve >> 20} MiB, "
                f"clock {self._clock.host_us:.1f} us (simulated)")

    def __repr__(self) -> str:
        return f"<SimDevice {self.profile.name!r} (simulated)>"

    # ----------------------------------------------------------- accounting
    def _free_total(self) -> tuple[int, int]:
        return self.info.total_memory - self._used, self.info.total_memory

    def _charge(self, nbytes: int, error: str, call: str) -> None:
        """Count ``nbytes`` against capacity, or raise the out-of-memory error."""
        free, total = self._free_total()
        if nbytes > free:
            raise cuda_error(error, f"{call} of {nbytes} bytes: only {free} of {total} bytes free "
                                    f"(context reserve {self.info.context_reserve} included) (simulated)")
        self._used += nbytes

    def _uncharge(self, nbytes: int) -> None:
        self._used -= nbytes

    def _spend(self, microseconds: float) -> None:
        self.counters.api_time_us += microseconds
        self._clock.spend(microseconds)

    # ------------------------------------------------------------ the hooks
    def set_address_hint(self, fn: Optional[AddressHint]) -> None:
        """Replay hook (SimDevice only): ``fn(kind, size)`` picks the next address.

        ``kind`` is ``"malloc"`` (malloc and malloc_async growing the pool) or
        ``"reserve"`` (address_reserve).  Return an int to use that address
        (it must not overlap a live range, else cudaErrorInvalidValue), or
        None for the normal placement.  ``set_address_hint(None)`` removes it.
        """
        if fn is not None and not callable(fn):
            raise cuda_error("cudaErrorInvalidValue", f"set_address_hint needs a callable or None, got {fn!r}")
        self._hint = fn

    def _place(self, kind: str, size: int, alignment: int, call: str) -> int:
        """Choose the address of a new range: the hint's, or best fit."""
        wanted = self._hint(kind, size) if self._hint else None
        if wanted is None:
            start = self._space.allocate(size, alignment)
            if start is None:
                if kind == "reserve":                    # not an OOM: nothing may retry it (address_space.py)
                    raise AddressSpaceFull(call, size, self._space, self.info.total_memory)
                raise cuda_error("cudaErrorMemoryAllocation", f"{call}: virtual address space exhausted")
            return start
        check_ptr(wanted, f"{call} (address hint)")
        clash = self._space.overlapping(wanted, size)
        if clash:
            raise cuda_error("cudaErrorInvalidValue",
                             f"{call}: the address hint {wanted:#x} (+{size}) overlaps the live range "
                             f"[{clash[0]:#x}, {clash[1]:#x})")
        self._space.claim(wanted, size)
        return wanted

    # ------------------------------------------------------ plain memory
    def malloc(self, nbytes: int) -> int:
        """cudaMalloc.  >= 2 MiB: 2 MiB aligned and rounded; smaller: 512 B."""
        check_size(nbytes, "malloc")
        self._check_open()
        self._check_capture_safe("cudaMalloc")          # graphs.py: only in relaxed mode while capturing
        self.counters.malloc_calls += 1
        unit = LARGE if nbytes >= LARGE else self.info.malloc_alignment
        charged = round_up(nbytes, unit)
        if self.costs.malloc_syncs_device:
            self._implicit_sync()
        self._spend(self.costs.malloc_us(nbytes))
        self._charge(charged, "cudaErrorMemoryAllocation", "cudaMalloc")
        try:
            base = self._place("malloc", charged, unit, "malloc")
        except Exception:
            self._uncharge(charged)
            raise
        self._map_allocation(DeviceAllocation(base, nbytes, charged, "malloc", LazyPages(charged)))
        return base

    def _map_allocation(self, alloc: DeviceAllocation) -> None:
        self._allocs[alloc.base] = alloc
        self._recently_freed.pop(alloc.base, None)
        self._pages.add(Mapping(alloc.base, alloc.charged, alloc.storage, kind=alloc.kind))

    def _unmap_allocation(self, alloc: DeviceAllocation) -> None:
        del self._allocs[alloc.base]
        self._pages.remove(alloc.base)
        self._space.release(alloc.base)
        self._recently_freed[alloc.base] = None
        if len(self._recently_freed) > 4096:
            self._recently_freed.pop(next(iter(self._recently_freed)))
        if alloc.ipc_segment is not None:                   # importers now get a clear error
            self._retire_export(alloc)

    def _find_allocation(self, ptr, call: str) -> DeviceAllocation:
        """The live allocation whose base is ``ptr``, or the CudaError explaining why not."""
        check_ptr(ptr, call, "cudaErrorInvalidDevicePointer")
        alloc = self._allocs.get(ptr)
        if alloc is not None:
            return alloc
        if ptr in self._recently_freed:
            raise cuda_error("cudaErrorInvalidDevicePointer", f"{call}({ptr:#x}): double free, this "
                             "pointer was already freed")
        inside = self._space.containing(ptr)
        if inside and inside[0] in self._allocs:
            raise cuda_error("cudaErrorInvalidValue", f"{call}({ptr:#x}): the pointer is {ptr - inside[0]} "
                             f"bytes inside the allocation at {inside[0]:#x}; pass the base pointer")
        if inside:
            raise cuda_error("cudaErrorInvalidValue", f"{call}({ptr:#x}): this range was not made by "
                             "malloc/malloc_async (it is a VMM reservation, pinned or IPC mapping)")
        raise cuda_error("cudaErrorInvalidDevicePointer", f"{call}({ptr:#x}): not a live allocation of "
                         "this device (never allocated here)")

    def free(self, ptr: int) -> None:
        """cudaFree: waits for every stream to drain, then frees.  free(0) does nothing, as in CUDA."""
        self._check_open()
        if ptr == 0 and isinstance(ptr, int) and not isinstance(ptr, bool):
            return
        alloc = self._find_allocation(ptr, "free")
        self._check_capture_safe("cudaFree")
        self.counters.free_calls += 1
        if self.costs.free_syncs_device:
            self._implicit_sync()
        if alloc.kind == "pool":                 # cudaFree of cudaMallocAsync memory: allowed, after the sync
            self._pool_give_back(alloc, self.default_stream)
            return
        self._spend(self.costs.free_us(alloc.charged))
        self._unmap_allocation(alloc)
        self._uncharge(alloc.charged)

    def _implicit_sync(self) -> None:
        """The device-wide wait hidden in cudaFree (the seed's 'implicit synchronisation' sin)."""
        waited = self._clock.wait_until(self._drain_time())
        self.counters.implicit_syncs += 1
        self.counters.implicit_sync_wait_us += waited
        self._after_host_sync()

    def _drain_time(self) -> float:
        """When every stream (destroyed ones included) has finished its queued work."""
        return max(self._destroyed_tail, max(s.tail_us for s in self._streams.values()))

    def mem_get_info(self) -> tuple[int, int]:
        """cudaMemGetInfo: (free, total) as nvidia-smi sees them (context reserve counted as used)."""
        self._check_open()
        self._spend(self.costs.mem_get_info_us())
        return self._free_total()

    def allocation_size(self, ptr: int) -> int:
        """Bytes counted against capacity for the malloc/malloc_async at ``ptr`` (cuMemGetAddressRange)."""
        return self._find_allocation(ptr, "allocation_size").charged

    # ---------------------------------------------------- streams, events
    def create_stream(self, handle: Optional[int] = None) -> SimStream:
        """cudaStreamCreateWithFlags(non-blocking).  ``handle``: a raw cudaStream_t to reuse (replay)."""
        self._check_open()
        if handle is None:
            handle = next(self._stream_handles)
            while handle in self._streams:
                handle = next(self._stream_handles)
        elif isinstance(handle, bool) or not isinstance(handle, int) or handle <= 0:
            raise cuda_error("cudaErrorInvalidValue", f"create_stream: handle must be a positive int "
                             f"(0 is the default stream), got {handle!r}")
        elif handle in self._streams:
            raise cuda_error("cudaErrorInvalidValue", f"create_stream: stream handle {handle:#x} is already in use")
        stream = SimStream(self, handle)
        stream.tail_us = self._clock.host_us
        self._streams[handle] = stream
        return stream

    def stream_by_handle(self, handle: int) -> SimStream:
        """The live stream with this raw handle (0: the default stream)."""
        stream = self._streams.get(handle)
        if stream is None:
            raise cuda_error("cudaErrorInvalidResourceHandle", f"no live stream with handle {handle!r}")
        return stream

    def destroy_stream(self, stream: SimStream) -> None:
        """cudaStreamDestroy.  Queued work still runs; the handle becomes invalid."""
        s = self._check_stream(stream)
        if s is self.default_stream:
            raise cuda_error("cudaErrorInvalidResourceHandle", "the default stream cannot be destroyed")
        s.destroyed = True
        del self._streams[s.handle]
        self._destroyed_tail = max(self._destroyed_tail, s.tail_us)

    def _check_stream(self, stream) -> SimStream:
        """None -> default stream; a stream of another device or a destroyed one -> error."""
        self._check_open()
        if stream is None:
            return self.default_stream
        if not isinstance(stream, SimStream) or stream.device is not self:
            raise cuda_error("cudaErrorInvalidResourceHandle",
                             f"{stream!r} is not a stream of this device ({self!r})")
        if stream.destroyed:
            raise cuda_error("cudaErrorInvalidResourceHandle", f"stream {stream.handle:#x} was destroyed")
        return stream

    def create_event(self, timing: bool = True) -> SimEvent:
        self._check_open()
        return SimEvent(self, timing=bool(timing))

    def _check_event(self, event) -> SimEvent:
        self._check_open()
        if not isinstance(event, SimEvent) or event.device is not self:
            raise cuda_error("cudaErrorInvalidResourceHandle",
                             f"{event!r} is not an event of this device ({self!r})")
        return event

    def wait_event(self, stream, event) -> None:
        """cudaStreamWaitEvent: work queued on ``stream`` after this starts after ``event``."""
        s = self._check_stream(stream)
        ev = self._check_event(event)
        if ev.captured is not None and self._capture_wait_event(s, ev):   # a fork/join inside a capture
            return
        if ev.time_us is not None:
            s.tail_us = max(s.tail_us, ev.time_us)

    def synchronize(self) -> None:
        """cudaDeviceSynchronize: the host waits for every stream."""
        self._check_open()
        self._check_capture_safe("cudaDeviceSynchronize")
        self._clock.wait_until(self._drain_time())
        self._after_host_sync()

    def _stream_synchronize(self, stream: SimStream) -> None:
        s = self._check_stream(stream)
        self._check_capture_safe("cudaStreamSynchronize")
        self._clock.wait_until(s.tail_us)
        self._after_host_sync()

    def _after_host_sync(self) -> None:
        """What the driver does when the host learns work finished: the pool may trim."""
        self._pool_on_sync()

    def now_us(self) -> float:
        """The host's virtual clock, in microseconds (simulated)."""
        return self._clock.host_us

    # ----------------------------------------------------------- kernels
    def _launch(self, stream, duration_us: float, effect=None) -> tuple[float, float]:
        """Queue a kernel: the host pays the launch, the stream runs it after its tail."""
        s = self._check_stream(stream)
        if self._captures and self._capture_kernel(s, duration_us, effect):   # recorded into a graph
            return self._clock.host_us, self._clock.host_us
        self.counters.kernels += 1
        self._spend(self.costs.kernel_launch_us())
        start = max(self._clock.host_us, s.tail_us)
        s.tail_us = start + duration_us
        self._clock.schedule(start, effect)
        return start, s.tail_us

    def _device_us(self, nbytes: int) -> float:
        """Time a kernel needs to stream ``nbytes`` through device memory (bandwidth in GB/s = 1e3 B/us)."""
        return nbytes / (self.profile.memory_bandwidth_gbps * 1e3)

    def _link_us(self, nbytes: int) -> float:
        return nbytes / (self.profile.host_link_gbps * 1e3)

    def _check_range(self, ptr, nbytes: int, call: str) -> None:
        """Raise now (not later) if the range is unmapped: clearer for a learner than an async error."""
        check_ptr(ptr, call)
        if nbytes:
            self._pages.segments(ptr, nbytes)

    def fill(self, ptr: int, nbytes: int, value: int, stream=None) -> None:
        """cudaMemsetAsync(ptr, value, nbytes, stream)."""
        check_count(nbytes, "fill")
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 255:
            raise cuda_error("cudaErrorInvalidValue", f"fill: value must be a byte 0..255, got {value!r}")
        self._check_stream(stream)
        self._check_range(ptr, nbytes, "fill")
        self._launch(stream, self._device_us(nbytes), lambda: self._pages.fill(ptr, nbytes, value))

    def copy(self, dst: int, src: int, nbytes: int, stream=None) -> None:
        """cudaMemcpyAsync device-to-device: reads ``src`` when it *runs*."""
        check_count(nbytes, "copy")
        self._check_stream(stream)
        self._check_range(src, nbytes, "copy (source)")
        self._check_range(dst, nbytes, "copy (destination)")

        def effect():
            self._pages.write(dst, self._pages.read(src, nbytes))
        self._launch(stream, self._device_us(2 * nbytes), effect)

    def write(self, ptr: int, data: bytes, stream=None) -> None:
        """cudaMemcpyAsync host-to-device of ``data`` (copied now, as from pageable memory)."""
        try:
            payload = bytes(memoryview(data).cast("B"))
        except TypeError:
            raise cuda_error("cudaErrorInvalidValue", f"write: data must be bytes-like, got {type(data).__name__}") from None
        self._check_stream(stream)
        self._check_range(ptr, len(payload), "write")
        self._launch(stream, self._link_us(len(payload)), lambda: self._pages.write(ptr, payload))

    def read(self, ptr: int, nbytes: int, stream=None) -> bytes:
        """cudaMemcpyAsync device-to-host on ``stream`` + wait: the bytes as that stream sees them."""
        check_count(nbytes, "read")
        s = self._check_stream(stream)
        self._check_capture_safe("cudaMemcpy (device to host, synchronous)")
        self._check_range(ptr, nbytes, "read")
        result: list[bytes] = []
        self._launch(s, self._link_us(nbytes), lambda: result.append(self._pages.read(ptr, nbytes)))
        self._clock.wait_until(s.tail_us)
        self._after_host_sync()
        return result[0]

    def sleep(self, stream, microseconds: float) -> None:
        """A kernel that keeps ``stream`` busy for ``microseconds`` (a clock64 spin kernel on a GPU)."""
        if isinstance(microseconds, bool) or not isinstance(microseconds, (int, float)) or not microseconds >= 0:
            raise cuda_error("cudaErrorInvalidValue", f"sleep: microseconds must be a number >= 0, got {microseconds!r}")
        self._launch(stream, float(microseconds))

    # ------------------------------------------------------------- close
    def _check_open(self) -> None:
        if self._closed:
            raise cuda_error("cudaErrorDeviceUninitialized", f"{self!r} was closed")

    def close(self) -> None:
        """Free everything (exported IPC segments are retired and unlinked)."""
        if self._closed:
            return
        self._close_ipc()
        self._close_pinned()
        self._closed = True

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()
