"""The stream-ordered backend (cudaMallocAsync) as NVIDIA and PyTorch document it: when the pool
inserts a wait instead of growing (cudaMemPoolReuseAllowInternalDependencies), and what
memory_stats() reads under backend:cudaMallocAsync.

Every expected value comes from the rule named in the test's docstring (PyTorch's source or
NVIDIA's documentation), not from running the code under test (moved from the expert review's
grab bag, issue 22).
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
