"""The malloc ladder (DeviceCachingAllocator::malloc, CUDACachingAllocator.cpp): best fit with the
max_split_size rules, garbage collection, alloc_block and the fraction limit,
release_available_cached_blocks, the full release + retry, and the OOM error.  Budgets are set with
set_per_process_memory_fraction on the 1 GiB teaching device, so every figure below is computed by
hand in the comments.
"""
from __future__ import annotations

import random
import re

import pytest

import allocator_ref as ar
from caching_helpers import (GiB, MiB, Recorder, assert_consistent, cur, fmt_size,  # noqa: F401
                             make_alloc)

URL = "https://docs.pytorch.org/docs/stable/notes/cuda.html#optimizing-memory-usage-with-pytorch-cuda-alloc-conf"


def budget(a, mib: int) -> None:
    """Allow exactly ``mib`` MiB on the 1 GiB device (mib/1024 is an exact binary fraction)."""
    f = mib / 1024
    assert int(f * GiB) == mib * MiB
    a.set_per_process_memory_fraction(f)


def segment_frees(rec):
    return [(addr, size) for (act, addr, size) in rec.simple() if act == "segment_free"]


# -------------------------------------------------------- get_free_block: the max_split_size rules
def test_oversize_block_never_serves_a_normal_request(make_alloc):
    a = make_alloc("max_split_size_mb:40")
    x = a.malloc(50 * MiB)                  # oversize: 50 MiB segment, never split
    assert x.size == 50 * MiB
    s = a.memory_stats()
    assert s["oversize_allocations.current"] == 1 and s["oversize_segments.current"] == 1
    a.free(x)
    assert a.memory_stats()["oversize_allocations.current"] == 0
    y = a.malloc(30 * MiB)                  # 30 < 40 and the cached block 50 >= 40: fail -> new segment
    assert y.ptr != x.ptr and y.size == 30 * MiB
    assert cur(a, "segment") == 2
    a.free(y)
    z = a.malloc(40 * MiB - 512)            # still a normal request: the 30 MiB block is too small,
    assert z.ptr not in (x.ptr, y.ptr)      # the 50 MiB one is oversize -> a third segment
    assert cur(a, "segment") == 3
    a.free(z)


def test_block_exactly_max_split_is_oversize(make_alloc):
    a = make_alloc("max_split_size_mb:40")
    x = a.malloc(40 * MiB)
    assert a.memory_stats()["oversize_segments.current"] == 1
    a.free(x)
    y = a.malloc(10 * MiB)                  # block 40 >= max_split, request < max_split -> no
    assert y.ptr != x.ptr
    a.free(y)


def test_oversize_request_takes_a_block_within_rounding(make_alloc):
    a = make_alloc("max_split_size_mb:40")
    x = a.malloc(50 * MiB)
    a.free(x)
    y = a.malloc(45 * MiB)                  # 50 < 45 + 20: reused whole (oversize requests never split)
    assert y.ptr == x.ptr and y.size == 50 * MiB
    assert cur(a, "allocated_bytes") == 50 * MiB
    assert cur(a, "requested_bytes") == 45 * MiB
    a.free(y)
    z = a.malloc(30 * MiB + 512)            # not oversize -> cannot take the 50 MiB block
    assert z.ptr != x.ptr
    a.free(z)


def test_oversize_request_refuses_a_block_beyond_rounding(make_alloc):
    a = make_alloc("max_split_size_mb:40")
    x = a.malloc(70 * MiB)
    a.free(x)
    y = a.malloc(50 * MiB)                  # 70 >= 50 + 20 -> fail, new 50 MiB segment
    assert y.ptr != x.ptr and cur(a, "segment") == 2
    a.free(y)


def test_max_non_split_rounding_widens_the_window(make_alloc):
    a = make_alloc("max_split_size_mb:40,max_non_split_rounding_mb:30")
    x = a.malloc(70 * MiB)
    a.free(x)
    y = a.malloc(45 * MiB)                  # 70 < 45 + 30 -> reused whole
    assert y.ptr == x.ptr and y.size == 70 * MiB
    a.free(y)


def test_max_split_blocks_never_split(make_alloc):
    a = make_alloc("max_split_size_mb:40")
    x = a.malloc(41 * MiB)                  # segment 42 MiB (2 MiB multiple); remainder 1 MiB anyway
    assert x.size == 42 * MiB
    a.free(x)
    y = a.malloc(60 * MiB)
    a.free(y)
    z = a.malloc(45 * MiB)                  # best fit is the 60 MiB block (42 too small); 60 < 65 -> whole
    assert z.ptr == y.ptr and z.size == 60 * MiB
    assert cur(a, "inactive_split") == 0
    a.free(z)


