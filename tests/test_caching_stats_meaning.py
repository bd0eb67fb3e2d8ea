"""What a memory stat counts, where a learner could read it two ways (chapters 2, 4, 5, 7).

An expandable segment's maps are device calls but never segments, and empty_cache unmaps its
free pages even between live blocks; memory_reserved is what is held now and
max_memory_reserved its peak.  (How each stat moves, current/peak/allocated/freed, is
test_caching_stats_rule.py's subject.)  Every expected value comes from the rule named in the
test's docstring or comments.
"""
from __future__ import annotations

import pytest

import allocator_ref as ar
from allocator_ref.device import SimDevice

MiB = 1024**2


@pytest.fixture
def dev():
    device = SimDevice("tiny-1gb")
    yield device
    device.close()


# ------------------------------------------------------- expandable segments (chapters 2, 4, 5)

def test_expandable_maps_count_as_device_calls_but_never_as_segments(dev):
    """DeviceStats comments: num_device_alloc/free count cuMemMap/cuMemUnmap too; map_block adds
    no ``segment`` and expandable blocks are never ``inactive_split`` (CUDACachingAllocator.cpp)."""
    a = ar.CachingAllocator(dev, "expandable_segments:True")
    xs = [a.malloc(20 * MiB) for _ in range(3)]           # each maps one 20 MiB page
    stats = a.memory_stats()
    assert stats["num_device_alloc"] == 3 and stats["segment.all.current"] == 0
    a.free(xs[1])                                           # a hole between two live blocks
    assert a.memory_stats()["inactive_split.all.current"] == 0
    a.empty_cache()
    assert a.memory_stats()["num_device_free"] == 1         # the hole's page was unmapped
    for x in (xs[0], xs[2]):
        a.free(x)


def test_empty_cache_unmaps_free_pages_between_live_blocks(dev):
    """release_blocks -> unmap_block on every free expandable block, live neighbours or not:
    reserved 120 -> 60 MiB with three 20 MiB blocks still live and their bytes intact."""
    a = ar.CachingAllocator(dev, "expandable_segments:True")
    blocks = [a.malloc(20 * MiB) for _ in range(6)]
    for i, b in enumerate(blocks[1::2]):
        dev.fill(b.ptr, 16, 0x10 + i)
    for b in blocks[::2]:
        a.free(b)
    assert a.memory_reserved() == 120 * MiB                 # free alone unmaps nothing
    a.empty_cache()
    assert a.memory_reserved() == 60 * MiB
    assert [dev.read(b.ptr, 1)[0] for b in blocks[1::2]] == [0x10, 0x11, 0x12]


# ------------------------------------------------------- reserved now vs. its peak (chapters 2, 7)

def test_memory_reserved_is_the_present_and_max_memory_reserved_the_peak(dev):
    a = ar.CachingAllocator(dev)
    a.free(a.malloc(100 * MiB))
    a.empty_cache()
    assert a.memory_reserved() == 0                         # what is held now
    assert a.max_memory_reserved() == 100 * MiB             # the high-water mark
    a.reset_peak_memory_stats()
    assert a.max_memory_reserved() == 0
