"""Every allocator design by name, once: the list the CLI, replay, the what-if table and the tests read.

A new design is its own file plus one ``register`` line at the bottom of this file::

    register("toy", "allocator_ref.policies.toy:ToyAllocator", "what it does, in one line")

and then ``python -m allocator_ref replay --policy toy`` runs it, ``compare`` adds it to its
what-if table, and the tests that loop over every policy include it.  The class is named as
``"module:Class"`` and imported when first built, so registering imports nothing.

``make_allocator`` builds any of them, the way PyTorch picks its allocator: with no policy
named, the environment decides (``PYTORCH_CUDA_ALLOC_CONF``'s ``backend``, read once as
``c10::cuda::CUDACachingAllocator`` does when it loads).
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Optional

from ..caching.backend import get_allocator_backend
from ..device import open_device


@dataclass(frozen=True)
class Policy:
    """One registered design: its name, where its class lives, what it is in one line."""

    name: str
    target: Any               # "package.module:Class", or the class itself
    summary: str = ""
    # True for the designs PyTorch configures with PYTORCH_CUDA_ALLOC_CONF (the caching
    # allocator): they get ``config``.  The others take their own options from their class
    # (StreamOrderedAllocator(dev, release_threshold=0)); a PYTORCH_CUDA_ALLOC_CONF string is
    # not theirs to read (PyTorch's cudaMallocAsync backend reads no other key either).
    reads_alloc_conf: bool = False

    def allocator_class(self) -> type:
        """The class, imported on first use."""
        if not isinstance(self.target, str):
            return self.target
        module, _, name = self.target.partition(":")
        return getattr(importlib.import_module(module), name)

    def build(self, device: Any, config: Optional[str] = None) -> Any:
        """A fresh allocator of this design on ``device``."""
        cls = self.allocator_class()
        if not self.reads_alloc_conf:
            return cls(device)
        if config is None:
            return cls(device, read_env=True)        # PyTorch reads the environment variable
        return cls(device, config)


_POLICIES: dict[str, Policy] = {}


def register(name: str, target: Any, summary: str = "", *, reads_alloc_conf: bool = False) -> Policy:
    """Name a design once; every tool that lists designs finds it (in registration order)."""
    if not isinstance(name, str) or not name.isidentifier():
        raise ValueError(f"a policy name must be one word (letters, digits, _), got {name!r}")
    if name in _POLICIES:
        raise ValueError(f"policy {name!r} is already registered ({_POLICIES[name].target}); "
                         "pick another name or unregister it first")
    policy = _POLICIES[name] = Policy(name, target, summary, reads_alloc_conf)
    return policy


def unregister(name: str) -> None:
    """Forget a design (tests register throwaway ones and take them back)."""
    _POLICIES.pop(name, None)


def policy_names() -> tuple[str, ...]:
    """Every registered design, in registration order (the CLI's ``--policy`` choices)."""
    return tuple(_POLICIES)


def get_policy(name: str) -> Policy:
    """The registered design called ``name``, or one line saying which names exist."""
    try:
        return _POLICIES[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown policy {name!r}: choose one of {', '.join(_POLICIES)}") from None


def environment_policy() -> str:
    """The design PyTorch would load: ``backend:cudaMallocAsync`` in PYTORCH_CUDA_ALLOC_CONF
    picks the stream-ordered one, anything else the native caching allocator."""
    return "stream_ordered" if get_allocator_backend() == "cudaMallocAsync" else "caching"


def make_allocator(device: Any = None, policy: Optional[str] = None, config: Optional[str] = None) -> Any:
    """A fresh allocator: the design called ``policy`` on ``device``, configured by ``config``.

    ``device`` None opens the course's device (``open_device()``); ``policy`` None is the one the
    environment selects (``environment_policy``); ``config`` is a PYTORCH_CUDA_ALLOC_CONF string
    for the designs that read one, None meaning the environment's, as PyTorch reads it.
    """
    entry = get_policy(environment_policy() if policy is None else policy)
    if device is None:
        device = open_device()
    return entry.build(device, config)


# ------------------------------------------------------------------ the designs, one line each
register("caching", "allocator_ref.caching.allocator:CachingAllocator",
         "PyTorch's native CUDA caching allocator", reads_alloc_conf=True)
register("stream_ordered", "allocator_ref.policies.stream_ordered:StreamOrderedAllocator",
         "cudaMallocAsync's pool (PyTorch's backend:cudaMallocAsync)")
register("bfc", "allocator_ref.policies.bfc:BFCAllocator", "TensorFlow/XLA's best-fit with coalescing")
register("direct", "allocator_ref.policies.direct:DirectAllocator", "cudaMalloc/cudaFree on every request")
register("npu", "allocator_ref.caching.npu.allocator:NPUCachingAllocator",
         "torch_npu's NPUCachingAllocator (Ascend NPUs, PYTORCH_NPU_ALLOC_CONF)", reads_alloc_conf=True)


# The settings of the caching allocator that compare, predict and the what-if tables try; every
# other registered design follows them with its defaults.
CACHING_WHAT_IFS = ("", "expandable_segments:True", "max_split_size_mb:128", "roundup_power2_divisions:4")


def what_if_designs(recorded: str = "caching") -> list[tuple[str, str]]:
    """The what-if rows, as (policy, config): the design that recorded the run (PyTorch's caching
    allocator, or torch_npu's ``npu``: the same knobs) under each setting of CACHING_WHAT_IFS (the
    first, "", is the recorded default), then every other design of this registry with its
    defaults. A design registered here appears in every what-if table."""
    return [(recorded, c) for c in CACHING_WHAT_IFS] + [(p, "") for p in policy_names() if p != recorded]
