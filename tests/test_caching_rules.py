"""Rounding, pools, segment sizes, and the exact numbers PyTorch's own tests assert.

The rules are those of c10/cuda/CUDACachingAllocator.cpp (``round_size`` with
``roundup_power2_next_division``, ``get_allocation_size``, ``should_split``, the 1 EB guard
of ``NativeCachingAllocator::allocate``); the exact-number cases restate
``TestCuda.test_memory_stats`` and ``TestCudaAllocator.test_allocator_settings`` of
test/test_cuda.py.  Every expected number is computed by hand from those rules (shown in
the comments), never by calling the allocator's own helpers.
"""
from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import allocator_ref as ar
from allocator_ref.caching import AllocatorConfig, get_allocation_size, round_size
from caching_helpers import (MiB, KiB, assert_consistent, cur, make_alloc, seg_blocks,  # noqa: F401
                             stat_delta)


def cfg(text=""):
    return AllocatorConfig.parse(text)


# ----------------------------------------------------------- round_size (CUDACachingAllocator.cpp)
@pytest.mark.parametrize("size,expected", [
    (1, 512), (4, 512), (511, 512), (512, 512), (513, 1024), (1000, 1024), (1024, 1024),
    (1025, 1536), (MiB - 1, MiB), (MiB, MiB), (MiB + 1, MiB + 512),
    (12 * MiB + 1, 12_583_424), (88_080_384, 88_080_384),
])
def test_round_size_default_is_512_multiples(size, expected):
    assert round_size(size, cfg()) == expected


def power2_div(size: int, k: int) -> int:
    """The helper of test_allocator_settings (test/test_cuda.py): next power of two p >= size;
    p if equal, else step p/2/k from p/2 upward until >= size."""
    p = 1
    while p < size:
        p *= 2
    if p == size:
        return p
    step = p // 2 // k
    v = p // 2
    while v < size:
        v += step
    return v


def test_roundup_power2_single_value_84mib():
    # 84 MiB lies in [64, 128) MiB; 4 divisions -> steps of 16 MiB -> 96 MiB
    assert power2_div(88_080_384, 4) == 100_663_296
    assert round_size(88_080_384, cfg("roundup_power2_divisions:4")) == 100_663_296


def test_roundup_power2_list_form():
    conf = cfg("roundup_power2_divisions:[64:8,128:2,256:2,512:2,1024:1,>:1]")
    # 84 MiB: bucket floor(log2)=26 -> index 6 = "64:8" -> steps of 8 MiB -> 88 MiB
    assert round_size(88_080_384, conf) == 92_274_688
    # 400 MiB: floor(log2)=28 -> index 8 = "256:2" -> steps of 128 MiB -> 512 MiB
    assert round_size(419_430_400, conf) == 536_870_912
    # 1 MiB + 1: bucket 0, filled by the first entry (8 divisions): floor 1 MiB, step 128 KiB
    assert round_size(MiB + 1, conf) == MiB + 128 * KiB
    # 1.5 GiB: index 10 = "1024:1" -> no power-2 rounding, plain 512 B multiple
    assert round_size(3 * 512 * MiB + 1, conf) == 3 * 512 * MiB + 512
    # 40 GiB: index 15, filled by ">:1"
    assert round_size(40 * 1024 * MiB + 1, conf) == 40 * 1024 * MiB + 512
    # 200 MiB: index 7 = "128:2" -> steps of 64 MiB -> 256 MiB
    assert round_size(200 * MiB, conf) == 256 * MiB


def test_roundup_power2_400mib_with_2_divisions():
    assert power2_div(419_430_400, 2) == 536_870_912
    assert round_size(419_430_400, cfg("roundup_power2_divisions:2")) == 536_870_912


def test_roundup_power2_only_above_512_times_divisions():
    # roundup_power2_next_division's comment rounds 1200 (4 divisions) to 1280, but round_size
    # only calls it above 512 * divisions: 1200 <= 2048 stays a 512 multiple, 1536
    assert round_size(1200, cfg("roundup_power2_divisions:4")) == 1536
    # 9000 > 2048: floor 8192, step 2048 -> 10240 (a 512 multiple would be 9216)
    assert round_size(9000, cfg("roundup_power2_divisions:4")) == 10240
    # powers of two are returned as they are
    assert round_size(64 * MiB, cfg("roundup_power2_divisions:4")) == 64 * MiB
    # divisions 1 = disabled for that bucket
    assert round_size(88_080_384 + 1, cfg("roundup_power2_divisions:1")) == 88_080_384 + 512


