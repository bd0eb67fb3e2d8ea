"""The device protocol: the only thing an allocator ever touches.

Allocators in this package (the caching allocator, the stream-ordered pool,
BFC, the direct baseline) sit on top of a ``Device``.  Two implementations
exist and behave the same way:

* :class:`allocator_ref.device.sim.SimDevice` -- a model with a virtual clock,
  a cited cost model and real bytes, so that every lesson runs on a laptop;
* :class:`allocator_ref.device.cuda.CudaDevice` -- real calls through
  cuda-python (``cuda.bindings.driver`` / ``runtime``) and CuPy.

This module only names the calls (a ``typing.Protocol``) and the small value
types they exchange.  Each method says which CUDA call it models.  Errors are
always :class:`~allocator_ref.device.errors.CudaError` (never a bare Python
exception from the inside), and a failed call leaves the device consistent.

Conventions
-----------
* Device pointers and VMM physical handles are plain ``int``.
* Sizes are bytes (``int``); times are microseconds (``float``) on the
  device's own clock (:meth:`Device.now_us`): virtual on the simulated device,
  wall clock on a GPU.  ``Device.simulated`` says which.
* Streams and events are objects owned by the device that created them; using
  them with another device raises ``cudaErrorInvalidResourceHandle``.
* ``stream=None`` always means the device's default (legacy) stream, whose
  ``handle`` is 0 as in PyTorch's traces.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Protocol, runtime_checkable


@dataclass(frozen=True)
class DeviceInfo:
    """What ``cudaGetDeviceProperties`` + the driver tell about a device."""

    name: str                 # "NVIDIA H200" or "sim-h100-80gb (simulated)"
    index: int                # device ordinal
    total_memory: int         # totalGlobalMem, bytes
    context_reserve: int      # bytes the CUDA context itself holds (never usable by allocators)
    vmm_granularity: int      # cuMemGetAllocationGranularity (2 MiB on current GPUs)
    malloc_alignment: int     # cudaMalloc address alignment (512 B guaranteed; 2 MiB in practice for big blocks)
    simulated: bool
    driver_version: str = ""  # "simulated" on the SimDevice
    profile: str = ""         # simulated profile name, or "" on a GPU


@runtime_checkable
class Stream(Protocol):
    """A CUDA stream (``cudaStream_t``).  ``handle`` is the raw integer PyTorch records."""

    handle: int
    device: "Device"

    def synchronize(self) -> None:  # cudaStreamSynchronize
        ...

    def query(self) -> bool:  # cudaStreamQuery: True when all queued work is done
        ...


@runtime_checkable
class Event(Protocol):
    """A CUDA event (``cudaEvent_t``)."""

    device: "Device"

    def record(self, stream: Optional[Stream] = None) -> None:  # cudaEventRecord
        ...

    def query(self) -> bool:  # cudaEventQuery: True once the stream reached the record point
        ...

    def synchronize(self) -> None:  # cudaEventSynchronize
        ...

    def elapsed_time_ms(self, end: "Event") -> float:  # cudaEventElapsedTime(self, end)
        ...


@dataclass
class HostBuffer:
    """Pinned (page-locked) host memory, possibly mapped into the device's address space.

    ``host`` is a writable memoryview the CPU reads and writes; ``device_ptr``
    is the pointer a kernel uses to reach the same bytes without a copy
    (``cudaHostGetDevicePointer``), or None when the memory was not mapped.
    """

    host: memoryview
    nbytes: int
    device_ptr: Optional[int]
    registered: bool = False   # True for cudaHostRegister'd user memory, False for cudaHostAlloc
    _owner: object = field(default=None, repr=False)


@dataclass
class DeviceCounters:
    """What the device saw, for chapters and checks ("how many driver calls did it make?")."""

    malloc_calls: int = 0          # cudaMalloc
    free_calls: int = 0            # cudaFree
    malloc_async_calls: int = 0    # cudaMallocAsync
    free_async_calls: int = 0      # cudaFreeAsync
    implicit_syncs: int = 0        # device-wide waits caused by cudaFree / cudaMalloc
    implicit_sync_wait_us: float = 0.0   # time the host spent waiting in those
    vmm_calls: int = 0             # cuMem* calls
    kernels: int = 0               # kernels launched (fill, copy, sleep...)


@runtime_checkable
class Device(Protocol):
    """The calls an allocator, a chapter or a lab may make on a GPU."""

    info: DeviceInfo
    counters: DeviceCounters
    default_stream: Stream

    @property
    def simulated(self) -> bool: ...

    # --- plain device memory -------------------------------------------------
    def malloc(self, nbytes: int) -> int:
        """cudaMalloc.  Raises CudaOutOfMemoryError (cudaErrorMemoryAllocation) when it does not fit."""

    def free(self, ptr: int) -> None:
        """cudaFree.  Waits for every stream to drain first (the implicit device-wide sync)."""

    def mem_get_info(self) -> tuple[int, int]:
        """cudaMemGetInfo: (free, total) bytes, as nvidia-smi would see them (context reserve included)."""

    # --- streams, events, time -----------------------------------------------
    def create_stream(self) -> Stream: ...          # cudaStreamCreateWithFlags(non-blocking)
    def destroy_stream(self, stream: Stream) -> None: ...   # cudaStreamDestroy
    def create_event(self, timing: bool = True) -> Event: ...   # cudaEventCreateWithFlags
    def wait_event(self, stream: Optional[Stream], event: Event) -> None: ...  # cudaStreamWaitEvent
    def synchronize(self) -> None: ...              # cudaDeviceSynchronize
    def now_us(self) -> float: ...                  # the host's clock, microseconds

    # --- kernels that touch memory (each one is queued on a stream) -----------
    def fill(self, ptr: int, nbytes: int, value: int, stream: Optional[Stream] = None) -> None:
        """A kernel writing the byte ``value`` into [ptr, ptr+nbytes) (cudaMemsetAsync)."""

    def copy(self, dst: int, src: int, nbytes: int, stream: Optional[Stream] = None) -> None:
        """A device-to-device copy kernel; it reads ``src`` when it *runs*, not when it is queued."""

    def write(self, ptr: int, data: bytes, stream: Optional[Stream] = None) -> None:
        """Host-to-device copy (cudaMemcpyAsync H2D) of ``data``."""

    def read(self, ptr: int, nbytes: int, stream: Optional[Stream] = None) -> bytes:
        """Device-to-host copy on ``stream``; waits for that stream, returns the bytes."""

    def sleep(self, stream: Optional[Stream], microseconds: float) -> None:
        """A kernel that keeps ``stream`` busy for ``microseconds`` (a spin kernel on a GPU)."""

    # --- stream-ordered allocation (cudaMallocAsync and the device's default pool) ---
    def malloc_async(self, nbytes: int, stream: Optional[Stream] = None) -> int: ...   # cudaMallocAsync
    def free_async(self, ptr: int, stream: Optional[Stream] = None) -> None: ...       # cudaFreeAsync
    def mempool_trim_to(self, min_bytes_to_keep: int) -> None: ...                      # cudaMemPoolTrimTo
    def mempool_set_release_threshold(self, nbytes: int) -> None: ...                   # cudaMemPoolAttrReleaseThreshold
    def mempool_reserved(self) -> int: ...                                              # cudaMemPoolAttrReservedMemCurrent

    # --- virtual memory management (the "three steps") -------------------------
    def vmm_granularity(self) -> int: ...                                  # cuMemGetAllocationGranularity
    def address_reserve(self, size: int, alignment: int = 0) -> int: ...   # cuMemAddressReserve
    def address_free(self, ptr: int, size: int) -> None: ...               # cuMemAddressFree
    def mem_create(self, size: int) -> int: ...                            # cuMemCreate -> physical handle
    def mem_release(self, handle: int) -> None: ...                        # cuMemRelease
    def mem_map(self, ptr: int, size: int, handle: int, offset: int = 0) -> None: ...  # cuMemMap
    def mem_unmap(self, ptr: int, size: int) -> None: ...                  # cuMemUnmap
    def mem_set_access(self, ptr: int, size: int) -> None: ...             # cuMemSetAccess (read/write)
    def mem_export_fd(self, handle: int) -> int: ...                       # cuMemExportToShareableHandle(POSIX_FD)
    def mem_import_fd(self, fd: int) -> int: ...                           # cuMemImportFromShareableHandle

    # --- pinned host memory (zero-copy) ---------------------------------------
    def host_alloc(self, nbytes: int, mapped: bool = True) -> HostBuffer: ...   # cudaHostAlloc(Mapped)
    def host_free(self, buf: HostBuffer) -> None: ...                           # cudaFreeHost
    def host_register(self, buffer: bytearray) -> HostBuffer: ...               # cudaHostRegister(Mapped)
    def host_unregister(self, buf: HostBuffer) -> None: ...                     # cudaHostUnregister

    # --- legacy IPC -----------------------------------------------------------
    def ipc_get_mem_handle(self, ptr: int) -> bytes: ...     # cudaIpcGetMemHandle (64 bytes, names the allocation base)
    def ipc_open_mem_handle(self, handle: bytes) -> int: ... # cudaIpcOpenMemHandle, in another process
    def ipc_close_mem_handle(self, ptr: int) -> None: ...    # cudaIpcCloseMemHandle

    def close(self) -> None:
        """Release everything this device object still holds (end of a notebook or test)."""


# --------------------------------------------------------------------------- optional capabilities
# Not every device has these, so an allocator asks for them with getattr / hasattr instead of
# calling them blindly.  Each one the allocators probe is declared here (tests/test_device_capabilities.py
# checks that every probe in caching/ names a member declared below or in Device / Stream).

@runtime_checkable
class DestroyableStream(Protocol):
    """A stream that knows it was destroyed (``cudaStreamDestroy``).

    The caching allocator refuses to order work on such a stream (``malloc``, ``recordStream``,
    ``insert_events``) with ``errors.destroyed_stream_error``; a stream without the attribute is
    taken to be alive.  The SimStream has it; CUDA's own handles cannot be asked."""

    destroyed: bool


