"""The device layer: the only thing allocators touch.

    from allocator_ref.device import open_device
    dev = open_device()          # SimDevice unless a GPU answers; prints which and why

* :mod:`.protocol` -- the ``Device`` protocol and its value types
* :mod:`.errors`   -- CudaError, named after the CUDA error it models
* :mod:`.sim`      -- SimDevice, the simulated GPU (virtual clock, cited costs, real bytes)
* :mod:`.cuda`     -- CudaDevice, the same calls on a real GPU (cuda-python + CuPy)
* :mod:`.costs`    -- profiles and the cost model, read from ``profiles/*.json``
* :mod:`.select`   -- open_device()

Importing this package never touches a GPU: cuda-python and CuPy are only
imported when a CudaDevice is opened.
"""
from __future__ import annotations

from .costs import CostModel, Profile, load_profile, profile_names
from .errors import CudaError, CudaOutOfMemoryError, cuda_error
from .protocol import Device, DeviceCounters, DeviceInfo, Event, HostBuffer, Stream
from .select import open_device
from .sim import SimCounters, SimDevice

__all__ = [
    "open_device", "SimDevice", "CudaDevice", "SimCounters",
    "Device", "DeviceInfo", "DeviceCounters", "Stream", "Event", "HostBuffer",
    "CudaError", "CudaOutOfMemoryError", "cuda_error",
    "CostModel", "Profile", "load_profile", "profile_names",
]


def __getattr__(name: str):
    if name == "CudaDevice":
        from .cuda import CudaDevice
        return CudaDevice
    raise AttributeError(f"module 'allocator_ref.device' has no attribute {name!r}")
