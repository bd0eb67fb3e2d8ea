"""Argument checks shared by the simulated device's calls.

Each check raises the CudaError the real call would return and names the
bad value, so that a learner reading the message knows what to fix.  They
run before any state changes: a rejected call leaves the device as it was.
"""
from __future__ import annotations

from ..errors import cuda_error

MAX_SIZE = 1 << 60     # "absurd": bigger than any address space a GPU has


def check_size(nbytes, call: str, error: str = "cudaErrorInvalidValue") -> int:
    """A size must be a positive int no larger than 2**60."""
    if isinstance(nbytes, bool) or not isinstance(nbytes, int):
        raise cuda_error(error, f"{call}: size must be an int number of bytes, got {nbytes!r} "
                                f"({type(nbytes).__name__})")
    if nbytes <= 0:
        raise cuda_error(error, f"{call}: size must be positive, got {nbytes}")
    if nbytes > MAX_SIZE:
        raise cuda_error(error, f"{call}: size {nbytes} is absurd (more than 2**60 bytes)")
    return nbytes


def check_ptr(ptr, call: str, error: str = "cudaErrorInvalidValue") -> int:
    if isinstance(ptr, bool) or not isinstance(ptr, int) or ptr < 0:
        raise cuda_error(error, f"{call}: a device pointer must be a non-negative int, got {ptr!r}")
    return ptr


def check_count(nbytes, call: str) -> int:
    """A byte count for a kernel: an int >= 0 (0 is a legal no-op, as for cudaMemsetAsync)."""
    if isinstance(nbytes, bool) or not isinstance(nbytes, int) or nbytes < 0 or nbytes > MAX_SIZE:
        raise cuda_error("cudaErrorInvalidValue",
                         f"{call}: byte count must be an int between 0 and 2**60, got {nbytes!r}")
    return nbytes


def check_aligned(value: int, granularity: int, what: str, call: str) -> None:
    if value % granularity:
        raise cuda_error("CUDA_ERROR_INVALID_VALUE",
                         f"{call}: {what} {value:#x} is not a multiple of the "
                         f"{granularity >> 20} MiB granularity (cuMemGetAllocationGranularity)")
