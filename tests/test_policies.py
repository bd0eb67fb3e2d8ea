"""The alternative policies: Direct (no cache), the cudaMallocAsync pool model, TF/XLA's BFC.

Every expected number below comes from the rule it tests, written out in the
test, not from running the code.
"""
from __future__ import annotations

import pytest

from allocator_ref.caching import OutOfMemoryError
from allocator_ref.device import SimDevice
from allocator_ref.device.errors import CudaError
from allocator_ref.policies import BFCAllocator, DirectAllocator, StreamOrderedAllocator
from allocator_ref.front_door import InvalidPointerError
from allocator_ref.policies.bfc import bin_num_for_size, bin_size, rounded_bytes
from allocator_ref.policies.common import UINT64_MAX
from allocator_ref.policies.registry import get_policy, policy_names

KiB, MiB, GiB = 1024, 1024**2, 1024**3
# Every registered design but PyTorch's own (tested in test_caching_*.py) and its torch_npu port,
# which is the same caching core with other rounding (tested in test_npu_allocator.py)
POLICIES = tuple(get_policy(name).allocator_class() for name in policy_names() if name not in ("caching", "npu"))


@pytest.fixture
def dev():
    device = SimDevice("tiny-1gb")
    yield device
    device.close()


def make(cls, device, **options):
    allocator = cls(device, **options)
    allocator.record_memory_history("all")
    return allocator


def actions(allocator):
    return [(e["action"], e["size"]) for e in allocator.trace.dicts()]


def calls(device):
    c = device.counters
    return (c.malloc_calls, c.free_calls, c.malloc_async_calls, c.free_async_calls)


# =========================================================================== Direct

def test_direct_one_device_call_per_malloc_and_per_free(dev):
    a = make(DirectAllocator, dev)
    before = calls(dev)
    xs = [a.malloc(n) for n in (1000, 4096, 3 * MiB + 1)]
    assert calls(dev)[0] == before[0] + 3
    assert [x.size for x in xs] == [1024, 4096, 3 * MiB + 512]    # 512 B rounding, nothing else
    for x in xs:
        a.free(x)
    assert calls(dev)[1] == before[1] + 3
    assert a.memory_reserved() == 0 and a.memory_allocated() == 0
    assert actions(a)[:2] == [("segment_alloc", 1024), ("alloc", 1000)]
    assert actions(a)[6:9] == [("free_requested", 1000), ("free_completed", 1000), ("segment_free", 1024)]


def test_direct_free_pays_the_implicit_sync_on_the_device_clock(dev):
    a = make(DirectAllocator, dev)
    x = a.malloc(4096)
    side = dev.create_stream()
    dev.sleep(side, 5000)                  # a long kernel on another stream
    t0, syncs = dev.now_us(), dev.counters.implicit_syncs
    a.free(x)                              # cudaFree waits for every stream
    assert dev.now_us() - t0 >= 4900
    assert dev.counters.implicit_syncs == syncs + 1


def test_direct_record_stream_defers_the_cudafree_until_the_event(dev):
    a = make(DirectAllocator, dev)
    side = dev.create_stream()
    x = a.malloc(4096)
    dev.sleep(side, 1000)
    a.record_stream(x, side)
    frees = dev.counters.free_calls
    a.free(x)
    assert dev.counters.free_calls == frees                  # not yet: side is still busy
    assert a.memory_allocated() == 0 and a.memory_reserved() == 4096
    assert a.memory_stats()["active_bytes.all.current"] == 4096
    assert a.snapshot()["segments"][0]["blocks"][0]["state"] == "active_pending_free"
    assert actions(a)[-1] == ("free_requested", 4096)
    a.synchronize()                                           # the event completes
    assert dev.counters.free_calls == frees + 1
    assert a.memory_reserved() == 0
    assert actions(a)[-2:] == [("free_completed", 4096), ("segment_free", 4096)]


def test_direct_stats_keys_are_only_what_it_tracks(dev):
    stats = make(DirectAllocator, dev).memory_stats()
    assert "allocated_bytes.all.current" in stats and "segment.all.peak" in stats
    assert not any("small_pool" in k or "large_pool" in k or "inactive_split" in k for k in stats)
    assert "max_split_size" not in stats and "num_alloc_retries" not in stats