@runtime_checkable
class CaptureDevice(Protocol):
    """A device that can capture a CUDA graph (``torch.cuda.CUDAGraph`` needs one).

    The allocator asks ``capture_info`` (``cudaStreamGetCaptureInfo``, the capture rules) and
    ``is_capturing`` + ``capture_mode`` (``cudaMallocMaybeCapturing``'s relaxed guard); without
    them it takes no stream to be capturing."""

    def begin_capture(self, stream: Stream, mode: str = "global") -> None: ...   # cudaStreamBeginCapture
    def end_capture(self, stream: Stream) -> object: ...                         # cudaStreamEndCapture -> graph
    def instantiate(self, graph: object) -> object: ...                          # cudaGraphInstantiate
    def capture_info(self, stream: Stream) -> object: ...                        # cudaStreamGetCaptureInfo
    def is_capturing(self, stream: Optional[Stream] = None) -> bool: ...         # cudaStreamIsCapturing
    def capture_mode(self, mode: str) -> object: ...                             # cudaThreadExchangeStreamCaptureMode (a context manager)


# The VMM calls expandable segments need (declared in Device above): a device without them
# cannot run expandable_segments:True.
VMM_CALLS = ("vmm_granularity", "address_reserve", "address_free", "mem_create", "mem_release",
             "mem_map", "mem_unmap", "mem_set_access")
