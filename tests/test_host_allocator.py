"""The pinned host allocator model (``allocator_ref/caching/host_allocator.py``) against PyTorch 2.11's rules.

Sources: ``CachingHostAllocatorImpl`` (``aten/src/ATen/core/CachingHostAllocator.h``: allocate,
free, record_event, empty_cache, getStats), the CUDA specialisation
(``aten/src/ATen/cuda/CachingHostAllocator.cpp``: allocate_host_memory, free_block,
get_reserve_segment) and ``torch/cuda/memory.py`` (``host_memory_stats``, its documented keys).
"""
from __future__ import annotations

import pytest

import allocator_ref as ar
from allocator_ref.caching import CachingHostAllocator
from allocator_ref.caching.host_allocator import power_of_two_ceil

MiB = 1 << 20


@pytest.fixture
def dev():
    device = ar.SimDevice("h100-80gb")
    yield device
    device.close()


def test_a_request_is_rounded_up_to_a_power_of_two(dev):
    h = CachingHostAllocator(dev)
    assert [power_of_two_ceil(n) for n in (1, 2, 3, 4096, 4097)] == [1, 2, 4, 4096, 8192]
    b = h.allocate(33 * MiB)
    assert (b.size, b.requested_size, len(b.host)) == (64 * MiB, 33 * MiB, 64 * MiB)
    assert h.allocate(64 * MiB).size == 64 * MiB          # already a power of two: kept
    assert h.allocate(0) is None                           # PyTorch: {nullptr, nullptr}
    assert h.host_memory_stats()["allocated_bytes.current"] == 128 * MiB


def test_a_free_block_serves_any_request_that_rounds_to_its_size(dev):
    h = CachingHostAllocator(dev)
    b = h.allocate(33 * MiB)
    h.free(b)
    again = h.allocate(60 * MiB)                           # also rounds to 64 MiB
    assert again is b
    assert h.host_memory_stats()["num_host_alloc"] == 1
    assert h.allocate(30 * MiB) is not b                   # rounds to 32 MiB: another list


def test_a_block_is_reused_only_after_the_events_of_its_streams_completed(dev):
    h = CachingHostAllocator(dev)
    b = h.allocate(4 * MiB)
    copier = dev.create_stream()
    dev.sleep(copier, 1000)                                # the non_blocking copy still queued
    assert h.record_event(b, copier) is True
    h.free(b)
    early = h.allocate(4 * MiB)
    assert early is not b, "reused while the copy that reads it had not run"
    assert h.host_memory_stats()["num_host_alloc"] == 2
    copier.synchronize()
    assert h.allocate(4 * MiB) is b                        # its event completed: reusable
    assert h.host_memory_stats()["num_host_alloc"] == 2


def test_every_stream_must_finish(dev):
    h = CachingHostAllocator(dev)
    b = h.allocate(MiB)
    fast, slow = dev.create_stream(), dev.create_stream()
    dev.sleep(slow, 2000)
    h.record_event(b, fast)
    h.record_event(b, slow)
    h.free(b)
    assert h.allocate(MiB) is not b
    slow.synchronize()
    assert h.allocate(MiB) is b


def test_record_event_on_a_block_from_elsewhere_says_false(dev):
    h, other = CachingHostAllocator(dev), CachingHostAllocator(dev)
    assert h.record_event(other.allocate(MiB), dev.default_stream) is False


# torch.cuda.host_memory_stats() in 2.11: the four Stats of HostStats (allocations, allocated_bytes,
# active_requests, active_bytes; each current/peak/allocated/freed), the two DurationStats
# (host_alloc_time, host_free_time; total/max/min/count/avg) and num_host_alloc / num_host_free,
# as torch/cuda/memory.py's host_memory_stats docstring lists them and the dict is flattened there.
TORCH_211_HOST_STATS_KEYS = sorted(
    [f"{stat}.{kind}" for stat in ("allocations", "allocated_bytes", "active_requests", "active_bytes")
     for kind in ("current", "peak", "allocated", "freed")]
    + [f"{stat}.{kind}" for stat in ("host_alloc_time", "host_free_time")
       for kind in ("total", "max", "min", "count", "avg")]
    + ["num_host_alloc", "num_host_free"])