def test_direct_oom_is_the_package_error_and_changes_nothing(dev):
    a = make(DirectAllocator, dev)
    keep = a.malloc(MiB)
    before = a.memory_stats()
    with pytest.raises(OutOfMemoryError, match=r"CUDA out of memory. Tried to allocate 2.00 GiB"):
        a.malloc(2 * GiB)
    after = a.memory_stats()
    assert after.pop("num_ooms") == before.pop("num_ooms") + 1
    assert after == before and a.live_allocations() == [keep]
    assert a.trace.dicts()[-1]["action"] == "oom"


# =========================================================================== stream-ordered pool

ALL_OFF = dict(follow_event_dependencies=False, allow_opportunistic=False, allow_internal_dependencies=False)


def test_stream_ordered_same_stream_reuse_needs_no_device_call(dev):
    a = make(StreamOrderedAllocator, dev)
    s1 = dev.create_stream()
    x = a.malloc(MiB, s1)
    dev.sleep(s1, 1000)                       # the free is far from done on the device...
    a.free(x)
    before = calls(dev)
    y = a.malloc(MiB, s1)                      # ...but stream order makes reuse on s1 safe
    assert y.ptr == x.ptr
    assert calls(dev) == before
    assert a.reuse_counts["same_stream"] == 1


def _freed_on_busy_stream(dev, **switches):
    """A 2 MiB block (exactly one 2 MiB chunk) freed on s1 while s1 is still busy."""
    a = make(StreamOrderedAllocator, dev, chunk_bytes=2 * MiB, **{**ALL_OFF, **switches})
    s1, s2 = dev.create_stream(), dev.create_stream()
    x = a.malloc(2 * MiB, s1)
    dev.sleep(s1, 1000)
    a.free(x)
    return a, s1, s2, x.ptr


def test_cross_stream_no_reuse_with_every_switch_off(dev):
    a, s1, s2, ptr = _freed_on_busy_stream(dev)
    dev.synchronize()                          # even once the host knows the free is done
    before = calls(dev)
    y = a.malloc(2 * MiB, s2)
    assert y.ptr != ptr and calls(dev)[0] == before[0] + 1   # a new chunk


def test_cross_stream_follow_event_dependencies(dev):
    a, s1, s2, ptr = _freed_on_busy_stream(dev, follow_event_dependencies=True)
    assert a.malloc(2 * MiB, s2).ptr != ptr     # s2 does not wait on s1: no reuse
    a.stream_wait(s2, s1)                       # an event recorded on s1 after the free
    before = calls(dev)
    assert a.malloc(2 * MiB, s2).ptr == ptr
    assert calls(dev) == before and a.reuse_counts["event_dependency"] == 1


def test_an_event_recorded_before_the_free_is_not_a_dependency(dev):
    a = make(StreamOrderedAllocator, dev, chunk_bytes=2 * MiB, **{**ALL_OFF, "follow_event_dependencies": True})
    s1, s2 = dev.create_stream(), dev.create_stream()
    x = a.malloc(2 * MiB, s1)
    early = a.record_event(s1)                  # before the free
    dev.sleep(s1, 1000)
    a.free(x)
    a.wait_event(s2, early)
    assert a.malloc(2 * MiB, s2).ptr != x.ptr


def test_cross_stream_opportunistic(dev):
    a, s1, s2, ptr = _freed_on_busy_stream(dev, allow_opportunistic=True)
    assert a.malloc(2 * MiB, s2).ptr != ptr     # the host has not seen s1 pass the free
    b, s1, s2, ptr = _freed_on_busy_stream(dev, allow_opportunistic=True)
    s1.synchronize()                            # now it has
    assert b.malloc(2 * MiB, s2).ptr == ptr and b.reuse_counts["opportunistic"] == 1


def test_cross_stream_internal_dependencies_insert_a_wait(dev):
    a, s1, s2, ptr = _freed_on_busy_stream(dev, allow_internal_dependencies=True)
    dev.malloc(dev.mem_get_info()[0])           # the device is full: the pool cannot grow (CUDA
    assert a.malloc(2 * MiB, s2).ptr == ptr     # Programming Guide: the wait comes only then)
    assert a.memory_reserved() == 2 * MiB       # no new chunk
    assert a.reuse_counts["internal_dependency"] == 1
    probe = dev.create_event()
    probe.record(s2)                            # s2 was idle: only the inserted wait delays it
    assert not probe.query()
    s1.synchronize()
    assert probe.query()


