"""Allocators against a caller who pokes at what it was handed or builds them wrong
(issue 32, item 9): nothing leaked or handed out twice, and a bad constructor
argument is one clear error at construction, not at the first malloc."""
from __future__ import annotations

import pytest

from allocator_ref.caching import CachingAllocator
from allocator_ref.device import SimDevice
from allocator_ref.policies import BFCAllocator, StreamOrderedAllocator
from allocator_ref.policies.registry import get_policy, policy_names

MiB = 1 << 20
ALLOCATORS = tuple(get_policy(name).allocator_class() for name in policy_names())   # every registered design


@pytest.mark.parametrize("cls", ALLOCATORS, ids=lambda c: c.__name__)
def test_setting_freed_by_hand_does_not_make_free_refuse_a_live_allocation(cls):
    dev = SimDevice("h100-80gb")
    a = cls(dev)
    x = a.malloc(3 * MiB)
    y = a.malloc(MiB)
    x.freed = True                      # a caller "marking" it, or a typo for a check
    a.free(x)                           # still live to the allocator: really freed
    assert a.memory_allocated() == y.size and a.live_allocations() == [y]
    with pytest.raises(ValueError, match="double free"):
        a.free(x)
    y.freed = False
    a.free(y)
    y.freed = False                     # the other way round: a freed one "revived" by hand
    with pytest.raises(ValueError, match="not live|already freed"):
        a.free(y)
    assert a.memory_allocated() == 0 and a.live_allocations() == []
    a.empty_cache()
    assert a.memory_reserved() == 0
    z = a.malloc(3 * MiB)               # the memory is handed out once, to the next caller
    assert a.live_allocations() == [z]
    a.free(z)
    a.close() if hasattr(a, "close") else None
    dev.close()


@pytest.mark.parametrize("limit", [1, 255])
def test_a_bfc_limit_that_holds_nothing_is_refused_at_construction(limit):
    dev = SimDevice("h100-80gb")
    with pytest.raises(ValueError, match="256-byte smallest chunk"):
        BFCAllocator(dev, memory_limit=limit)
    a = BFCAllocator(dev, memory_limit=256)           # the smallest one that holds a chunk
    a.free(a.malloc(1))
    a.close()


@pytest.mark.parametrize("cls", ALLOCATORS, ids=lambda c: c.__name__)
@pytest.mark.parametrize("device", ["gpu", 0, object()], ids=["a name", "an index", "an object"])
def test_something_that_is_not_a_device_is_refused_at_construction(cls, device):
    with pytest.raises(TypeError, match="device must be a device") as err:
        cls(device)
    if device == "gpu":
        assert "open_device('gpu')" in str(err.value)


@pytest.mark.parametrize("cls", ALLOCATORS, ids=lambda c: c.__name__)
def test_changing_an_allocations_stream_does_not_move_its_free(cls):
    # A free ordered on another stream than the one the memory was used on would let that
    # stream reuse it while the first one's kernels still run (memory handed out twice).
    dev = SimDevice("h100-80gb")
    a = cls(dev)
    a.record_memory_history(enabled="all")
    side, other = dev.create_stream(), dev.create_stream()
    x = a.malloc(3 * MiB, side)
    dev.sleep(side, 1000.0)                         # side's kernel still uses x
    x.stream = other
    a.free(x)
    y = a.malloc(3 * MiB, other)
    if cls in (StreamOrderedAllocator, CachingAllocator):     # stream-aware designs
        assert y.ptr != x.ptr, "memory still in use on its stream was handed to another stream"
    frees = [e for e in a.trace.entries if e.action == "free_requested"]
    assert frees and all(e.stream == side.handle for e in frees), frees
    a.free(y)
    dev.synchronize()
    dev.close()


POLICIES = tuple(cls for cls in ALLOCATORS if cls is not CachingAllocator)


@pytest.mark.parametrize("cls", POLICIES, ids=lambda c: c.__name__)
@pytest.mark.parametrize("field, value", [("ptr", 0), ("ptr", 12345), ("allocator", None), ("size", 1),
                                          ("requested_size", 10**12)])
def test_no_field_of_a_live_allocation_changed_by_hand_leaks_it(cls, field, value):
    dev = SimDevice("h100-80gb")
    a = cls(dev)
    x = a.malloc(3 * MiB)
    setattr(x, field, value)
    a.free(x)                                    # the allocator's own record says what to free
    assert a.memory_allocated() == 0 and a.live_allocations() == []
    assert a.memory_stats()["requested_bytes.all.current"] == 0
    with pytest.raises(ValueError):
        a.free(x)                                # and it is not freed twice
    a.empty_cache()
    assert a.memory_reserved() == 0
    a.close()
    dev.close()
