"""CUDA errors as the device layer reports them.

Every device call that fails raises a :class:`CudaError` that names the CUDA
error it models (``cudaErrorMemoryAllocation``, ``CUDA_ERROR_NOT_MAPPED``...)
and says what it means, so a learner sees the same words a real GPU would
print.  The simulated device and the CUDA device raise the same classes.
"""
from __future__ import annotations

# name -> (numeric code, meaning).  Runtime (cudaError*) and driver (CUDA_ERROR_*)
# names both appear because the VMM calls are driver-API only.
CUDA_ERRORS: dict[str, tuple[int, str]] = {
    "cudaErrorInvalidValue": (1, "one or more of the parameters passed to the API call is not within an acceptable range of values"),
    "cudaErrorMemoryAllocation": (2, "out of memory: the API call failed because it was unable to allocate enough memory"),
    "cudaErrorInvalidDevicePointer": (17, "the device pointer passed to the API call is not a valid device pointer"),
    "cudaErrorInvalidResourceHandle": (400, "a resource handle passed to the API call was not valid (a stream or event that was destroyed, or belongs to another device)"),
    "cudaErrorNotReady": (600, "asynchronous operations issued previously have not completed yet"),
    "cudaErrorIllegalAddress": (700, "the device encountered a load or store instruction on an invalid memory address"),
    "cudaErrorNoDevice": (100, "no CUDA-capable device is detected"),
    "cudaErrorInsufficientDriver": (35, "the installed NVIDIA CUDA driver is older than the CUDA runtime library, or no driver is installed"),
    "cudaErrorInvalidDevice": (101, "the device ordinal supplied does not correspond to a valid CUDA device"),
    "cudaErrorMapBufferObjectFailed": (205, "the buffer object could not be mapped"),
    "cudaErrorInvalidResourceType": (101, "the resource type is not valid for this operation"),
    "cudaErrorDeviceUninitialized": (201, "the context or handle is not initialized or was already destroyed"),
    "CUDA_ERROR_INVALID_VALUE": (1, "one or more of the parameters passed to the API call is not within an acceptable range of values"),
    "CUDA_ERROR_OUT_OF_MEMORY": (2, "the API call failed because it was unable to allocate enough memory"),
    "CUDA_ERROR_NOT_MAPPED": (211, "a mapping operation was attempted on a range that is not mapped"),
    "CUDA_ERROR_ALREADY_MAPPED": (208, "the resource (or part of the address range) is already mapped"),
    "CUDA_ERROR_INVALID_HANDLE": (400, "a resource handle passed to the API call was not valid"),
    "CUDA_ERROR_ILLEGAL_ADDRESS": (700, "the device encountered a load or store on an address that is not mapped or has no access rights set"),
    "CUDA_ERROR_NOT_PERMITTED": (800, "the attempted operation is not permitted (for example releasing a handle that is still mapped)"),
    "CUDA_ERROR_NOT_SUPPORTED": (801, "the attempted operation is not supported on the current system or device"),
    "CUDA_ERROR_INVALID_CONTEXT": (201, "the context is not valid (for example it was destroyed when its process exited)"),
}


class CudaError(RuntimeError):
    """A failed device call, named after the CUDA error it models."""

    def __init__(self, name: str, detail: str = "") -> None:
        code, meaning = CUDA_ERRORS.get(name, (-1, "unknown CUDA error"))
        self.name = name
        self.code = code
        self.meaning = meaning
        self.detail = detail
        text = f"{name} ({code}): {meaning}"
        if detail:
            text += f". {detail}"
        super().__init__(text)


class CudaOutOfMemoryError(CudaError):
    """cudaMalloc / cuMemCreate / cudaMallocAsync found no room on the device.

    The allocator above catches this (PyTorch's ``cudaErrorMemoryAllocation``
    branch in ``alloc_block``) and walks its retry ladder; the device stays usable.
    """


def cuda_error(name: str, detail: str = "") -> CudaError:
    """Build the right CudaError subclass for ``name``."""
    if name in ("cudaErrorMemoryAllocation", "CUDA_ERROR_OUT_OF_MEMORY"):
        return CudaOutOfMemoryError(name, detail)
    return CudaError(name, detail)


def destroyed_stream_error(what: str, stream) -> CudaError:
    """The one error every allocator raises when asked to order work on a destroyed stream.

    CUDA answers ``cudaErrorInvalidResourceHandle`` for a stream after
    ``cudaStreamDestroy`` (PyTorch raises it as a RuntimeError, ``torch.AcceleratorError``).
    ``what`` names the call (``malloc``, ``record_stream``...).
    """
    handle = int(getattr(stream, "handle", 0) or 0)
    return CudaError("cudaErrorInvalidResourceHandle",
                     f"{what}: stream {handle:#x} was destroyed (cudaStreamDestroy); "
                     "work can no longer be ordered on it: use a live stream")