# ----------------------------------------------------------------- release_available_cached_blocks
def test_release_available_frees_one_big_enough_block(make_alloc):
    a = make_alloc("max_split_size_mb:40", profile="tiny-1gb")
    budget(a, 180)
    A = a.malloc(100 * MiB)
    B = a.malloc(60 * MiB)
    a.free(A), a.free(B)                    # cached oversize 100 and 60; total 160
    rec = Recorder(a)
    C = a.malloc(30 * MiB)                  # no fit (both oversize); 160 + 30 > 180 -> ladder:
    # key = max(30, 40) = 40 -> lower bound = the 60 MiB block: release just that one
    assert segment_frees(rec) == [(B.ptr, 60 * MiB)]
    s = a.memory_stats()
    assert s["num_alloc_retries"] == 0 and s["num_sync_all_streams"] == 0
    assert s["num_device_free"] == 1
    assert s["reserved_bytes.all.current"] == 130 * MiB
    a.free(C)


def test_release_available_walks_back_from_the_largest(make_alloc):
    a = make_alloc("max_split_size_mb:40", profile="tiny-1gb")
    budget(a, 200)
    X = a.malloc(30 * MiB)                  # live, not oversize
    P = a.malloc(41 * MiB)                  # 42 MiB segment
    Q = a.malloc(45 * MiB)                  # 46 MiB segment
    R = a.malloc(50 * MiB)
    a.free(P), a.free(Q), a.free(R)         # cached 42, 46, 50 ; total 30+138 = 168
    rec = Recorder(a)
    Y = a.malloc(90 * MiB)                  # oversize; no block >= 90; 168 + 90 > 200
    # key 90: none >= 90 -> from the largest down: 50 (released 50), 46 (96 >= 90) -> stop; 42 stays
    assert segment_frees(rec) == [(R.ptr, 50 * MiB), (Q.ptr, 46 * MiB)]
    s = a.memory_stats()
    assert s["num_alloc_retries"] == 0 and s["num_sync_all_streams"] == 0
    assert s["reserved_bytes.all.current"] == (30 + 42 + 90) * MiB
    a.free(X), a.free(Y)


def test_release_available_not_enough_then_full_release(make_alloc):
    a = make_alloc("max_split_size_mb:40", profile="tiny-1gb")
    budget(a, 200)
    X = a.malloc(60 * MiB)                  # live (oversize, irrelevant)
    S = a.malloc(30 * MiB)                  # will be a cached non-oversize block
    O = a.malloc(45 * MiB)                  # 46 MiB segment, cached oversize
    a.free(S), a.free(O)                    # total 60 + 30 + 46 = 136
    rec = Recorder(a)
    Y = a.malloc(90 * MiB)                  # 136 + 90 > 200
    # release_available: key 90, walk back: 46 released (< 90), next 30 < max_split -> stop, false.
    # release_cached_blocks: sync-all, releases the 30; retry (counted) succeeds: 60 + 90 <= 200
    assert segment_frees(rec) == [(O.ptr, 46 * MiB), (S.ptr, 30 * MiB)]
    s = a.memory_stats()
    assert s["num_alloc_retries"] == 1
    assert s["num_sync_all_streams"] == 1
    assert s["num_device_free"] == 2
    assert s["num_ooms"] == 0
    a.free(X), a.free(Y)


def test_default_config_goes_straight_to_full_release(make_alloc):
    a = make_alloc(profile="tiny-1gb")
    budget(a, 100)
    A = a.malloc(60 * MiB)
    a.free(A)
    rec = Recorder(a)
    B = a.malloc(70 * MiB)                  # no fit; 60 + 70 > 100; max_split unset -> release_cached_blocks
    assert segment_frees(rec) == [(A.ptr, 60 * MiB)]
    s = a.memory_stats()
    assert s["num_alloc_retries"] == 1 and s["num_sync_all_streams"] == 1
    a.free(B)


def test_full_release_keeps_split_segments(make_alloc):
    a = make_alloc(profile="tiny-1gb")
    budget(a, 60)
    keep = a.malloc(5 * MiB)                # 20 MiB segment, split (15 MiB cached remainder)
    W = a.malloc(30 * MiB)
    a.free(W)                               # whole 30 MiB segment cached; total 50
    B = a.malloc(35 * MiB)                  # 50 + 36 > 60: full release frees W only (split one stays)
    assert cur(a, "segment") == 2
    assert cur(a, "inactive_split_bytes") == 15 * MiB
    a.free(keep), a.free(B)


