"""Other allocator designs with the caching allocator's interface.

So that chapters, labs and the replay tool can run one workload through
several designs and compare them:

* :class:`DirectAllocator` -- cudaMalloc/cudaFree on every request (no cache);
* :class:`StreamOrderedAllocator` -- the cudaMallocAsync pool (release
  threshold, stream-ordered frees, three reuse policies);
* :class:`BFCAllocator` -- TensorFlow/XLA's best-fit with coalescing.

Each follows :class:`allocator_ref.allocation.Allocator`, records the same
trace events and fills only the ``memory_stats()`` keys it really tracks, and
checks its calls at the same front door as the caching allocator
(``allocator_ref/front_door.py``).  ``registry.py`` names every design once
(the caching one included): ``make_allocator(device, "bfc")``, ``policy_names()``.
"""
from .bfc import BFCAllocator
from .direct import DirectAllocator
from .registry import make_allocator, policy_names, register
from .stream_ordered import StreamOrderedAllocator

__all__ = ["BFCAllocator", "DirectAllocator", "StreamOrderedAllocator", "make_allocator", "policy_names",
           "register"]