def test_release_threshold_zero_trims_on_synchronize(dev):
    a = make(StreamOrderedAllocator, dev, release_threshold=0)
    start = dev.mem_get_info()[0]
    a.free(a.malloc(MiB))
    assert a.memory_reserved() == 32 * MiB       # one default chunk
    a.synchronize()
    assert a.memory_reserved() == 0 and dev.mem_get_info()[0] == start
    assert actions(a)[-1] == ("segment_free", 32 * MiB)


def test_release_threshold_uint64_max_keeps_the_pool(dev):
    a = make(StreamOrderedAllocator, dev)
    assert a.release_threshold == UINT64_MAX     # PyTorch's backend default
    a.free(a.malloc(MiB))
    a.synchronize()
    assert a.memory_reserved() == 32 * MiB
    a.empty_cache()                             # = synchronize + trim to 0
    assert a.memory_reserved() == 0


def test_trim_keeps_unobserved_frees_and_respects_min_bytes(dev):
    a = make(StreamOrderedAllocator, dev, chunk_bytes=2 * MiB)
    s1 = dev.create_stream()
    x, y = a.malloc(2 * MiB, s1), a.malloc(2 * MiB, s1)
    dev.sleep(s1, 1000)
    a.free(x)
    a.free(y)
    a.trim_to(0)
    assert a.memory_reserved() == 4 * MiB        # the host has not seen the frees complete
    s1.synchronize()
    a.trim_to(3 * MiB)                          # releasing one chunk would leave 2 MiB < 3 MiB
    assert a.memory_reserved() == 4 * MiB
    a.trim_to(2 * MiB)
    assert a.memory_reserved() == 2 * MiB


def test_stream_ordered_stats_are_pytorchs_subset(dev):
    a = make(StreamOrderedAllocator, dev)
    x = a.malloc(1000)
    filled = {k: v for k, v in a.memory_stats().items() if v}   # every other key reads 0 (getDeviceStats)
    assert filled == {
        "active_bytes.all.current": 1024, "active_bytes.all.peak": 1024,
        "allocated_bytes.all.current": 1024, "allocated_bytes.all.peak": 1024,
        "reserved_bytes.all.current": 32 * MiB, "reserved_bytes.all.peak": 32 * MiB,
    }
    a.free(x)
    a.reset_peak_memory_stats()
    assert a.max_memory_allocated() == 0 and a.max_memory_reserved() == 32 * MiB


def test_record_stream_frees_on_a_unifying_stream(dev):
    a = make(StreamOrderedAllocator, dev, chunk_bytes=2 * MiB, **ALL_OFF)
    s1, s2 = dev.create_stream(), dev.create_stream()
    x = a.malloc(2 * MiB, s1)
    a.record_stream(x, s2)
    dev.sleep(s2, 1000)
    a.free(x)                                   # cudaFreeAsync on the side stream, after s1 and s2
    assert a.malloc(2 * MiB, s1).ptr != x.ptr   # s1 does not wait on that side stream


def test_record_stream_on_the_creation_stream_warns(dev):
    a = make(StreamOrderedAllocator, dev)
    x = a.malloc(4096)
    with pytest.warns(UserWarning, match="unnecessary and has no effect"):
        a.record_stream(x, None)


def test_stream_ordered_fraction_oom_message(dev):
    a = make(StreamOrderedAllocator, dev)
    a.set_per_process_memory_fraction(0.25)     # 256 MiB of the 1 GiB device
    keep = a.malloc(100 * MiB)
    before = a.memory_stats()
    with pytest.raises(OutOfMemoryError) as info:
        a.malloc(200 * MiB)
    assert str(info.value).startswith(
        "Allocation on device 0 would exceed allowed memory. (out of memory)\n"
        "Currently allocated     : 100.00 MiB\n"
        "Requested               : 200.00 MiB\n"
        "Device limit            : 1024.00 MiB\n"     # format_size: <= 1 GiB is MiB
        "Free (according to CUDA): ")
    assert str(info.value).endswith("PyTorch limit (set by user-supplied memory fraction)\n"
                                    "                        : 256.00 MiB")
    assert a.memory_stats() == before and a.live_allocations() == [keep]


