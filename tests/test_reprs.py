"""One-line reprs a learner sees in a notebook: what the object holds, measured from its state."""
from __future__ import annotations

import pytest

import allocator_ref as ar
from allocator_ref.device import SimDevice
from allocator_ref.policies import BFCAllocator, DirectAllocator, StreamOrderedAllocator

MiB = 1 << 20


def test_caching_allocator_repr_counts_segments_bytes_and_free_blocks():
    a = ar.CachingAllocator(SimDevice("tiny-1gb"))
    assert repr(a) == "CachingAllocator(sim-tiny-1gb (simulated): 0 segments, 0 bytes reserved, 0 bytes allocated, 0 free blocks)"
    x = a.malloc(5 * MiB)          # one 20 MiB segment, split: 5 MiB allocated + 15 MiB free
    assert repr(a) == ("CachingAllocator(sim-tiny-1gb (simulated): 1 segment, 20.00 MiB reserved, "
                       "5.00 MiB allocated, 1 free block)")
    a.free(x)
    assert "0 bytes allocated, 1 free block)" in repr(a)
    a.record_memory_history()
    repr(a)
    assert all(e["action"] != "snapshot" for e in a.trace.dicts())     # a repr leaves history alone
    a.close()


def test_block_pool_and_expandable_segment_reprs():
    a = ar.CachingAllocator(SimDevice("tiny-1gb"), "expandable_segments:True")
    x = a.malloc(5 * MiB)
    assert repr(a.device_allocator.large_blocks) == "BlockPool(large: 1 free block, 15.00 MiB free, 1 unmapped range)"
    assert repr(a.device_allocator.small_blocks) == "BlockPool(small: 0 free blocks, 0 bytes free, 0 unmapped ranges)"
    segment = a.device_allocator.expandable_segments_[0]
    assert repr(segment) == (f"ExpandableSegment(ptr={segment.ptr:#x}, 1 of {segment.max_handles} pages "
                             "of 20 MiB mapped, stream=0)")
    a.free(x)
    a.close()


@pytest.mark.parametrize("policy", [DirectAllocator, BFCAllocator, StreamOrderedAllocator])
def test_policy_reprs_say_what_is_live_and_when_closed(policy):
    p = policy(SimDevice("tiny-1gb"))
    x = p.malloc(3 * MiB)
    line = repr(p)
    assert line.startswith(f"{policy.__name__}(sim-tiny-1gb (simulated): 1 live, ")
    assert f"{ar.format_size(p.memory_allocated())} allocated" in line
    p.free(x)
    p.close()
    assert repr(p) == f"{policy.__name__}(sim-tiny-1gb (simulated): closed)"
