"""One range the simulated device handed out (cudaMalloc or cudaMallocAsync).

Its own file so that ``device.py`` (the SimDevice) and ``pool.py`` (its cudaMallocAsync pool)
both import it from below instead of from each other.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass
class DeviceAllocation:
    """What the device remembers about one cudaMalloc / cudaMallocAsync range."""

    base: int
    size: int            # bytes asked for
    charged: int         # bytes counted against capacity (rounded)
    kind: str            # "malloc" or "pool"
    storage: object
    ipc_segment: object = None     # set once exported with ipc_get_mem_handle