def test_stream_ordered_device_oom(dev):
    a = make(StreamOrderedAllocator, dev)
    with pytest.raises(OutOfMemoryError, match="would exceed allowed memory"):
        a.malloc(2 * GiB)
    assert a.memory_reserved() == 0


def test_driver_pool_uses_cuda_malloc_async(dev):
    """On a GPU the class calls the real cudaMallocAsync; the SimDevice's pool stands in here."""
    a = make(StreamOrderedAllocator, dev, driver_pool=True)
    before = calls(dev)
    x = a.malloc(MiB)
    assert calls(dev)[2] == before[2] + 1 and calls(dev)[0] == before[0]
    assert a.memory_reserved() == dev.mempool_reserved() > 0
    a.free(x)
    assert calls(dev)[3] == before[3] + 1
    a.close()
    assert dev.mempool_reserved() == 0


@pytest.mark.parametrize("lang, words", [("en", "does not yet support getMemorySnapshot"), ("zh", "尚不支持 getMemorySnapshot")])
def test_driver_pool_snapshot_refusal_speaks_the_readers_language(dev, monkeypatch, lang, words):
    monkeypatch.setenv("ALLOCATOR_REF_LANG", lang)                  # chapter 5 prints this refusal
    a = make(StreamOrderedAllocator, dev, driver_pool=True)
    with pytest.raises(RuntimeError) as err:
        a.snapshot()
    assert words in str(err.value)
    a.close()


def test_driver_pool_refuses_switches_it_cannot_set(dev):
    with pytest.raises(ValueError, match="cudaMemPoolReuse"):
        StreamOrderedAllocator(dev, driver_pool=True, allow_opportunistic=False)


# =========================================================================== BFC

def test_bfc_rounding_and_bins():
    assert [rounded_bytes(n) for n in (1, 256, 257, 1000)] == [256, 256, 512, 1024]
    assert [bin_num_for_size(n) for n in (256, 511, 512, 1023, 1024, MiB, 256 * MiB, GiB)] == \
        [0, 0, 1, 1, 2, 12, 20, 20]
    assert bin_size(0) == 256 and bin_size(20) == 256 * MiB


def test_bfc_first_region_is_2mib_and_split_leaves_the_rest_in_its_bin(dev):
    a = make(BFCAllocator, dev)
    x = a.malloc(1000)
    assert x.size == 1024 and a.memory_reserved() == 2 * MiB
    rest = 2 * MiB - 1024                       # 2 MiB >= 2 x 1024: split
    assert list(a.bins[bin_num_for_size(rest)]) == [(rest, x.ptr + 1024)]
    assert bin_num_for_size(rest) == 12         # floor(log2(2096128 / 256)) = floor(log2(8188))


def test_bfc_no_split_below_twice_the_request(dev):
    a = make(BFCAllocator, dev)
    x = a.malloc(int(1.5 * MiB))                # 2 MiB < 2 x 1.5 MiB and leftover 0.5 MiB < 128 MiB
    assert x.size == 2 * MiB and x.requested_size == int(1.5 * MiB)
    assert a.memory_stats()["requested_bytes.all.current"] == int(1.5 * MiB)


def test_bfc_split_when_leftover_reaches_128mib(dev):
    a = make(BFCAllocator, dev, memory_limit=512 * MiB, allow_growth=False)
    x = a.malloc(300 * MiB)                     # 512 < 600, but leftover 212 MiB >= 128 MiB: split
    assert x.size == 300 * MiB and a.memory_reserved() == 512 * MiB
    a.free(x)
    y = a.malloc(400 * MiB)                     # leftover 112 MiB < 128 MiB: the whole chunk
    assert y.size == 512 * MiB


