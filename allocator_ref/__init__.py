"""allocator_ref: a GPU memory allocator course's reference package.

    import allocator_ref as ar
    dev = ar.open_device()                       # simulated unless a GPU answers (it says which)
    a = ar.CachingAllocator(dev, "max_split_size_mb:40")   # PyTorch 2.11's native allocator
    x = a.malloc(5 * 2**20); a.free(x); print(a.memory_summary())

Layers (see ARCHITECTURE in the course README): ``device`` underneath,
``caching`` and ``policies`` above it, ``trace`` and ``viz`` beside them,
``labs`` for grading.  Names are imported lazily so that ``import
allocator_ref`` stays fast in a notebook's first cell.
"""
from __future__ import annotations

import importlib
import types

__version__ = "0.1.0"

# public name -> module that defines it
_EXPORTS = {
    # the device layer
    "open_device": "allocator_ref.device",
    "SimDevice": "allocator_ref.device",
    "CudaDevice": "allocator_ref.device",
    "CudaError": "allocator_ref.device.errors",
    "CudaOutOfMemoryError": "allocator_ref.device.errors",
    "DeviceInfo": "allocator_ref.device.protocol",
    # allocators
    "Allocation": "allocator_ref.allocation",
    "CachingAllocator": "allocator_ref.caching",
    "OutOfMemoryError": "allocator_ref.caching",
    "AllocatorConfig": "allocator_ref.caching",
    "format_size": "allocator_ref.caching",
    # pools a program owns (chapter 8)
    "MemPool": "allocator_ref.caching",
    "use_mem_pool": "allocator_ref.caching",
    "graph_pool_handle": "allocator_ref.caching",
    "PluggableAllocator": "allocator_ref.caching",
    "CUDAGraph": "allocator_ref.caching",
    "graph": "allocator_ref.caching",
    "DirectAllocator": "allocator_ref.policies",
    "StreamOrderedAllocator": "allocator_ref.policies",
    "BFCAllocator": "allocator_ref.policies",
    "get_allocator_backend": "allocator_ref.caching",
    "make_allocator": "allocator_ref.policies.registry",     # any design by name, or the environment's
    "policy_names": "allocator_ref.policies.registry",
    "SplitSegmentReleaseError": "allocator_ref.caching",
    "AllocatorConfigWarning": "allocator_ref.caching",
    # traces and snapshots
    "TraceEntry": "allocator_ref.trace",
    "load_snapshot": "allocator_ref.trace",
    "save_snapshot": "allocator_ref.trace",
    "replay": "allocator_ref.trace.replay",     # the function (the submodule of that name shadows trace.replay)
    "doctor": "allocator_ref.memory_doctor",
    "check_stats_consistency": "allocator_ref.caching",
    # VMM teaching API
    "GrowableBuffer": "allocator_ref.vmm",
}

__all__ = sorted(_EXPORTS) + ["__version__"]


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'allocator_ref' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    if isinstance(value, types.ModuleType):     # a submodule shadowed the name: never hand that out
        raise ImportError(f"allocator_ref.{name} resolved to the module {value.__name__}; "
                          f"_EXPORTS must name the module that defines {name!r}")
    globals()[name] = value
    return value


def __dir__():
    return __all__
