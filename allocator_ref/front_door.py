"""The front door: the checks every allocator runs on a call before it changes anything.

``CachingAllocator`` and every policy (``allocator_ref.policies``) call these same functions, so
one misuse raises one exception type, with the same words, whichever design is behind it, and
nothing (statistics, live set, trace) has changed when it does.  One misuse, one type:

==============================================  ===================================================
misuse                                          raised
==============================================  ===================================================
a size that is not an int (1.5, "10", None)     ``TypeError``
a negative size                                 ``ValueError``
a stream of another device                      :class:`ForeignStreamError` (a ``CudaError``)
a destroyed stream                              ``CudaError`` (``destroyed_stream_error``)
something that is neither an Allocation nor     ``TypeError``
an int pointer
a pointer that is not live here: double free,   :class:`InvalidPointerError` (a ``RuntimeError``)
another allocator's, record_stream after free,
an unknown int
==============================================  ===================================================

A request no GPU could hold is not refused here: each design answers it as out of memory
(``OutOfMemoryError``, PyTorch's ``torch.OutOfMemoryError``), with its own message.

Which type, and why (PyTorch 2.11, read in pytorch/pytorch):

* A size goes through ``PyLong_AsSsize_t`` in ``THCPModule_cudaCachingAllocator_raw_alloc``
  (torch/csrc/cuda/Module.cpp), which raises ``TypeError`` for anything not an int.  A negative
  size is a ``ValueError("Invalid memory size")``, what PyTorch's own test expects (test_cuda.py,
  ``test_caching_allocator_alloc_negative_size``, restated in tests/test_pytorch_restated_cuda.py).
* A bare int *is* a pointer in PyTorch's own API: ``torch.cuda.caching_allocator_delete(mem_ptr)``
  (torch/cuda/memory.py) hands it to ``raw_delete`` (``THCPModule_cudaCachingAllocator_raw_delete``,
  ``PyLong_AsVoidPtr``), so every allocator here accepts the int ``ptr`` of a live allocation.
* A pointer the allocator does not hold: ``NativeCachingAllocator::free`` in
  c10/cuda/CUDACachingAllocator.cpp does ``TORCH_CHECK(false, "invalid device pointer: ", ptr)``
  and ``recordStream`` ``TORCH_INTERNAL_ASSERT(block != nullptr, "No allocated block can be
  found")``: both are ``c10::Error``, a ``RuntimeError`` in Python.  InvalidPointerError is that
  RuntimeError; it is also a ``ValueError``, the type this course's allocators raised for it
  before they shared one front door, so code written against either keeps working.
* A stream handle CUDA does not accept here (another device's, a destroyed one) is CUDA's
  ``cudaErrorInvalidResourceHandle``; ``C10_CUDA_CHECK`` raises CUDA errors as
  ``torch.AcceleratorError``, a ``RuntimeError``: here a ``CudaError`` (a RuntimeError).
  ForeignStreamError is also a ``ValueError`` for the same reason as above.
"""
from __future__ import annotations

from typing import Any, Optional

from .allocation import Allocation
from .device.errors import CudaError, destroyed_stream_error


class InvalidPointerError(RuntimeError, ValueError):
    """PyTorch's ``invalid device pointer``: free or record_stream of something not live here."""


class ForeignStreamError(CudaError, ValueError):
    """``cudaErrorInvalidResourceHandle`` for a stream created by another device than the allocator's."""

    def __init__(self, what: str, stream: Any) -> None:
        super().__init__("cudaErrorInvalidResourceHandle",
                         f"{what}: stream {stream!r} belongs to another device than the allocator's; "
                         "create it with allocator.device.create_stream()")


# ------------------------------------------------------------------------------ sizes

def check_request_size(nbytes: Any) -> int:
    """``nbytes`` itself when it is a size a malloc accepts (0 included: a null allocation).

    Not the device's ``check_size`` (device/sim/checks.py), which checks a cudaMalloc argument
    and answers with a CUDA error: this one checks what a caller asks the allocator for."""
    if isinstance(nbytes, bool) or not isinstance(nbytes, int):
        raise TypeError(f"Invalid memory size: expected an int number of bytes, "
                        f"got {type(nbytes).__name__} {nbytes!r}")
    if nbytes < 0:
        raise ValueError(f"Invalid memory size: {nbytes} bytes is negative (a size must be >= 0 bytes)")
    return nbytes


# ------------------------------------------------------------------------------ streams

def stream_is_destroyed(stream: Any) -> bool:
    """True when ``cudaStreamDestroy`` was called on ``stream``.

    The device protocol's streams carry a ``destroyed`` flag; a stream without one is asked the
    way CUDA would answer: a destroyed stream fails ``cudaStreamQuery`` with
    ``cudaErrorInvalidResourceHandle``.
    """
    flag = getattr(stream, "destroyed", None)
    if isinstance(flag, bool):
        return flag
    try:
        stream.query()
    except CudaError as err:
        return err.name in ("cudaErrorInvalidResourceHandle", "CUDA_ERROR_INVALID_HANDLE",
                            "cudaErrorContextIsDestroyed")
    return False


def resolve_stream(device: Any, stream: Any, what: str) -> Any:
    """The stream a call runs on: ``None`` is the default stream (PyTorch's current stream);
    a stream must be ``device``'s and alive."""
    if stream is None:
        return device.default_stream
    if getattr(stream, "device", None) is not device:
        raise ForeignStreamError(what, stream)
    flag = getattr(stream, "destroyed", None)       # read here, not in a call: every malloc passes
    if flag is True or (flag is None and stream_is_destroyed(stream)):
        raise destroyed_stream_error(what, stream)
    return stream


# ------------------------------------------------------------------------------ pointers

def live_allocation(live: dict, owner: Any, allocation: Any, what: str) -> Optional[Allocation]:
    """The live Allocation ``allocation`` names (an Allocation, or its int ``ptr``), else one error.

    ``live`` maps each pointer handed out to its Allocation (PyTorch's ``allocated_blocks``);
    ``owner`` is the allocator every Allocation it made names.  The allocator's own record
    decides, not the fields a caller can change: ``ptr``, ``freed`` and ``stream`` are the
    caller's to read.  Returns None for a null pointer (a zero-byte allocation, or 0): nothing
    to free, as ``free(nullptr)`` in PyTorch.
    """
    if isinstance(allocation, Allocation):
        block = allocation._block
        key = allocation.ptr if block is None else block.ptr
        if key and live.get(key) is allocation:
            return allocation                     # the usual case: a live allocation of ours
        if allocation.allocator is not owner:
            raise InvalidPointerError(
                f"{what}: invalid device pointer {allocation.ptr:#x}: it belongs to another allocator "
                f"({type(allocation.allocator).__name__}); give it back to the allocator that made it")
        if block is None and not allocation.ptr:
            return None                           # a null allocation
        if allocation.freed:
            raise InvalidPointerError(f"{what}: invalid device pointer {allocation.ptr:#x}: "
                                      "it was already freed (double free)")
        raise InvalidPointerError(f"{what}: invalid device pointer {allocation.ptr:#x}: it is not live "
                                  "in this allocator (already freed?)")
    if isinstance(allocation, int) and not isinstance(allocation, bool):
        if allocation == 0:
            return None
        found = live.get(allocation)
        if found is None:
            raise InvalidPointerError(f"{what}: invalid device pointer {allocation:#x}: not a live "
                                      "allocation of this allocator (already freed, or another's?)")
        return found
    raise TypeError(f"{what}: expected an Allocation returned by malloc (or its int ptr), "
                    f"got {type(allocation).__name__}")