def test_bfc_growth_doubles(dev):
    a = make(BFCAllocator, dev)
    a.malloc(KiB)           # region 2 MiB; the next one will be 4 MiB
    a.malloc(2 * MiB)       # no fit: region 4 MiB; next 8
    a.malloc(4 * MiB)       # no fit: region 8 MiB; next 16
    a.malloc(20 * MiB)      # 20 > 16: doubled to 32 before allocating, and not doubled again after
    assert sorted(r.size for r in a.regions) == [2 * MiB, 4 * MiB, 8 * MiB, 32 * MiB]
    assert a.curr_region_allocation_bytes == 32 * MiB
    assert [s for act, s in actions(a) if act == "segment_alloc"] == [2 * MiB, 4 * MiB, 8 * MiB, 32 * MiB]


def test_bfc_backs_off_to_90_percent_when_the_device_says_no(dev):
    free = dev.mem_get_info()[0]
    a = make(BFCAllocator, dev, memory_limit=2 * GiB, allow_growth=False)
    a.malloc(MiB)
    expected = 2 * GiB                          # shrink by 0.9 (rounded to 256 B) until it fits
    while expected > free:
        expected = (int(expected * 0.9) + 255) // 256 * 256
    assert a.memory_reserved() == expected
    assert a.started_backpedal


def test_bfc_coalesces_free_neighbours(dev):
    a = make(BFCAllocator, dev)
    x, y, z = (a.malloc(KiB) for _ in range(3))
    a.free(y)
    assert [b["state"] for b in a.segments()[0]["blocks"]] == \
        ["active_allocated", "inactive", "active_allocated", "inactive"]
    a.free(x)                                   # x merges with y
    assert [b["size"] for b in a.segments()[0]["blocks"]][:2] == [2 * KiB, KiB]
    a.free(z)                                   # everything merges back into one chunk
    assert [(b["size"], b["state"]) for b in a.segments()[0]["blocks"]] == [(2 * MiB, "inactive")]
    assert sum(len(b) for b in a.bins) == 1


def test_bfc_best_fit_lowest_address(dev):
    a = make(BFCAllocator, dev)
    xs = [a.malloc(n) for n in (4 * KiB, KiB, 2 * KiB, KiB, 2 * KiB, KiB)]
    for i in (0, 2, 4):                         # holes of 4, 2 and 2 KiB
        a.free(xs[i])
    assert a.malloc(2 * KiB).ptr == xs[2].ptr   # the smallest hole that fits, lowest address


def test_bfc_garbage_collection_frees_whole_regions_before_failing(dev):
    for gc, expect_ok in ((False, False), (True, True)):
        a = make(BFCAllocator, dev, memory_limit=8 * MiB, garbage_collection=gc)
        x, y = a.malloc(KiB), a.malloc(2 * MiB)     # regions 2 + 4 MiB; 2 MiB left under the limit
        a.free(x)
        a.free(y)
        if expect_ok:
            z = a.malloc(5 * MiB)                   # both regions given back, one 8 MiB region made
            assert a.memory_reserved() == 8 * MiB and z.size == 8 * MiB
        else:
            with pytest.raises(OutOfMemoryError, match=r"GPU_0_bfc\) ran out of memory"):
                a.malloc(5 * MiB)
            assert a.memory_reserved() == 6 * MiB
        a.close()


def test_bfc_empty_cache_gives_back_free_regions_only(dev):
    a = make(BFCAllocator, dev)
    keep = a.malloc(KiB)                        # region 1 (2 MiB) stays in use
    a.free(a.malloc(3 * MiB))                   # region 2 (4 MiB) becomes wholly free
    a.empty_cache()
    assert a.memory_reserved() == 2 * MiB and a.live_allocations() == [keep]


def test_bfc_stats_keys(dev):
    stats = make(BFCAllocator, dev).memory_stats()
    assert {"allocated_bytes.all.current", "reserved_bytes.all.peak", "allocation.all.current",
            "segment.all.current"} <= set(stats)
    assert not any("pool" in k or "inactive_split" in k or "oversize" in k for k in stats)


# =========================================================================== all policies