# ------------------------------------------------------------------- garbage_collect_cached_blocks
def test_gc_frees_every_block_at_least_average_age(make_alloc):
    a = make_alloc("garbage_collection_threshold:0.5", profile="tiny-1gb")
    budget(a, 120)                          # gc threshold = 60 MiB
    A = a.malloc(40 * MiB)                  # clock 1
    B = a.malloc(40 * MiB)                  # clock 2
    a.free(A), a.free(B)                    # both stamped 2; total 80
    rec = Recorder(a)
    C = a.malloc(60 * MiB)                  # clock 3, no fit; GC: 80 > 60, target 20; ages 1, 1 -> avg 1:
    # both released although the first one already reaches the target
    assert sorted(segment_frees(rec)) == sorted([(A.ptr, 40 * MiB), (B.ptr, 40 * MiB)])
    s = a.memory_stats()
    assert s["num_alloc_retries"] == 0 and s["num_sync_all_streams"] == 0
    assert s["reserved_bytes.all.current"] == 60 * MiB
    a.free(C)


def test_gc_average_age_spares_younger_blocks(make_alloc):
    a = make_alloc("garbage_collection_threshold:0.5", profile="tiny-1gb")
    budget(a, 200)                          # gc threshold = 100 MiB
    A = a.malloc(30 * MiB)                  # clock 1
    B = a.malloc(30 * MiB)                  # clock 2
    a.free(A)                               # A stamped 2
    T = a.malloc(42 * MiB)                  # clock 3; no fit; total 60 <= 100: no GC; new segment (102)
    a.free(B)                               # B stamped 3
    rec = Recorder(a)
    Y = a.malloc(34 * MiB)                  # clock 4; no fit; GC: 102 > 100, target 2 MiB;
    # ages A = 2, B = 1 -> average 1.5 -> only A; reclaimed 30 >= 2 -> stop. B stays cached.
    assert segment_frees(rec) == [(A.ptr, 30 * MiB)]
    assert cur(a, "reserved_bytes") == (30 + 42 + 34) * MiB
    s = a.memory_stats()
    assert s["num_alloc_retries"] == 0 and s["num_sync_all_streams"] == 0
    a.free(T), a.free(Y)


def test_gc_needs_a_fraction(make_alloc):
    a = make_alloc("garbage_collection_threshold:0.5", profile="tiny-1gb")
    A = a.malloc(300 * MiB)
    a.free(A)
    rec = Recorder(a)
    B = a.malloc(400 * MiB)                 # no fraction: GC never runs, the cached 300 MiB stays
    assert segment_frees(rec) == []
    assert cur(a, "reserved_bytes") == 700 * MiB
    a.free(B)


def test_gc_without_threshold_falls_to_full_release(make_alloc):
    a = make_alloc(profile="tiny-1gb")
    budget(a, 120)
    A = a.malloc(40 * MiB)
    B = a.malloc(40 * MiB)
    a.free(A), a.free(B)
    C = a.malloc(60 * MiB)                  # 80 + 60 > 120; no GC -> full release + counted retry
    s = a.memory_stats()
    assert s["num_alloc_retries"] == 1 and s["num_sync_all_streams"] == 1
    a.free(C)


def test_gc_skips_split_blocks(make_alloc):
    a = make_alloc("garbage_collection_threshold:0.5", profile="tiny-1gb")
    budget(a, 60)                           # gc threshold 30 MiB
    x = a.malloc(5 * MiB)                   # clock 1: 20 MiB segment, split: its 15 MiB remainder is no candidate
    y = a.malloc(16 * MiB)                  # clock 2: does not fit the 15 MiB remainder: 16 MiB segment
    a.free(y)                               # stamped 2; total 36 > 30
    rec = Recorder(a)
    z = a.malloc(17 * MiB)                  # clock 3: no fit (15, 16); GC target 6: only y (age 1) qualifies
    assert segment_frees(rec) == [(y.ptr, 16 * MiB)]
    assert cur(a, "inactive_split_bytes") == 15 * MiB
    assert cur(a, "reserved_bytes") == (20 + 18) * MiB
    a.free(x), a.free(z)


