"""Where PyTorch 2.11 would hand out memory twice, the reference stops and says so.

``release_available_cached_blocks`` (``CUDACachingAllocator.cpp``) releases free
blocks of at least ``max_split_size`` with ``release_block``, which calls
``cudaFree(block->ptr)`` without asking whether the block is a whole segment.
With a fixed ``max_split_size`` it always is: a segment that was split never
has a free piece that large.  But ``max_split_size`` is read at every call
(``AcceleratorAllocatorConfig::max_split_size()``), so
``set_allocator_settings("max_split_size_mb:40")`` after a bigger segment was
split makes its free piece "oversize", and the next shortage frees it:

* piece at the segment's start: cudaFree returns the *whole* segment to the
  driver while other blocks in it are still allocated (use after free);
* piece further in: cudaFree fails with ``cudaErrorInvalidValue`` and the
  malloc raises a CUDA error.

The reference allocator reproduces the decision up to that point and raises
:class:`SplitSegmentReleaseError` instead; nothing has been freed by then.
"""
from __future__ import annotations

MiB = 1024 * 1024


class SplitSegmentReleaseError(RuntimeError):
    """PyTorch 2.11 would now cudaFree a block that is only part of a segment."""


def split_segment_release_error(block, max_split_size: int) -> SplitSegmentReleaseError:
    """The error for ``release_block`` asked to free ``block``, a piece of a split segment."""
    head = block
    while head.prev is not None:
        head = head.prev
    live, piece = 0, head
    while piece is not None:
        live += bool(piece.allocated)
        piece = piece.next
    if block.prev is None:
        harm = (f"cudaFree({block.ptr:#x}) would return the whole segment to the driver while "
                f"{live} allocation(s) in it are still live (PyTorch would hand that memory out twice)")
    else:
        harm = (f"cudaFree({block.ptr:#x}) is not the start of a segment, so it would fail with "
                f"cudaErrorInvalidValue and the malloc would raise a CUDA error")
    return SplitSegmentReleaseError(
        f"release_available_cached_blocks chose the free block at {block.ptr:#x} "
        f"({block.size / MiB:.2f} MiB), which is only part of the segment at {head.ptr:#x}: the "
        f"segment was split before max_split_size was lowered to {max_split_size // MiB} MiB. "
        f"PyTorch 2.11's release_block does not check for this: {harm}. The reference allocator "
        f"refuses instead and has freed nothing. Set max_split_size_mb before the first "
        f"allocation (PYTORCH_CUDA_ALLOC_CONF), not while segments are split.")
