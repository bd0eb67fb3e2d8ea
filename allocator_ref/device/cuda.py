"""CudaDevice: the device protocol on a real NVIDIA GPU (cuda-python + CuPy).

Every call is the CUDA driver API call named in its docstring, made through
``cuda.bindings.driver`` (cuda-python 13, classic style: each call returns
``(err, *outputs)``).  Kernels are the driver's memset/memcpy calls queued on
a stream, plus one CuPy ``RawKernel`` that spins on ``clock64()`` for
:meth:`CudaDevice.sleep`.

Errors come back as the same :class:`CudaError` names the simulated device
uses: runtime names (``cudaErrorMemoryAllocation``...) for the calls that
model runtime functions, driver names (``CUDA_ERROR_*``) for the cuMem* VMM
calls.  Arguments are checked the same way as on the simulator *before* the
driver sees them, so a double free or a bad size gives the same message on
both and never reaches the GPU.

Nothing here imports cuda-python or CuPy at module import time: a laptop
without a GPU can import this file, and :func:`probe_cuda` answers whether a
GPU is there.

Differences from SimDevice, by nature: ``now_us`` is the wall clock; the
implicit-sync counters count every cudaFree and add the whole call's wall
time (the driver does not say how much of it was waiting); kernels touching
unmapped memory are not checked here (on a GPU that is a fatal fault).
"""
from __future__ import annotations

import ctypes
import time
from typing import Optional

from .errors import cuda_error
from .protocol import DeviceCounters, DeviceInfo, HostBuffer
from .sim.checks import check_aligned, check_count, check_ptr, check_size


def probe_cuda() -> tuple[bool, str]:
    """(True, "") when the NVIDIA driver loads and reports a GPU, else (False, why not).

    Never raises: a missing driver library, a driver too old for the
    runtime, or zero devices are all reasons to fall back to the simulator.
    """
    try:
        from cuda.bindings import driver
    except Exception as e:                       # cuda-python not installed or broken
        return False, f"cuda-python cannot be imported ({type(e).__name__})"
    try:
        (err,) = driver.cuInit(0)
    except Exception:                            # libcuda.so not found: no NVIDIA driver
        return False, "no NVIDIA driver found"
    if err == driver.CUresult.CUDA_ERROR_NO_DEVICE:
        return False, "the NVIDIA driver reports no GPU"
    if err != driver.CUresult.CUDA_SUCCESS:
        return False, f"the NVIDIA driver did not initialise ({err.name})"
    err, count = driver.cuDeviceGetCount()
    if err != driver.CUresult.CUDA_SUCCESS or count == 0:
        return False, "the NVIDIA driver reports no GPU"
    return True, ""


# Driver results -> the runtime name, for calls that model runtime functions.
_RUNTIME_NAMES = {
    "CUDA_ERROR_OUT_OF_MEMORY": "cudaErrorMemoryAllocation",
    "CUDA_ERROR_INVALID_VALUE": "cudaErrorInvalidValue",
    "CUDA_ERROR_INVALID_HANDLE": "cudaErrorInvalidResourceHandle",
    "CUDA_ERROR_NOT_READY": "cudaErrorNotReady",
    "CUDA_ERROR_ILLEGAL_ADDRESS": "cudaErrorIllegalAddress",
    "CUDA_ERROR_NO_DEVICE": "cudaErrorNoDevice",
    "CUDA_ERROR_INVALID_DEVICE": "cudaErrorInvalidDevice",
    "CUDA_ERROR_INVALID_CONTEXT": "cudaErrorDeviceUninitialized",
}

_SPIN_SOURCE = r"""
extern "C" __global__ void spin(long long cycles) {
    long long start = clock64();
    while (clock64() - start < cycles) { }
}
"""