# ----------------------------------------------------------------- alloc_block: the fraction limit
def test_fraction_limit_blocks_cudamalloc(make_alloc):
    a = make_alloc(profile="tiny-1gb")
    a.set_per_process_memory_fraction(0.5)           # 512 MiB allowed
    x = a.malloc(400 * MiB)
    calls = a.device.counters.malloc_calls
    with pytest.raises(ar.OutOfMemoryError) as err:
        a.malloc(200 * MiB)                          # 400 + 200 > 512: no cudaMalloc at all
    assert a.device.counters.malloc_calls == calls
    assert "512.00 MiB allowed; " in str(err.value)
    s = a.memory_stats()
    assert s["num_ooms"] == 1 and s["num_alloc_retries"] == 1
    assert_consistent(a)
    y = a.malloc(112 * MiB)                          # exactly up to the limit is fine
    a.free(x), a.free(y)


def test_fraction_half_of_h100(make_alloc):
    # test_set_per_process_memory_fraction: 0.499 * total fits, 0.5 * total does not
    a = make_alloc()
    total = a.device.info.total_memory
    a.set_per_process_memory_fraction(0.5)
    x = a.malloc(int(total * 0.499))
    a.free(x)
    a.empty_cache()
    with pytest.raises(ar.OutOfMemoryError, match="out of memory"):
        # 0.5 * total = 42,600,497,152 rounds up to 42,601,545,728 (2 MiB multiple) > allowed
        a.malloc(int(total * 0.5))


def test_fraction_zero_refuses_everything(make_alloc):
    a = make_alloc(profile="tiny-1gb")
    a.set_per_process_memory_fraction(0.0)
    with pytest.raises(ar.OutOfMemoryError, match=r"0 bytes allowed; "):
        a.malloc(4)


def test_set_and_get_fraction_errors_and_round_trip(make_alloc):
    a = make_alloc(profile="tiny-1gb")
    assert a.get_per_process_memory_fraction() == 1.0
    with pytest.raises(TypeError, match=r"^Invalid type for fraction argument, must be `float`$"):
        a.set_per_process_memory_fraction(1)
    with pytest.raises(TypeError, match=r"Invalid type for fraction argument"):
        a.set_per_process_memory_fraction("0.5")
    with pytest.raises(ValueError, match=r"^Invalid fraction value: -0\.1\. Allowed range: 0~1$"):
        a.set_per_process_memory_fraction(-0.1)
    with pytest.raises(ValueError, match=r"^Invalid fraction value: 1\.1\. Allowed range: 0~1$"):
        a.set_per_process_memory_fraction(1.1)
    assert a.get_per_process_memory_fraction() == 1.0       # unchanged by the failures
    rng = random.Random(7)
    total = a.device.info.total_memory
    for f in [1.0, 0.0] + [rng.random() for _ in range(10)]:
        a.set_per_process_memory_fraction(f)
        # getMemoryFraction: allowed_memory_maximum / totalGlobalMem, the bytes set divided back
        expected = 1.0 if f == 1.0 else int(f * total) / total
        assert a.get_per_process_memory_fraction() == expected
        assert abs(expected - f) * total < 1


# ------------------------------------------------------------------ OOM: malloc's OutOfMemoryError
def oom_regex(tried, total, free, allocated, unallocated, allowed=None):
    proc = r"(?:Including non-PyTorch memory, this process has (?P<proc>\d+\.\d\d [KMG]iB|\d+ bytes) " \
           r"memory in use\. )?"
    allowed_part = re.escape(f"{allowed} allowed; ") if allowed else ""
    return ("^" + re.escape(f"CUDA out of memory. Tried to allocate {tried}. GPU 0 has a total capacity of "
                            f"{total} of which {free} is free. ")
            + proc + allowed_part
            + re.escape(f"Of the allocated memory {allocated} is allocated by PyTorch, and {unallocated} is "
                        "reserved by PyTorch but unallocated. If reserved but unallocated memory is large try "
                        "setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  "
                        "See documentation for Memory Management  (" + URL + ")") + "$")


def test_two_half_memory_requests(make_alloc):
    a = make_alloc(profile="tiny-1gb")
    a.record_memory_history("all")
    total = a.device.info.total_memory
    half = total // 2                                    # 512 MiB
    x = a.malloc(half)
    with pytest.raises(ar.OutOfMemoryError) as err:
        a.malloc(half)
    assert isinstance(err.value, RuntimeError)
    free, total2 = a.device.mem_get_info()
    assert total2 == total
    s = a.memory_stats()
    msg = str(err.value)
    m = re.match(oom_regex(tried=fmt_size(half), total=fmt_size(total), free=fmt_size(free),
                           allocated=fmt_size(s["allocated_bytes.all.current"]),
                           unallocated=fmt_size(s["reserved_bytes.all.current"]
                                                - s["allocated_bytes.all.current"])), msg)
    assert m, msg
    if m.group("proc"):
        assert m.group("proc") == fmt_size(total - free)
    # by hand: "Tried to allocate 512.00 MiB ... capacity of 1024.00 MiB of which 448.00 MiB is free"
    assert "Tried to allocate 512.00 MiB. GPU 0 has a total capacity of 1024.00 MiB of which 448.00 MiB" in msg
    assert "Of the allocated memory 512.00 MiB is allocated by PyTorch, and 0 bytes is reserved" in msg
    assert s["num_ooms"] == 1 and s["num_alloc_retries"] == 1 and s["num_sync_all_streams"] == 1
    oom = [e for e in a.snapshot()["device_traces"][0] if e["action"] == "oom"]
    assert len(oom) == 1 and oom[0]["device_free"] == free and oom[0]["size"] == half
    assert "addr" not in oom[0]
    assert_consistent(a)
    a.free(x)
    y = a.malloc(half)                                   # the retry succeeds now
    assert y.ptr == x.ptr                                # the cached segment is reused
    assert_consistent(a)
    a.free(y)


