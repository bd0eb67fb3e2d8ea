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


# ------------------------------------------------------- cudaMemPoolGetAttribute: the pool's own counters

def _weights_and_a_transient_peak(dev):
    """2 MiB kept, 3 x 2 MiB allocated beside it and freed: the pool holds 8 MiB, uses 2 MiB."""
    a = StreamOrderedAllocator(dev, chunk_bytes=2 * MiB)
    weights = a.malloc(2 * MiB)
    for x in [a.malloc(2 * MiB) for _ in range(3)]:
        a.free(x)
    a.synchronize()
    return a, weights


def test_pool_attributes_count_used_and_reserved_with_their_high_marks(dev):
    """CUDA runtime API, cudaMemPoolAttr: UsedMem is memory handed out, ReservedMem the backing the
    pool holds, each *High the maximum since the last reset; PyTorch's release threshold (UINT64_MAX,
    lazy_init_device) keeps the freed 6 MiB in the pool through the synchronize."""
    a, _ = _weights_and_a_transient_peak(dev)
    assert a.pool_attributes() == {
        "cudaMemPoolAttrUsedMemCurrent": 2 * MiB, "cudaMemPoolAttrUsedMemHigh": 8 * MiB,
        "cudaMemPoolAttrReservedMemCurrent": 8 * MiB, "cudaMemPoolAttrReservedMemHigh": 8 * MiB,
        "cudaMemPoolAttrReleaseThreshold": 2**64 - 1}
    a.set_release_threshold(0)
    assert a.get_pool_attribute("cudaMemPoolAttrReleaseThreshold") == 0


def test_memory_stats_under_the_async_backend_are_the_pool_attributes(dev):
    """CudaMallocAsyncAllocator::getDeviceStats: allocated and active bytes are UsedMemCurrent/High,
    reserved bytes ReservedMemCurrent/High."""
    a, _ = _weights_and_a_transient_peak(dev)
    stats, attrs = a.memory_stats(), a.pool_attributes()
    for kind, used_or_reserved in (("allocated_bytes", "Used"), ("active_bytes", "Used"),
                                   ("reserved_bytes", "Reserved")):
        assert stats[f"{kind}.all.current"] == attrs[f"cudaMemPoolAttr{used_or_reserved}MemCurrent"]
        assert stats[f"{kind}.all.peak"] == attrs[f"cudaMemPoolAttr{used_or_reserved}MemHigh"]


def test_resetting_the_high_marks_drops_each_to_its_current_value_and_a_trim_keeps_them(dev):
    """cudaMemPoolSetAttribute(*MemHigh, 0) resets a high mark to the current value (the only value
    the driver accepts; PyTorch's resetPeakStats); empty_cache is cudaDeviceSynchronize plus
    cudaMemPoolTrimTo(0), which releases unused backing but leaves the high marks alone."""
    a, weights = _weights_and_a_transient_peak(dev)
    a.reset_pool_high_marks()
    assert a.get_pool_attribute("cudaMemPoolAttrUsedMemHigh") == 2 * MiB
    assert a.get_pool_attribute("cudaMemPoolAttrReservedMemHigh") == 8 * MiB   # still held: current is 8
    a.empty_cache()
    assert a.get_pool_attribute("cudaMemPoolAttrReservedMemCurrent") == 2 * MiB  # only the weights' chunk
    assert a.get_pool_attribute("cudaMemPoolAttrReservedMemHigh") == 8 * MiB
    a.reset_pool_high_marks()
    assert a.get_pool_attribute("cudaMemPoolAttrReservedMemHigh") == 2 * MiB
    a.free(weights)


def test_an_unknown_pool_attribute_names_the_ones_that_exist(dev):
    a = StreamOrderedAllocator(dev)
    with pytest.raises(ValueError, match="unknown pool attribute 'UsedMemHigh': choose one of "
                                         "cudaMemPoolAttrUsedMemCurrent"):
        a.get_pool_attribute("UsedMemHigh")


def test_a_caching_only_knob_changes_nothing_under_the_async_backend(dev):
    """PyTorch's cudaMallocAsync backend never reads max_split_size_mb (CUDAMallocAsyncAllocator.cpp
    has no use of it); the registry builds the stream-ordered design without the config string."""
    figures = []
    for config in ("", "max_split_size_mb:128"):
        device = SimDevice("tiny-1gb")
        a = ar.make_allocator(device, "stream_ordered", config)
        x = a.malloc(200 * MiB)
        a.free(x)
        ys = [a.malloc(90 * MiB) for _ in range(2)]
        figures.append(a.pool_attributes())
        for y in ys:
            a.free(y)
        device.close()
    assert figures[0] == figures[1]
    assert figures[0]["cudaMemPoolAttrReservedMemHigh"] == 200 * MiB    # the 90s were carved from the 200


@pytest.mark.gpu
def test_the_real_driver_pool_reports_and_resets_its_high_marks():
    """On a GPU the attributes come from cuMemPoolGetAttribute: the high mark of used memory covers
    a freed 8 MiB allocation until cuMemPoolSetAttribute(USED_MEM_HIGH, 0) drops it to the current
    value (the driver's rounding may add a little to every figure)."""
    from conftest import open_kind
    gpu = open_kind("cuda")
    a = StreamOrderedAllocator(gpu)
    try:
        base = a.get_pool_attribute("cudaMemPoolAttrUsedMemCurrent")
        x = a.malloc(8 * MiB)
        a.free(x)
        a.synchronize()
        attrs = a.pool_attributes()
        assert attrs["cudaMemPoolAttrUsedMemHigh"] >= base + 8 * MiB
        assert attrs["cudaMemPoolAttrReservedMemCurrent"] >= 8 * MiB    # kept: threshold UINT64_MAX
        assert attrs["cudaMemPoolAttrReleaseThreshold"] == 2**64 - 1
        a.reset_pool_high_marks()
        after = a.pool_attributes()
        assert after["cudaMemPoolAttrUsedMemHigh"] == after["cudaMemPoolAttrUsedMemCurrent"]
    finally:
        a.close()
        gpu.close()