@pytest.mark.parametrize("cls", POLICIES)
def test_trace_follows_pytorchs_addr_and_size_rules(dev, cls):
    a = make(cls, dev)
    x = a.malloc(1000)
    a.free(x)
    a.close()
    entries = a.trace.dicts()
    alloc = next(e for e in entries if e["action"] == "alloc")
    assert alloc["addr"] == x.ptr and alloc["size"] == 1000                    # user request
    segment = next(e for e in entries if e["action"] == "segment_alloc")
    assert segment["size"] >= 1024                                             # the backing chunk
    assert {e["action"] for e in entries} >= {"free_requested", "free_completed", "segment_free"}
    assert all(isinstance(e["time_us"], int) for e in entries)


def test_stream_ordered_reuse_is_safe_where_bfc_is_not(dev):
    """A late write by s1 into freed memory: the pool orders s2 after it, BFC does not."""
    s1, s2 = dev.create_stream(), dev.create_stream()
    results = {}
    for cls in POLICIES:
        a = make(cls, dev)
        x = a.malloc(4096, s1)
        dev.sleep(s1, 1000)
        dev.fill(x.ptr, 4096, 0xAA, s1)         # s1 still writes x a millisecond from now
        a.free(x)
        y = a.malloc(4096, s2)
        dev.fill(y.ptr, 4096, 0x55, s2)
        dev.synchronize()
        results[cls.__name__] = dev.read(y.ptr, 4096) == bytes([0x55]) * 4096
        a.close()
    assert results == {"DirectAllocator": True, "StreamOrderedAllocator": True, "BFCAllocator": False}


# --------------------------------------------------------------------------- bad input

def _state(a):
    return (a.memory_stats(), [(x.ptr, x.size) for x in a.live_allocations()], len(a.trace.entries))


@pytest.mark.parametrize("cls", POLICIES)
def test_bad_sizes(dev, cls):
    a = make(cls, dev)
    a.malloc(4096)
    before = _state(a)
    with pytest.raises(ValueError, match="Invalid memory size"):
        a.malloc(-1)
    for bad in (1.5, "10", None, True):
        with pytest.raises(TypeError, match="Invalid memory size"):
            a.malloc(bad)
    null = a.malloc(0)
    assert null.ptr == 0 and not null
    assert _state(a) == before
    a.free(null)
    assert _state(a) == before


@pytest.mark.parametrize("cls", POLICIES)
def test_double_free_and_foreign_allocation(dev, cls):
    a, other = make(cls, dev), make(cls, dev)
    x = a.malloc(4096)
    keep = a.malloc(4096)
    a.free(x)
    before = _state(a)
    with pytest.raises(ValueError, match="already freed"):
        a.free(x)
    foreign = other.malloc(4096)
    with pytest.raises(ValueError, match="another allocator"):
        a.free(foreign)
    # A bare int is a pointer, as torch.cuda.caching_allocator_delete takes one: a freed one is
    # PyTorch's "invalid device pointer" (front_door.py), the same error CachingAllocator raises.
    with pytest.raises(InvalidPointerError, match="invalid device pointer"):
        a.free(x.ptr)
    with pytest.raises(TypeError, match="expected an Allocation"):
        a.free(str(x.ptr))
    assert _state(a) == before and a.live_allocations() == [keep]


@pytest.mark.parametrize("cls", POLICIES)
def test_bad_streams(dev, cls):
    a = make(cls, dev)
    x = a.malloc(4096)
    freed = a.malloc(4096)
    a.free(freed)
    before = _state(a)
    with pytest.raises(ValueError, match="already freed"):
        a.record_stream(freed, dev.create_stream())
    other_dev = SimDevice("tiny-1gb")
    try:
        foreign_stream = other_dev.create_stream()
        with pytest.raises(ValueError, match="another device"):
            a.malloc(4096, foreign_stream)
        with pytest.raises(ValueError, match="another device"):
            a.record_stream(x, foreign_stream)
    finally:
        other_dev.close()
    gone = dev.create_stream()
    dev.destroy_stream(gone)
    # The same error as CachingAllocator.record_stream: CUDA's answer for a destroyed stream.
    with pytest.raises(CudaError, match="cudaErrorInvalidResourceHandle.*destroyed"):
        a.malloc(4096, gone)
    with pytest.raises(CudaError, match="cudaErrorInvalidResourceHandle.*destroyed"):
        a.record_stream(x, gone)
    assert _state(a) == before


