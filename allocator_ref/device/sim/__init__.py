"""The simulated device, one idea per file.

* ``clock.py``          -- virtual host clock, streams, events, kernel effects in start order
* ``address_space.py``  -- where ranges go (best fit, O(log n))
* ``backing.py``        -- where bytes live (lazy 64 KiB pages, or a host/shared buffer)
* ``pagetable.py``      -- which storage answers for a device address; illegal-address checks
* ``device.py``         -- SimDevice: cudaMalloc/cudaFree, streams, events, kernels
* ``pool.py``           -- cudaMallocAsync and the default memory pool
* ``vmm.py``            -- cuMemAddressReserve / cuMemCreate / cuMemMap / cuMemSetAccess ...
* ``pinned.py``         -- pinned, mapped host memory (zero-copy)
* ``ipc.py``, ``shared_segment.py`` -- IPC between OS processes through shared memory
"""
from .device import SimCounters, SimDevice

__all__ = ["SimDevice", "SimCounters"]
