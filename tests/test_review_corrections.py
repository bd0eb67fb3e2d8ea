"""The corrections of the expert review (issue 22), each tied to the code that shows it.

Every expected value comes from the rule named in the test's docstring (PyTorch's source or
NVIDIA's documentation), not from running the code under test.
"""
from __future__ import annotations

import pytest

import allocator_ref as ar
from allocator_ref.caching import OutOfMemoryError
from allocator_ref.device import SimDevice
from allocator_ref.policies import StreamOrderedAllocator

MiB = 1024**2


@pytest.fixture
def dev():
    device = SimDevice("tiny-1gb")
    yield device
    device.close()


def _freed_on_busy_stream(dev, **options):
    """A 2 MiB block (one whole 2 MiB chunk) freed on s1 while s1 still has 1 ms of work queued."""
    a = StreamOrderedAllocator(dev, chunk_bytes=2 * MiB, **options)
    s1, s2 = dev.create_stream(), dev.create_stream()
    x = a.malloc(2 * MiB, s1)
    dev.sleep(s1, 1000)
    a.free(x)
    return a, s1, s2, x.ptr


def _s2_is_held_back(dev, s2) -> bool:
    probe = dev.create_event()
    probe.record(s2)            # s2 had no work of its own: only an inserted wait can delay it
    return not probe.query()


# ------------------------------------------------------- cudaMemPoolReuseAllowInternalDependencies

def test_a_pool_with_room_grows_instead_of_inserting_a_wait(dev):
    """CUDA Programming Guide, Stream-Ordered Memory Allocator, reuse policies: the driver
    inserts a dependency only after it fails to allocate and map more physical memory."""
    a, s1, s2, ptr = _freed_on_busy_stream(dev)           # every reuse switch on (the default)
    y = a.malloc(2 * MiB, s2)
    assert y.ptr != ptr                                     # a new chunk, not the busy one
    assert a.memory_reserved() == 4 * MiB
    assert a.reuse_counts["internal_dependency"] == 0
    assert not _s2_is_held_back(dev, s2)                    # s2 runs beside s1


def test_a_full_device_makes_the_pool_wait_on_the_other_stream(dev):
    a, s1, s2, ptr = _freed_on_busy_stream(dev)
    dev.malloc(dev.mem_get_info()[0])                       # someone else takes every free byte
    y = a.malloc(2 * MiB, s2)
    assert y.ptr == ptr and a.memory_reserved() == 2 * MiB  # reused, nothing new reserved
    assert a.reuse_counts["internal_dependency"] == 1
    assert _s2_is_held_back(dev, s2)                        # ...at the price of s2 waiting for s1
    s1.synchronize()
    assert not _s2_is_held_back(dev, s2)


def test_without_internal_dependencies_a_full_device_is_an_oom(dev):
    a, s1, s2, ptr = _freed_on_busy_stream(dev, allow_internal_dependencies=False,
                                           allow_opportunistic=False)
    dev.malloc(dev.mem_get_info()[0])
    before = (a.memory_reserved(), len(a.live_allocations()))
    with pytest.raises(OutOfMemoryError, match="would exceed allowed memory"):
        a.malloc(2 * MiB, s2)
    assert (a.memory_reserved(), len(a.live_allocations())) == before   # nothing leaked


# ------------------------------------------------------- memory_stats() under cudaMallocAsync

def test_async_memory_stats_has_every_key_and_zeros_for_what_it_does_not_track(dev):
    """THCPModule_memoryStats builds the dict from a whole DeviceStats whatever the backend;
    CudaMallocAsyncAllocator::getDeviceStats fills six Stats and leaves the rest zeroed."""
    native = ar.CachingAllocator(SimDevice("tiny-1gb"))
    a = StreamOrderedAllocator(dev)
    x = a.malloc(1000)
    stats = a.memory_stats()
    assert list(stats) == list(native.memory_stats())      # the same 122 keys, same (sorted) order
    assert len(stats) == 122
    assert stats["allocated_bytes.all.current"] == 1024 and stats["reserved_bytes.all.current"] == 32 * MiB
    # the pool made a segment and an allocation, but those keys are not filled by the backend
    assert stats["segment.all.current"] == 0 and stats["allocation.all.current"] == 0
    assert stats["allocated_bytes.large_pool.current"] == 0 and stats["num_device_alloc"] == 0
    assert stats["max_split_size"] == 0                     # DeviceStats' default, not native's -1
    a.free(x)


def test_an_oom_under_the_async_backend_reads_zero_ooms(dev):
    """The trap: the dashboard shows "0 OOMs" right after one (num_ooms is never filled)."""
    a = StreamOrderedAllocator(dev)
    with pytest.raises(OutOfMemoryError):
        a.malloc(2 * 1024**3)                               # more than the 1 GiB device
    assert a.stats.num_ooms == 1                            # the model counted it...
    assert a.memory_stats()["num_ooms"] == 0                # ...PyTorch's backend reports 0


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


# ------------------------------------------------------- pinned host memory (chapter 1)

def test_cuda_free_host_waits_for_the_device_like_cuda_free():
    """CachingHostAllocator.h: the pinned cache exists to avoid "device synchronizations due to
    cudaFreeHost calls"; the simulated cudaFreeHost drains queued work first."""
    dev = SimDevice("h100-80gb")
    side = dev.create_stream()
    buf = dev.host_alloc(MiB)
    dev.sleep(side, 5000)                                   # 5 ms of unrelated work
    t0, syncs = dev.now_us(), dev.counters.implicit_syncs
    dev.host_free(buf)
    assert dev.counters.implicit_syncs == syncs + 1
    assert dev.now_us() - t0 >= 4000                        # most of the 5 ms was waited out
    dev.close()


def test_pinning_costs_grow_with_size():
    dev = SimDevice("h100-80gb")
    costs = []
    for n in (MiB, 64 * MiB):
        t0 = dev.now_us()
        buf = dev.host_alloc(n)
        costs.append(dev.now_us() - t0)
        dev.host_free(buf)
    assert costs[1] > 5 * costs[0]                          # 64x the bytes: many times the cost
    dev.close()