class CudaStream:
    """A real ``CUstream``; ``handle`` is its raw value (0: the legacy default stream)."""

    def __init__(self, device: "CudaDevice", cu_stream, handle: int) -> None:
        self.device, self._cu, self.handle = device, cu_stream, handle
        self.destroyed = False

    def synchronize(self) -> None:                   # cuStreamSynchronize
        d = self.device
        d._call(d._drv.cuStreamSynchronize, d._check_stream(self)._cu, name="cuStreamSynchronize")

    def query(self) -> bool:                         # cuStreamQuery
        d = self.device
        (err,) = d._drv.cuStreamQuery(d._check_stream(self)._cu)
        if err == d._drv.CUresult.CUDA_ERROR_NOT_READY:
            return False
        d._raise_if(err, "cuStreamQuery")
        return True

    def __repr__(self) -> str:
        return f"<CudaStream handle={self.handle:#x}>"


class CudaEvent:
    """A real ``CUevent``."""

    def __init__(self, device: "CudaDevice", cu_event, timing: bool) -> None:
        self.device, self._cu, self.timing = device, cu_event, timing

    def record(self, stream=None) -> None:           # cuEventRecord
        d = self.device
        d._call(d._drv.cuEventRecord, d._check_event(self)._cu, d._check_stream(stream)._cu,
                name="cuEventRecord")

    def query(self) -> bool:                         # cuEventQuery
        d = self.device
        (err,) = d._drv.cuEventQuery(d._check_event(self)._cu)
        if err == d._drv.CUresult.CUDA_ERROR_NOT_READY:
            return False
        d._raise_if(err, "cuEventQuery")
        return True

    def synchronize(self) -> None:                   # cuEventSynchronize
        d = self.device
        d._call(d._drv.cuEventSynchronize, d._check_event(self)._cu, name="cuEventSynchronize")

    def elapsed_time_ms(self, end: "CudaEvent") -> float:   # cuEventElapsedTime
        d = self.device
        return float(d._call(d._drv.cuEventElapsedTime, d._check_event(self)._cu,
                             d._check_event(end)._cu, name="cuEventElapsedTime"))


