"""Other allocator designs with the caching allocator's interface.

So that chapters, labs and the replay tool can run one workload through
several designs and compare them:

* :class:`DirectAllocator` -- cudaMalloc/cudaFree on every request (no cache);
* :class:`StreamOrderedAllocator` -- the cudaMallocAsync pool (release
  threshold, stream-ordered frees, three reuse policies);
* :class:`BFCAllocator` -- TensorFlow/XLA's best-fit with coalescing.

Each follows :class:`allocator_ref.allocation.Allocator`, records the same
trace events and fills only the ``memory_stats()`` keys it really tracks.
"""
from .bfc import BFCAllocator
from .direct import DirectAllocator
from .stream_ordered import StreamOrderedAllocator

__all__ = ["BFCAllocator", "DirectAllocator", "StreamOrderedAllocator"]