def test_host_memory_stats_has_pytorch_211_keys_sorted(dev):
    stats = CachingHostAllocator(dev).host_memory_stats()
    assert list(stats) == TORCH_211_HOST_STATS_KEYS
    assert len(stats) == 28


def test_stats_follow_owned_and_active_blocks(dev):
    h = CachingHostAllocator(dev)
    a, b = h.allocate(3 * MiB), h.allocate(5 * MiB)        # 4 MiB and 8 MiB blocks
    h.free(a)
    s = h.host_memory_stats()
    assert (s["allocations.current"], s["allocated_bytes.current"]) == (2, 12 * MiB)
    assert (s["active_requests.current"], s["active_bytes.current"]) == (1, 8 * MiB)
    assert s["host_alloc_time.count"] == 2 and s["host_alloc_time.total"] > 0   # the device's clock


def test_empty_cache_gives_back_free_blocks_only(dev):
    h = CachingHostAllocator(dev)
    kept, cached, waiting = h.allocate(MiB), h.allocate(2 * MiB), h.allocate(4 * MiB)
    s2 = dev.create_stream()
    dev.sleep(s2, 1000)
    h.record_event(waiting, s2)
    h.free(cached)
    h.free(waiting)
    h.empty_cache()
    s = h.host_memory_stats()
    assert (s["num_host_free"], s["allocations.current"]) == (1, 2)     # only `cached` went back
    assert s["host_free_time.count"] == 1
    s2.synchronize()
    h.empty_cache()                                         # its event completed: now it goes too
    s = h.host_memory_stats()
    assert (s["num_host_free"], s["allocated_bytes.current"]) == (2, MiB)
    assert h.allocate(MiB) is not kept                      # kept is still in use


def test_reserve_segment_saves_pinning_calls_not_rounding(dev):
    h = CachingHostAllocator(dev, "pinned_reserve_segment_size_mb:256")
    calls = dev.counters.host_alloc_calls
    blocks = [h.allocate(33 * MiB) for _ in range(5)]
    assert [b.size for b in blocks] == [64 * MiB] * 5
    assert h.reserve_segment_used == 256 * MiB             # four 64 MiB slices fill it
    assert dev.counters.host_alloc_calls - calls == 2       # the segment, then the fifth block
    for b in blocks:
        h.free(b)
    h.empty_cache()
    assert dev.counters.host_alloc_calls - calls == 2
    assert h.host_memory_stats()["num_host_free"] == 5     # counted as frees ...
    h.allocate(33 * MiB)
    assert h.reserve_segment_used == 256 * MiB             # ... but the slices are never handed out again
    assert dev.counters.host_alloc_calls - calls == 3


def test_cuda_host_register_pins_with_host_register(dev):
    h = CachingHostAllocator(dev, "pinned_use_cuda_host_register:True")
    b = h.allocate(3000)
    assert b.size == 4096 and b._buffer.registered
    h.free(b)
    h.empty_cache()
    assert h.host_memory_stats()["num_host_free"] == 1


def test_bad_input_gets_a_clear_error(dev):
    h = CachingHostAllocator(dev)
    b = h.allocate(MiB)
    h.free(b)
    with pytest.raises(ValueError, match="already freed"):
        h.free(b)
    with pytest.raises(ValueError, match="byte count"):
        h.allocate(-1)
    with pytest.raises(TypeError, match="pinned_reserve_segment_size_mb"):
        CachingHostAllocator(dev, 5)
    with pytest.raises(ValueError, match="greater than 0"):
        CachingHostAllocator(dev, "pinned_reserve_segment_size_mb:0")