class CudaDevice:
    """The device protocol on GPU ``index`` (see the module docstring)."""

    simulated = False

    def __init__(self, index: int = 0) -> None:
        found, reason = probe_cuda()
        if not found:
            code = "cudaErrorNoDevice" if "no GPU" in reason else "cudaErrorInsufficientDriver"
            raise cuda_error(code, f"{reason}; use the simulated device (ALLOCATOR_REF_DEVICE=sim)")
        import cupy
        from cuda.bindings import driver
        self._drv, self._cupy = driver, cupy
        self.index = index
        self._dev = self._call(driver.cuDeviceGet, index, name="cuDeviceGet", runtime=True)
        self._ctx = self._call(driver.cuDevicePrimaryCtxRetain, self._dev, name="cuDevicePrimaryCtxRetain")
        self._call(driver.cuCtxSetCurrent, self._ctx, name="cuCtxSetCurrent")
        cupy.cuda.Device(index).use()                # CuPy shares the same primary context
        self.counters = DeviceCounters()
        self._t0 = time.perf_counter()
        self._allocs: dict[int, tuple[int, str]] = {}   # base -> (size, "malloc" | "pool")
        self._freed: dict[int, None] = {}
        self._handles: dict[int, int] = {}              # VMM handle -> size
        self._pinned: dict[int, HostBuffer] = {}
        self._ipc_opened: dict[int, int] = {}
        self._streams: dict[int, CudaStream] = {}
        self._keep: list = []                           # host buffers of queued async copies
        self._spin = None
        self._closed = False
        self.default_stream = CudaStream(self, driver.CUstream(0), 0)
        self._pool = self._call(driver.cuDeviceGetDefaultMemPool, self._dev, name="cuDeviceGetDefaultMemPool")
        self.info = self._read_info()

    # ------------------------------------------------------------ plumbing
    def _raise_if(self, err, name: str, runtime: bool = False) -> None:
        if err != self._drv.CUresult.CUDA_SUCCESS:
            driver_name = err.name
            raise cuda_error(_RUNTIME_NAMES.get(driver_name, driver_name) if runtime else driver_name,
                             f"{name} failed on GPU {getattr(self, 'index', '?')} ({driver_name})")

    def _call(self, fn, *args, name: str, runtime: bool = False):
        """Call a driver function; raise its error as CudaError; return its outputs."""
        result = fn(*args)
        self._raise_if(result[0], name, runtime)
        outputs = result[1:]
        return outputs[0] if len(outputs) == 1 else (outputs or None)

    def _attr(self, attribute: str) -> int:
        attr = getattr(self._drv.CUdevice_attribute, attribute)
        return int(self._call(self._drv.cuDeviceGetAttribute, attr, self._dev, name="cuDeviceGetAttribute"))

    def _read_info(self) -> DeviceInfo:
        drv = self._drv
        raw = self._call(drv.cuDeviceGetName, 256, self._dev, name="cuDeviceGetName")
        name = bytes(raw).split(b"\0", 1)[0].decode()
        total = int(self._call(drv.cuDeviceTotalMem, self._dev, name="cuDeviceTotalMem"))
        free, _ = self._call(drv.cuMemGetInfo, name="cuMemGetInfo")
        version = int(self._call(drv.cuDriverGetVersion, name="cuDriverGetVersion"))
        return DeviceInfo(
            name=name, index=self.index, total_memory=total,
            context_reserve=total - int(free),     # this context + anything else on the GPU at open
            vmm_granularity=self._granularity(), malloc_alignment=512, simulated=False,
            driver_version=f"{version // 1000}.{version % 1000 // 10}", profile="")

    def describe(self) -> str:
        free, total = self.mem_get_info()
        return (f"CudaDevice {self.index}: {self.info.name}, {total / 2**30:.2f} GiB total, "
                f"{free / 2**30:.2f} GiB free, CUDA driver {self.info.driver_version} (real GPU)")

    def __repr__(self) -> str:
        return f"<CudaDevice {self.index} {self.info.name!r}>"

    def now_us(self) -> float:
        """Wall clock since the device was opened, microseconds."""
        return (time.perf_counter() - self._t0) * 1e6

    # ------------------------------------------------------ plain memory
    def malloc(self, nbytes: int) -> int:
        """cuMemAlloc (cudaMalloc)."""
        check_size(nbytes, "malloc")
        self.counters.malloc_calls += 1
        ptr = int(self._call(self._drv.cuMemAlloc, nbytes, name="cuMemAlloc", runtime=True))
        self._allocs[ptr] = (nbytes, "malloc")
        self._freed.pop(ptr, None)
        return ptr

    def _find_allocation(self, ptr, call: str) -> tuple[int, str]:
        check_ptr(ptr, call, "cudaErrorInvalidDevicePointer")
        if ptr in self._allocs:
            return self._allocs[ptr]
        if ptr in self._freed:
            raise cuda_error("cudaErrorInvalidDevicePointer", f"{call}({ptr:#x}): double free, this "
                             "pointer was already freed")
        for base, (size, _) in self._allocs.items():
            if base < ptr < base + size:
                raise cuda_error("cudaErrorInvalidValue", f"{call}({ptr:#x}): the pointer is "
                                 f"{ptr - base} bytes inside the allocation at {base:#x}; pass the base pointer")
        raise cuda_error("cudaErrorInvalidDevicePointer", f"{call}({ptr:#x}): not a live allocation of "
                         "this device (never allocated here)")

    def _forget(self, ptr: int) -> None:
        del self._allocs[ptr]
        self._freed[ptr] = None
        if len(self._freed) > 4096:
            self._freed.pop(next(iter(self._freed)))

    def free(self, ptr: int) -> None:
        """cuMemFree (cudaFree): the driver waits for the device to drain first."""
        if ptr == 0 and isinstance(ptr, int) and not isinstance(ptr, bool):
            return
        self._find_allocation(ptr, "free")
        self.counters.free_calls += 1
        t0 = self.now_us()
        self._call(self._drv.cuMemFree, ptr, name="cuMemFree", runtime=True)
        self.counters.implicit_syncs += 1
        self.counters.implicit_sync_wait_us += self.now_us() - t0
        self._forget(ptr)

    def mem_get_info(self) -> tuple[int, int]:
        """cuMemGetInfo (cudaMemGetInfo)."""
        free, total = self._call(self._drv.cuMemGetInfo, name="cuMemGetInfo", runtime=True)
        return int(free), int(total)

    # --------------------------------------------------- streams, events
    def create_stream(self, handle: Optional[int] = None) -> CudaStream:
        """cuStreamCreate(CU_STREAM_NON_BLOCKING).  A real GPU picks the handle itself."""
        if handle is not None:
            raise cuda_error("cudaErrorInvalidValue", "create_stream(handle=...) exists only on the "
                             "simulated device (a real driver chooses stream handles)")
        cu = self._call(self._drv.cuStreamCreate, self._drv.CUstream_flags.CU_STREAM_NON_BLOCKING,
                        name="cuStreamCreate", runtime=True)
        stream = CudaStream(self, cu, int(cu))
        self._streams[stream.handle] = stream
        return stream

    def destroy_stream(self, stream: CudaStream) -> None:
        """cuStreamDestroy."""
        s = self._check_stream(stream)
        if s is self.default_stream:
            raise cuda_error("cudaErrorInvalidResourceHandle", "the default stream cannot be destroyed")
        self._call(self._drv.cuStreamDestroy, s._cu, name="cuStreamDestroy", runtime=True)
        s.destroyed = True
        self._streams.pop(s.handle, None)

    def _check_stream(self, stream) -> CudaStream:
        if stream is None:
            return self.default_stream
        if not isinstance(stream, CudaStream) or stream.device is not self:
            raise cuda_error("cudaErrorInvalidResourceHandle", f"{stream!r} is not a stream of this device ({self!r})")
        if stream.destroyed:
            raise cuda_error("cudaErrorInvalidResourceHandle", f"stream {stream.handle:#x} was destroyed")
        return stream

    def create_event(self, timing: bool = True) -> CudaEvent:
        """cuEventCreate (CU_EVENT_DISABLE_TIMING unless timing)."""
        flags = 0 if timing else int(self._drv.CUevent_flags.CU_EVENT_DISABLE_TIMING)
        cu = self._call(self._drv.cuEventCreate, flags, name="cuEventCreate", runtime=True)
        return CudaEvent(self, cu, bool(timing))

    def _check_event(self, event) -> CudaEvent:
        if not isinstance(event, CudaEvent) or event.device is not self:
            raise cuda_error("cudaErrorInvalidResourceHandle", f"{event!r} is not an event of this device ({self!r})")
        return event

    def wait_event(self, stream, event) -> None:
        """cuStreamWaitEvent."""
        self._call(self._drv.cuStreamWaitEvent, self._check_stream(stream)._cu,
                   self._check_event(event)._cu, 0, name="cuStreamWaitEvent", runtime=True)

    def synchronize(self) -> None:
        """cuCtxSynchronize (cudaDeviceSynchronize)."""
        self._call(self._drv.cuCtxSynchronize, name="cuCtxSynchronize", runtime=True)
        self._keep.clear()

    # ----------------------------------------------------------- kernels
    def fill(self, ptr: int, nbytes: int, value: int, stream=None) -> None:
        """cuMemsetD8Async."""
        check_count(nbytes, "fill")
        check_ptr(ptr, "fill")
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 255:
            raise cuda_error("cudaErrorInvalidValue", f"fill: value must be a byte 0..255, got {value!r}")
        s = self._check_stream(stream)
        self.counters.kernels += 1
        self._call(self._drv.cuMemsetD8Async, ptr, value, nbytes, s._cu, name="cuMemsetD8Async", runtime=True)

    def copy(self, dst: int, src: int, nbytes: int, stream=None) -> None:
        """cuMemcpyDtoDAsync."""
        check_count(nbytes, "copy")
        check_ptr(dst, "copy")
        check_ptr(src, "copy")
        s = self._check_stream(stream)
        self.counters.kernels += 1
        self._call(self._drv.cuMemcpyDtoDAsync, dst, src, nbytes, s._cu, name="cuMemcpyDtoDAsync", runtime=True)

    def write(self, ptr: int, data: bytes, stream=None) -> None:
        """cuMemcpyHtoDAsync of ``data`` (kept alive until the next synchronize)."""
        check_ptr(ptr, "write")
        try:
            payload = bytes(memoryview(data).cast("B"))
        except TypeError:
            raise cuda_error("cudaErrorInvalidValue", f"write: data must be bytes-like, got {type(data).__name__}") from None
        s = self._check_stream(stream)
        staging = ctypes.create_string_buffer(payload, len(payload))
        self._keep.append(staging)
        self.counters.kernels += 1
        self._call(self._drv.cuMemcpyHtoDAsync, ptr, ctypes.addressof(staging), len(payload), s._cu,
                   name="cuMemcpyHtoDAsync", runtime=True)

    def read(self, ptr: int, nbytes: int, stream=None) -> bytes:
        """cuMemcpyDtoHAsync on ``stream`` + cuStreamSynchronize."""
        check_count(nbytes, "read")
        check_ptr(ptr, "read")
        s = self._check_stream(stream)
        out = ctypes.create_string_buffer(max(nbytes, 1))
        self.counters.kernels += 1
        self._call(self._drv.cuMemcpyDtoHAsync, ctypes.addressof(out), ptr, nbytes, s._cu,
                   name="cuMemcpyDtoHAsync", runtime=True)
        self._call(self._drv.cuStreamSynchronize, s._cu, name="cuStreamSynchronize", runtime=True)
        return out.raw[:nbytes]

    def sleep(self, stream, microseconds: float) -> None:
        """A CuPy RawKernel spinning on clock64() for ``microseconds`` on ``stream``."""
        if isinstance(microseconds, bool) or not isinstance(microseconds, (int, float)) or not microseconds >= 0:
            raise cuda_error("cudaErrorInvalidValue", f"sleep: microseconds must be a number >= 0, got {microseconds!r}")
        s = self._check_stream(stream)
        cp = self._cupy
        if self._spin is None:
            self._spin = cp.RawKernel(_SPIN_SOURCE, "spin")
            self._clock_khz = self._attr("CU_DEVICE_ATTRIBUTE_CLOCK_RATE")
        cycles = int(microseconds * self._clock_khz / 1000)
        self.counters.kernels += 1
        with cp.cuda.ExternalStream(s.handle):
            self._spin((1,), (1,), (cp.int64(cycles),))

    # ------------------------------------------- stream-ordered allocation
    def malloc_async(self, nbytes: int, stream=None) -> int:
        """cuMemAllocAsync from the device's default pool."""
        check_size(nbytes, "malloc_async")
        s = self._check_stream(stream)
        self.counters.malloc_async_calls += 1
        ptr = int(self._call(self._drv.cuMemAllocAsync, nbytes, s._cu, name="cuMemAllocAsync", runtime=True))
        self._allocs[ptr] = (nbytes, "pool")
        self._freed.pop(ptr, None)
        return ptr

    def free_async(self, ptr: int, stream=None) -> None:
        """cuMemFreeAsync."""
        self._find_allocation(ptr, "free_async")
        s = self._check_stream(stream)
        self.counters.free_async_calls += 1
        self._call(self._drv.cuMemFreeAsync, ptr, s._cu, name="cuMemFreeAsync", runtime=True)
        self._forget(ptr)

    def _pool_attr(self, name: str):
        return getattr(self._drv.CUmemPool_attribute, name)

    def mempool_set_release_threshold(self, nbytes: int) -> None:
        """cuMemPoolSetAttribute(CU_MEMPOOL_ATTR_RELEASE_THRESHOLD)."""
        if isinstance(nbytes, bool) or not isinstance(nbytes, int) or nbytes < 0:
            raise cuda_error("cudaErrorInvalidValue", f"release threshold must be an int >= 0, got {nbytes!r}")
        value = self._drv.cuuint64_t(min(nbytes, 2**64 - 1))
        self._call(self._drv.cuMemPoolSetAttribute, self._pool,
                   self._pool_attr("CU_MEMPOOL_ATTR_RELEASE_THRESHOLD"), value,
                   name="cuMemPoolSetAttribute", runtime=True)

    def mempool_reserved(self) -> int:
        """cuMemPoolGetAttribute(CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT)."""
        value = self._call(self._drv.cuMemPoolGetAttribute, self._pool,
                           self._pool_attr("CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT"),
                           name="cuMemPoolGetAttribute", runtime=True)
        return int(value)

    def mempool_attribute(self, name: str) -> int:
        """cuMemPoolGetAttribute(name) of the default pool, e.g. "CU_MEMPOOL_ATTR_USED_MEM_HIGH"."""
        value = self._call(self._drv.cuMemPoolGetAttribute, self._pool, self._pool_attr(name),
                           name="cuMemPoolGetAttribute", runtime=True)
        return int(value)

    def mempool_reset_high_marks(self) -> None:
        """cuMemPoolSetAttribute(RESERVED_MEM_HIGH and USED_MEM_HIGH, 0): each drops to its current value."""
        for name in ("CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH", "CU_MEMPOOL_ATTR_USED_MEM_HIGH"):
            self._call(self._drv.cuMemPoolSetAttribute, self._pool, self._pool_attr(name),
                       self._drv.cuuint64_t(0), name="cuMemPoolSetAttribute", runtime=True)

    def mempool_trim_to(self, min_bytes_to_keep: int) -> None:
        """cuMemPoolTrimTo."""
        if isinstance(min_bytes_to_keep, bool) or not isinstance(min_bytes_to_keep, int) or min_bytes_to_keep < 0:
            raise cuda_error("cudaErrorInvalidValue", f"mempool_trim_to needs an int >= 0, got {min_bytes_to_keep!r}")
        self._call(self._drv.cuMemPoolTrimTo, self._pool, min_bytes_to_keep, name="cuMemPoolTrimTo", runtime=True)

    # -------------------------------------------------------------- VMM
    def _alloc_prop(self):
        drv = self._drv
        prop = drv.CUmemAllocationProp()
        prop.type = drv.CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_PINNED
        prop.location.type = drv.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
        prop.location.id = self.index
        # Ask for an exportable handle so mem_export_fd works (CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR).
        prop.requestedHandleTypes = drv.CUmemAllocationHandleType.CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
        return prop

    def _granularity(self) -> int:
        flag = self._drv.CUmemAllocationGranularity_flags.CU_MEM_ALLOC_GRANULARITY_MINIMUM
        return int(self._call(self._drv.cuMemGetAllocationGranularity, self._alloc_prop(), flag,
                              name="cuMemGetAllocationGranularity"))

    def vmm_granularity(self) -> int:
        """cuMemGetAllocationGranularity(MINIMUM)."""
        return self.info.vmm_granularity

    def _vmm_size(self, size, call: str) -> int:
        check_size(size, call, "CUDA_ERROR_INVALID_VALUE")
        check_aligned(size, self.info.vmm_granularity, "size", call)
        return size

    def address_reserve(self, size: int, alignment: int = 0) -> int:
        """cuMemAddressReserve(size, alignment, 0, 0)."""
        self._vmm_size(size, "address_reserve")
        self.counters.vmm_calls += 1
        return int(self._call(self._drv.cuMemAddressReserve, size, alignment, 0, 0, name="cuMemAddressReserve"))

    def address_free(self, ptr: int, size: int) -> None:
        """cuMemAddressFree."""
        check_ptr(ptr, "address_free", "CUDA_ERROR_INVALID_VALUE")
        self.counters.vmm_calls += 1
        self._call(self._drv.cuMemAddressFree, ptr, size, name="cuMemAddressFree")

    def mem_create(self, size: int) -> int:
        """cuMemCreate(size, prop, 0) -> physical handle."""
        self._vmm_size(size, "mem_create")
        self.counters.vmm_calls += 1
        handle = int(self._call(self._drv.cuMemCreate, size, self._alloc_prop(), 0, name="cuMemCreate"))
        self._handles[handle] = size
        return handle

    def mem_release(self, handle: int) -> None:
        """cuMemRelease (the memory lives on while mapped, as the CUDA docs say)."""
        if handle not in self._handles:
            raise cuda_error("CUDA_ERROR_INVALID_HANDLE", f"mem_release: {handle!r} is not a live "
                             "physical handle of this device (never created, or already released)")
        self.counters.vmm_calls += 1
        self._call(self._drv.cuMemRelease, handle, name="cuMemRelease")
        del self._handles[handle]

    def mem_map(self, ptr: int, size: int, handle: int, offset: int = 0) -> None:
        """cuMemMap(ptr, size, offset, handle, 0)."""
        check_ptr(ptr, "mem_map", "CUDA_ERROR_INVALID_VALUE")
        self._vmm_size(size, "mem_map")
        check_aligned(ptr, self.info.vmm_granularity, "address", "mem_map")
        self.counters.vmm_calls += 1
        self._call(self._drv.cuMemMap, ptr, size, offset, handle, 0, name="cuMemMap")

    def mem_unmap(self, ptr: int, size: int) -> None:
        """cuMemUnmap."""
        check_ptr(ptr, "mem_unmap", "CUDA_ERROR_INVALID_VALUE")
        self._vmm_size(size, "mem_unmap")
        self.counters.vmm_calls += 1
        self._call(self._drv.cuMemUnmap, ptr, size, name="cuMemUnmap")

    def mem_set_access(self, ptr: int, size: int) -> None:
        """cuMemSetAccess(ptr, size, [read/write for this device], 1)."""
        drv = self._drv
        check_ptr(ptr, "mem_set_access", "CUDA_ERROR_INVALID_VALUE")
        self._vmm_size(size, "mem_set_access")
        desc = drv.CUmemAccessDesc()
        desc.location.type = drv.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
        desc.location.id = self.index
        desc.flags = drv.CUmemAccess_flags.CU_MEM_ACCESS_FLAGS_PROT_READWRITE
        self.counters.vmm_calls += 1
        self._call(drv.cuMemSetAccess, ptr, size, [desc], 1, name="cuMemSetAccess")

    def mem_export_fd(self, handle: int) -> int:
        """cuMemExportToShareableHandle(POSIX_FILE_DESCRIPTOR) -> an fd the caller closes."""
        htype = self._drv.CUmemAllocationHandleType.CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
        self.counters.vmm_calls += 1
        return int(self._call(self._drv.cuMemExportToShareableHandle, handle, htype, 0,
                              name="cuMemExportToShareableHandle"))

    def mem_import_fd(self, fd: int) -> int:
        """cuMemImportFromShareableHandle(fd, POSIX_FILE_DESCRIPTOR) -> physical handle."""
        htype = self._drv.CUmemAllocationHandleType.CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
        self.counters.vmm_calls += 1
        handle = int(self._call(self._drv.cuMemImportFromShareableHandle, fd, htype,
                                name="cuMemImportFromShareableHandle"))
        self._handles[handle] = 0
        return handle

    # ------------------------------------------------- pinned host memory
    def host_alloc(self, nbytes: int, mapped: bool = True) -> HostBuffer:
        """cuMemHostAlloc(DEVICEMAP if mapped) + cuMemHostGetDevicePointer."""
        check_size(nbytes, "host_alloc")
        flags = self._drv.CU_MEMHOSTALLOC_DEVICEMAP if mapped else 0
        host_ptr = int(self._call(self._drv.cuMemHostAlloc, nbytes, flags, name="cuMemHostAlloc", runtime=True))
        dev_ptr = None
        if mapped:
            dev_ptr = int(self._call(self._drv.cuMemHostGetDevicePointer, host_ptr, 0,
                                     name="cuMemHostGetDevicePointer", runtime=True))
        view = memoryview((ctypes.c_char * nbytes).from_address(host_ptr)).cast("B")
        buf = HostBuffer(host=view, nbytes=nbytes, device_ptr=dev_ptr, registered=False, _owner=host_ptr)
        self._pinned[host_ptr] = buf
        return buf

    def host_free(self, buf: HostBuffer) -> None:
        """cuMemFreeHost."""
        if not isinstance(buf, HostBuffer) or self._pinned.get(buf._owner) is not buf or buf.registered:
            raise cuda_error("cudaErrorInvalidValue", "host_free: not a live host_alloc buffer of this device")
        buf.host.release()
        self._call(self._drv.cuMemFreeHost, buf._owner, name="cuMemFreeHost", runtime=True)
        del self._pinned[buf._owner]

    def host_register(self, buffer: bytearray) -> HostBuffer:
        """cuMemHostRegister(DEVICEMAP) + cuMemHostGetDevicePointer, on the bytearray's memory."""
        if not isinstance(buffer, bytearray):
            raise cuda_error("cudaErrorInvalidValue", f"host_register needs a bytearray, got {type(buffer).__name__}")
        check_size(len(buffer), "host_register")
        raw = (ctypes.c_char * len(buffer)).from_buffer(buffer)
        host_ptr = ctypes.addressof(raw)
        self._call(self._drv.cuMemHostRegister, host_ptr, len(buffer), self._drv.CU_MEMHOSTREGISTER_DEVICEMAP,
                   name="cuMemHostRegister", runtime=True)
        dev_ptr = int(self._call(self._drv.cuMemHostGetDevicePointer, host_ptr, 0,
                                 name="cuMemHostGetDevicePointer", runtime=True))
        buf = HostBuffer(host=memoryview(buffer), nbytes=len(buffer), device_ptr=dev_ptr,
                         registered=True, _owner=(host_ptr, raw))
        self._pinned[host_ptr] = buf
        return buf

    def host_unregister(self, buf: HostBuffer) -> None:
        """cuMemHostUnregister."""
        if not isinstance(buf, HostBuffer) or not buf.registered or self._pinned.get(buf._owner[0]) is not buf:
            raise cuda_error("cudaErrorInvalidValue", "host_unregister: not a live host_register buffer of this device")
        self._call(self._drv.cuMemHostUnregister, buf._owner[0], name="cuMemHostUnregister", runtime=True)
        del self._pinned[buf._owner[0]]
        buf.host.release()

    # -------------------------------------------------------------- IPC
    def ipc_get_mem_handle(self, ptr: int) -> bytes:
        """cuIpcGetMemHandle -> the 64 handle bytes."""
        size, kind = self._find_allocation(ptr, "ipc_get_mem_handle")
        if kind != "malloc":
            raise cuda_error("cudaErrorInvalidValue", "ipc_get_mem_handle: cudaMallocAsync pool memory "
                             "cannot use legacy IPC")
        handle = self._call(self._drv.cuIpcGetMemHandle, ptr, name="cuIpcGetMemHandle", runtime=True)
        return ctypes.string_at(handle.getPtr(), 64)

    def ipc_open_mem_handle(self, handle: bytes) -> int:
        """cuIpcOpenMemHandle(handle, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS)."""
        if not isinstance(handle, (bytes, bytearray)) or len(handle) != 64:
            raise cuda_error("cudaErrorInvalidValue", "ipc_open_mem_handle: a handle is 64 bytes from ipc_get_mem_handle")
        h = self._drv.CUipcMemHandle()
        ctypes.memmove(h.getPtr(), bytes(handle), 64)
        flags = self._drv.CUipcMem_flags.CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS
        ptr = int(self._call(self._drv.cuIpcOpenMemHandle, h, flags, name="cuIpcOpenMemHandle", runtime=True))
        self._ipc_opened[ptr] = self._ipc_opened.get(ptr, 0) + 1
        return ptr

    def ipc_close_mem_handle(self, ptr: int) -> None:
        """cuIpcCloseMemHandle."""
        if ptr not in self._ipc_opened:
            raise cuda_error("cudaErrorInvalidValue", f"ipc_close_mem_handle({ptr!r}): not a pointer "
                             "returned by ipc_open_mem_handle on this device")
        self._call(self._drv.cuIpcCloseMemHandle, ptr, name="cuIpcCloseMemHandle", runtime=True)
        self._ipc_opened[ptr] -= 1
        if not self._ipc_opened[ptr]:
            del self._ipc_opened[ptr]

    # ------------------------------------------------------------ close
    def close(self) -> None:
        """Free what this object still holds (allocations, pinned buffers, streams)."""
        if self._closed:
            return
        self._closed = True
        drv = self._drv
        drv.cuCtxSynchronize()
        for ptr in list(self._ipc_opened):
            drv.cuIpcCloseMemHandle(ptr)
        for ptr, (_, kind) in list(self._allocs.items()):
            drv.cuMemFree(ptr)
        for buf in list(self._pinned.values()):
            if buf.registered:
                drv.cuMemHostUnregister(buf._owner[0])
            else:
                buf.host.release()
                drv.cuMemFreeHost(buf._owner)
        for s in list(self._streams.values()):
            drv.cuStreamDestroy(s._cu)
        self._allocs.clear()
        self._pinned.clear()
        self._streams.clear()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()