def test_oom_message_reports_segment_size_and_reserved_unallocated(make_alloc):
    a = make_alloc(profile="tiny-1gb")
    keep = a.malloc(5 * MiB)                 # 20 MiB segment, 15 MiB reserved-but-unallocated
    big = a.malloc(900 * MiB)
    free0 = a.device.mem_get_info()[0]       # 1024 - 64 - 20 - 900 = 40 MiB
    assert free0 == 40 * MiB
    with pytest.raises(ar.OutOfMemoryError) as err:
        a.malloc(41 * MiB - 100)             # rounded 41 MiB - 0 (512 multiple) -> alloc_size 42 MiB
    msg = str(err.value)
    assert re.match(oom_regex(tried="42.00 MiB", total="1024.00 MiB", free="40.00 MiB",
                              allocated="905.00 MiB", unallocated="15.00 MiB"), msg), msg
    assert_consistent(a)
    a.free(keep), a.free(big)


def test_oom_trace_entry_uses_rounded_size(make_alloc):
    a = make_alloc(profile="tiny-1gb")
    rec = Recorder(a)
    with pytest.raises(ar.OutOfMemoryError, match=r"Tried to allocate 2\.00 GiB"):
        a.malloc(2 * GiB - 1000)             # rounded 2 GiB - 512; alloc_size 2 GiB
    free = a.device.mem_get_info()[0]
    ooms = [e for e in rec.events if e.action == "oom"]
    assert [(e.addr, e.size) for e in ooms] == [(free, 2 * GiB - 512)]


def test_oom_with_fraction_message(make_alloc):
    a = make_alloc(profile="tiny-1gb")
    budget(a, 100)
    with pytest.raises(ar.OutOfMemoryError) as err:
        a.malloc(101 * MiB)                  # alloc_size 102 MiB > 100 MiB allowed
    free = a.device.mem_get_info()[0]
    assert re.match(oom_regex(tried="102.00 MiB", total="1024.00 MiB", free=fmt_size(free),
                              allocated="0 bytes", unallocated="0 bytes", allowed="100.00 MiB"),
                    str(err.value)), str(err.value)


def test_allocator_consistent_after_many_ooms(make_alloc):
    a = make_alloc(profile="tiny-1gb")
    rng = random.Random(5)
    live = []
    ooms = 0
    for _ in range(150):
        if live and rng.random() < 0.4:
            a.free(live.pop(rng.randrange(len(live))))
        else:
            try:
                live.append(a.malloc(rng.choice([rng.randrange(1, 4 * MiB), rng.randrange(10 * MiB, 400 * MiB)])))
            except ar.OutOfMemoryError:
                ooms += 1
        assert_consistent(a)
    assert ooms > 0 and a.memory_stats()["num_ooms"] == ooms
    for x in live:
        a.free(x)


def test_block_gc_count_is_searches_since_the_block_became_free(make_alloc):
    """``Block::gc_count``: ``pool->get_free_blocks_call_count - gc_count_base``, the age
    garbage_collect_cached_blocks compares with the average (the clock ticks only when a memory
    fraction and garbage_collection_threshold are both set, in get_free_block)."""
    a = make_alloc("garbage_collection_threshold:0.5")
    a.set_per_process_memory_fraction(0.5)
    x = a.malloc(30 * MiB)
    a.free(x)
    (block,) = list(a.device_allocator.large_blocks)
    assert block.gc_count() == 0
    for _ in range(3):
        a.free(a.malloc(40 * MiB))           # each search ticks the large pool's clock
    assert block.gc_count() == a.device_allocator.large_blocks.get_free_blocks_call_count - block.gc_count_base
    assert block.gc_count() >= 3