@settings(max_examples=300, deadline=None)
@given(size=st.integers(min_value=1, max_value=2**40), k=st.sampled_from([2, 4, 8, 16, 32]))
def test_roundup_power2_matches_pytorch_helper(size, k):
    expected = power2_div(size, k) if size > 512 * k else -(-size // 512) * 512
    assert round_size(size, cfg(f"roundup_power2_divisions:{k}")) == expected


# -------------------------------------------------------------- get_allocation_size: segment sizes
@pytest.mark.parametrize("rounded,expected", [
    (512, 2 * MiB), (MiB, 2 * MiB), (MiB + 512, 20 * MiB), (10 * MiB - 512, 20 * MiB),
    (10 * MiB, 10 * MiB), (10 * MiB + 512, 12 * MiB), (12_583_424, 14 * MiB), (100 * MiB, 100 * MiB),
])
def test_get_allocation_size(rounded, expected):
    assert get_allocation_size(rounded, cfg()) == expected


def test_get_allocation_size_follows_large_segment_size():
    assert get_allocation_size(5 * MiB, cfg("large_segment_size_mb:32")) == 32 * MiB
    assert get_allocation_size(10 * MiB, cfg("large_segment_size_mb:32")) == 10 * MiB


@pytest.mark.parametrize("request_size,pool,segment", [
    (1, "small", 2 * MiB), (MiB, "small", 2 * MiB), (MiB + 1, "large", 20 * MiB),
    (10 * MiB - 512, "large", 20 * MiB), (10 * MiB, "large", 10 * MiB),
    (10 * MiB + 512, "large", 12 * MiB),
])
def test_pool_and_segment_of_a_first_request(make_alloc, request_size, pool, segment):
    a = make_alloc()
    a.malloc(request_size)
    segs = a.segments()
    assert len(segs) == 1
    assert segs[0]["segment_type"] == pool
    assert segs[0]["total_size"] == segment
    assert cur(a, "segment", pool + "_pool") == 1
    assert cur(a, "reserved_bytes", pool + "_pool") == segment


def test_large_segment_size_mb_changes_segment_of_mid_requests(make_alloc):
    a = make_alloc("large_segment_size_mb:32")
    a.malloc(5 * MiB)
    assert cur(a, "reserved_bytes") == 32 * MiB
    assert cur(a, "inactive_split_bytes") == 27 * MiB


# ----------------------------------------------- the 1 EB guard (NativeCachingAllocator::allocate)
def test_one_exabyte_guard(make_alloc):
    a = make_alloc()
    before = a.memory_stats()
    with pytest.raises(ar.OutOfMemoryError) as err:
        a.malloc(2**60)
    assert str(err.value) == "CUDA out of memory. Tried to allocate more than 1EB memory."
    assert isinstance(err.value, RuntimeError)
    # thrown before the device allocator runs: nothing counted
    assert a.memory_stats() == before


def test_just_below_one_exabyte_goes_down_the_ladder(make_alloc):
    a = make_alloc(profile="tiny-1gb")
    # test_out_of_memory: 800000000 GiB -> "Tried to allocate 800000000.00 GiB"
    with pytest.raises(ar.OutOfMemoryError, match=r"Tried to allocate 800000000\.00 GiB\. GPU 0 has a "
                                                    r"total capacity of"):
        a.malloc(1024**3 * 800000000)
    s = a.memory_stats()
    assert s["num_ooms"] == 1
    assert s["num_alloc_retries"] == 1       # release_cached_blocks + alloc_block(isRetry)
    assert s["num_sync_all_streams"] == 1
    # still usable afterwards
    x = a.malloc(4)
    a.free(x)


# ------------------------------------------- first requests worked by hand (round, segment, split)
def test_four_byte_request(make_alloc):
    a = make_alloc()
    x = a.malloc(4)
    s = a.memory_stats()
    assert x.size == 512 and x.requested_size == 4
    assert s["segment.all.current"] == 1 and s["segment.small_pool.current"] == 1
    assert s["reserved_bytes.all.current"] == 2_097_152
    assert s["allocation.all.current"] == 1
    assert s["allocated_bytes.all.current"] == 512
    assert s["active.all.current"] == 1
    assert s["active_bytes.all.current"] == 512
    assert s["requested_bytes.all.current"] == 4
    assert s["inactive_split.all.current"] == 1
    assert s["inactive_split_bytes.all.current"] == 2_096_640
    assert s["num_device_alloc"] == 1
    assert s["segment.large_pool.current"] == 0
    assert seg_blocks(a) == [(512, "active_allocated"), (2_096_640, "inactive")]
    seg = a.segments()[0]
    assert seg["blocks"][0]["address"] == seg["address"] == x.ptr
    assert seg["blocks"][0]["requested_size"] == 4
    assert seg["blocks"][1]["requested_size"] == 0      # a never-used remainder

    a.free(x)
    s = a.memory_stats()
    assert s["allocation.all.current"] == 0 and s["allocated_bytes.all.current"] == 0
    assert s["active.all.current"] == 0 and s["active_bytes.all.current"] == 0
    assert s["requested_bytes.all.current"] == 0
    assert s["inactive_split.all.current"] == 0 and s["inactive_split_bytes.all.current"] == 0
    assert s["reserved_bytes.all.current"] == 2 * MiB
    assert seg_blocks(a) == [(2 * MiB, "inactive")]

    syncs = s["num_sync_all_streams"]
    a.empty_cache()
    s = a.memory_stats()
    assert s["segment.all.current"] == 0 and s["reserved_bytes.all.current"] == 0
    assert s["num_device_free"] == 1
    assert s["num_sync_all_streams"] == syncs + 1
    assert a.segments() == []


def test_five_mib_request(make_alloc):
    a = make_alloc()
    a.malloc(5 * MiB)
    s = a.memory_stats()
    assert s["segment.large_pool.current"] == 1
    assert s["reserved_bytes.large_pool.current"] == 20 * MiB
    assert s["allocated_bytes.large_pool.current"] == 5 * MiB
    assert s["inactive_split_bytes.all.current"] == 15_728_640
    assert s["inactive_split.all.current"] == 1
    assert seg_blocks(a) == [(5 * MiB, "active_allocated"), (15 * MiB, "inactive")]


def test_twelve_mib_plus_one(make_alloc):
    a = make_alloc()
    x = a.malloc(12 * MiB + 1)
    s = a.memory_stats()
    # round 12,583,424 (512 multiple) -> segment 14,680,064 (2 MiB multiple) -> remainder 2,096,640 > 1 MiB
    assert x.size == 12_583_424
    assert s["reserved_bytes.all.current"] == 14_680_064
    assert s["allocated_bytes.all.current"] == 12_583_424
    assert s["requested_bytes.all.current"] == 12 * MiB + 1
    assert s["inactive_split_bytes.all.current"] == 2_096_640
    assert seg_blocks(a) == [(12_583_424, "active_allocated"), (2_096_640, "inactive")]


def test_second_four_byte_request_reuses_the_remainder(make_alloc):
    a = make_alloc()
    x = a.malloc(4)
    y = a.malloc(4)
    assert y.ptr == x.ptr + 512
    s = a.memory_stats()
    assert s["segment.all.current"] == 1 and s["num_device_alloc"] == 1
    assert s["inactive_split_bytes.all.current"] == 2 * MiB - 1024
    assert s["inactive_split.all.current"] == 1     # split of an already split block: count unchanged
    assert seg_blocks(a) == [(512, "active_allocated"), (512, "active_allocated"),
                             (2 * MiB - 1024, "inactive")]


def test_large_block_not_split_when_remainder_at_most_1mib(make_alloc):
    a = make_alloc()
    # 19.5 MiB: >= 10 MiB -> segment is the 2 MiB multiple 20 MiB; remainder 0.5 MiB <= 1 MiB -> no split
    x = a.malloc(19 * MiB + 512 * KiB)
    assert x.size == 20 * MiB
    assert cur(a, "allocated_bytes") == 20 * MiB
    assert cur(a, "inactive_split") == 0
    assert seg_blocks(a) == [(20 * MiB, "active_allocated")]


def test_cached_block_served_whole_when_remainder_at_most_1mib(make_alloc):
    a = make_alloc()
    x = a.malloc(5 * MiB)                 # 20 MiB segment
    a.free(x)                             # merges back: one free 20 MiB block
    y = a.malloc(19 * MiB + 512 * KiB)    # best fit = the cached 20 MiB block, remainder 0.5 MiB
    assert y.ptr == x.ptr and y.size == 20 * MiB
    s = a.memory_stats()
    assert s["num_device_alloc"] == 1
    assert s["allocated_bytes.all.current"] == 20 * MiB
    assert s["requested_bytes.all.current"] == 19 * MiB + 512 * KiB


def test_large_split_exactly_above_1mib_remainder(make_alloc):
    a = make_alloc()
    x = a.malloc(5 * MiB)
    a.free(x)
    # remainder exactly 1 MiB: not strictly more than kSmallSize -> no split
    y = a.malloc(19 * MiB)
    assert y.size == 20 * MiB
    a.free(y)
    # remainder 1 MiB + 512: split
    z = a.malloc(19 * MiB - 512)
    assert z.size == 19 * MiB - 512
    assert seg_blocks(a) == [(19 * MiB - 512, "active_allocated"), (MiB + 512, "inactive")]


def test_small_pool_splits_down_to_512(make_alloc):
    a = make_alloc()
    x = a.malloc(2 * MiB - 512)           # rounded 2 MiB - 512 > 1 MiB -> large pool, 20 MiB segment
    assert a.segments()[0]["segment_type"] == "large"
    a.free(x)
    y = a.malloc(MiB)                     # small pool: 2 MiB segment, remainder 1 MiB >= 512 -> split
    assert sorted(s["segment_type"] for s in a.segments()) == ["large", "small"]
    small = [s for s in a.segments() if s["segment_type"] == "small"][0]
    assert [(b["size"], b["state"]) for b in small["blocks"]] == [(MiB, "active_allocated"),
                                                                  (MiB, "inactive")]
    a.free(y)


def test_requested_size_rules_of_split_and_merge(make_alloc):
    """requested_size is never reset on free, and in try_merge_blocks the surviving block keeps its own
    (Block::requested_size, set by alloc_found_block; CUDACachingAllocator.cpp)."""
    a = make_alloc()
    x = a.malloc(4)            # [0, 512)
    y = a.malloc(1000)         # [512, 1536)
    a.free(x)                  # x cannot merge (y is allocated): inactive block, requested_size stays 4
    blocks = a.segments()[0]["blocks"]
    assert [(b["size"], b["state"], b["requested_size"]) for b in blocks] == [
        (512, "inactive", 4), (1024, "active_allocated", 1000), (2 * MiB - 1536, "inactive", 0)]
    a.free(y)                  # y absorbs both neighbours and keeps ITS requested_size
    blocks = a.segments()[0]["blocks"]
    assert [(b["address"], b["size"], b["state"], b["requested_size"]) for b in blocks] == [
        (x.ptr, 2 * MiB, "inactive", 1000)]


def test_best_fit_lowest_address_among_equal_sizes(make_alloc):
    a = make_alloc()
    xs = [a.malloc(5 * MiB) for _ in range(3)]     # 5+5+5 in one 20 MiB segment, 5 MiB left
    keep = a.malloc(5 * MiB)                       # the segment is full now
    assert len(a.segments()) == 1
    a.free(xs[2])
    a.free(xs[0])                                  # two free 5 MiB holes, x0 lower
    z = a.malloc(4 * MiB)                          # remainder 1 MiB: not split; lowest address wins
    assert z.ptr == xs[0].ptr and z.size == 5 * MiB
    a.free(z), a.free(xs[1]), a.free(keep)


# -------------------------------------------------- TestCuda.test_memory_stats (test/test_cuda.py)
def test_memory_stats_randn_256(make_alloc):
    a = make_alloc()
    base = a.malloc(3 * MiB)                       # something live before the test
    a.reset_peak_memory_stats()
    a.reset_accumulated_memory_stats()
    prev_max_alloc, prev_max_res = a.max_memory_allocated(), a.max_memory_reserved()
    prev = a.memory_stats()["active_bytes.all.current"]
    x = a.malloc(256 * 4)                          # torch.randn(256): 1024 bytes
    s = a.memory_stats()
    assert s["active_bytes.all.current"] == prev + 1024
    assert s["active_bytes.all.freed"] == 0
    a.free(x)
    a.empty_cache()
    s = a.memory_stats()
    assert s["active_bytes.all.current"] == prev
    assert s["active_bytes.all.freed"] == 1024
    a.reset_peak_memory_stats()
    assert a.max_memory_allocated() == prev_max_alloc
    assert a.max_memory_reserved() == prev_max_res
    a.free(base)


def test_memory_helpers_and_resets(make_alloc):
    a = make_alloc()
    x = a.malloc(5 * MiB)
    y = a.malloc(7 * MiB)
    a.free(y)
    assert a.memory_allocated() == 5 * MiB
    assert a.max_memory_allocated() == 12 * MiB
    assert a.memory_reserved() == 20 * MiB == a.max_memory_reserved()
    a.reset_peak_memory_stats()
    assert a.max_memory_allocated() == 5 * MiB
    s = a.memory_stats()
    assert s["allocated_bytes.all.allocated"] == 12 * MiB and s["allocated_bytes.all.freed"] == 7 * MiB
    a.reset_accumulated_memory_stats()
    s = a.memory_stats()
    assert s["allocated_bytes.all.allocated"] == 0 and s["allocated_bytes.all.freed"] == 0
    assert s["num_device_alloc"] == 0 and s["num_sync_all_streams"] == 0
    assert s["allocated_bytes.all.current"] == 5 * MiB     # currents untouched
    a.free(x)


def test_memory_stats_has_the_122_keys(make_alloc):
    a = make_alloc()
    s = a.memory_stats()
    expected = set()
    for name in ("allocation", "segment", "active", "inactive_split", "allocated_bytes", "reserved_bytes",
                 "active_bytes", "inactive_split_bytes", "requested_bytes"):
        for pool in ("all", "large_pool", "small_pool"):
            for m in ("current", "peak", "allocated", "freed"):
                expected.add(f"{name}.{pool}.{m}")
    for name in ("oversize_allocations", "oversize_segments"):
        for m in ("current", "peak", "allocated", "freed"):
            expected.add(f"{name}.{m}")
    expected |= {"num_alloc_retries", "num_ooms", "max_split_size", "num_sync_all_streams",
                 "num_device_alloc", "num_device_free"}
    assert len(expected) == 122
    assert set(s) == expected
    assert list(s) == sorted(s)
    assert s["max_split_size"] == -1


def test_max_split_size_stat_frozen_at_construction(make_alloc):
    a = make_alloc("max_split_size_mb:40")
    assert a.memory_stats()["max_split_size"] == 40 * MiB
    a.set_allocator_settings("max_split_size_mb:100")
    assert a.memory_stats()["max_split_size"] == 40 * MiB
    b = make_alloc()
    b.set_allocator_settings("max_split_size_mb:100")
    assert b.memory_stats()["max_split_size"] == -1


# ------------------------------------------------------- TestCudaAllocator.test_allocator_settings
def test_allocator_settings_deltas(make_alloc):
    a = make_alloc()
    nbytes = 88_080_384          # 21 * 2**20 float32

    def grow(size):
        b = a.memory_stats()
        x = a.malloc(size)
        s = a.memory_stats()
        a.free(x)
        return (s["active_bytes.all.allocated"] - b["active_bytes.all.allocated"],
                s["requested_bytes.all.allocated"] - b["requested_bytes.all.allocated"])

    assert grow(nbytes) == (nbytes, nbytes)
    a.set_allocator_settings("roundup_power2_divisions:4")
    assert grow(nbytes) == (100_663_296, nbytes)
    a.set_allocator_settings("garbage_collection_threshold:0.5,max_split_size_mb:40")
    assert grow(nbytes) == (nbytes, nbytes)          # the divisions were reset by the new parse
    a.set_allocator_settings("roundup_power2_divisions:[64:8,128:2,256:2,512:2,1024:1,>:1]")
    assert grow(nbytes) == (92_274_688, nbytes)
    assert grow(100 * 2**20 * 4) == (536_870_912, 100 * 2**20 * 4)
    a.set_allocator_settings("release_lock_on_cudamalloc:True")
    assert grow(nbytes) == (nbytes, nbytes)
    assert_consistent(a)