@pytest.mark.parametrize("cls", POLICIES)
def test_free_after_a_used_stream_was_destroyed_waits_for_it_then_frees(dev, cls):
    """record_stream(x, s), destroy s, free(x): the work s had queued still runs, so the free
    waits for the device to drain, then gives the memory back (as CachingAllocator does),
    instead of refusing forever and keeping 64 MiB until close()."""
    a = make(cls, dev)
    side = dev.create_stream()
    x = a.malloc(64 * MiB)
    dev.sleep(side, 500)                       # side is still busy when destroyed
    a.record_stream(x, side)
    busy_until = dev.now_us() + 500
    dev.destroy_stream(side)
    a.free(x)
    assert x.freed and a.memory_allocated() == 0
    a.synchronize()
    assert a.memory_stats()["active_bytes.all.current"] == 0
    assert dev.now_us() >= busy_until - 1      # the free did not overtake side's queued work
    a.empty_cache()
    assert a.memory_reserved() == 0


@pytest.mark.parametrize("cls", POLICIES)
def test_destroyed_streams_leak_nothing_across_many_rounds(dev, cls):
    a = make(cls, dev)
    start = dev.mem_get_info()[0]
    for _ in range(20):
        side = dev.create_stream()
        x = a.malloc(8 * MiB, side if cls is StreamOrderedAllocator else None)
        a.record_stream(x, dev.default_stream if cls is StreamOrderedAllocator else side)
        dev.destroy_stream(side)
        a.free(x)
    a.synchronize()
    a.empty_cache()
    assert a.memory_reserved() == 0 and dev.mem_get_info()[0] == start
    a.close()


def test_stream_ordered_free_on_destroyed_creation_stream(dev):
    a = make(StreamOrderedAllocator, dev)
    s1 = dev.create_stream()
    x = a.malloc(4096, s1)
    dev.sleep(s1, 300)
    dev.destroy_stream(s1)
    a.free(x)                                   # ordered on the default stream after a drain
    assert x.freed and a.memory_allocated() == 0
    y = a.malloc(4096)
    assert y.ptr == x.ptr                       # the memory really came back


@pytest.mark.parametrize("cls", POLICIES)
def test_closed_allocator_refuses_work_and_device_got_everything_back(dev, cls):
    start = dev.mem_get_info()[0]
    a = make(cls, dev)
    a.malloc(3 * MiB)
    a.malloc(100)
    a.close()
    assert dev.mem_get_info()[0] == start
    with pytest.raises(RuntimeError, match="closed"):
        a.malloc(1)


@pytest.mark.parametrize("cls", POLICIES)
def test_follows_the_shared_allocator_interface(dev, cls):
    import allocator_ref as ar
    from allocator_ref.allocation import Allocator

    assert getattr(ar, cls.__name__) is cls
    a = cls(dev)
    assert isinstance(a, Allocator)
    x = a.malloc(1000)
    assert (x.requested_size, x.stream, x.allocator) == (1000, dev.default_stream, a)
    snap = a.snapshot()
    assert set(snap) >= {"segments", "device_traces", "allocator_settings"}
    assert snap["segments"][0]["blocks"][0]["state"] == "active_allocated"
    a.close()


@pytest.mark.parametrize("cls", POLICIES)
def test_absurd_size_is_an_out_of_memory_error_not_a_crash(dev, cls):
    a = make(cls, dev)
    keep = a.malloc(4096)
    reserved = a.memory_reserved()
    with pytest.raises(OutOfMemoryError):
        a.malloc(2**70)
    assert a.live_allocations() == [keep] and a.memory_reserved() == reserved


def test_options_from_a_config_string(dev):
    a = StreamOrderedAllocator(dev, "release_threshold:0, allow_opportunistic:False")
    assert a.release_threshold == 0 and a.options["allow_opportunistic"] is False
    b = BFCAllocator(dev, "memory_limit:8388608,allow_growth:false")
    assert b.memory_limit == 8 * MiB and b.curr_region_allocation_bytes == 8 * MiB
    with pytest.raises(ValueError, match="unknown option 'max_split_size_mb'"):
        BFCAllocator(dev, "max_split_size_mb:20")
    with pytest.raises(ValueError, match="True or False"):
        StreamOrderedAllocator(dev, allow_opportunistic="maybe")
