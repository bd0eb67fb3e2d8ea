"""Invariants under long random workloads (_check_memory_stat_consistency of
test/test_cuda_multigpu.py, and issue 3's property list).

* test_allocator_fuzz restated: random.seed(123), 10,000 actions with weights
  alloc 1 : free 1 (0 when nothing is live) : empty_cache 0.1, int32 tensors of
  randrange(2 MiB/4, 20 MiB/4) elements, live total kept below 1024**3/40 elements.
  The consistency invariant is checked after EVERY action (snapshot built with
  a.segments(), the cheap path), with expandable segments off and on.
* hypothesis: random programs over two streams and both pools.
"""
from __future__ import annotations

import random
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import allocator_ref as ar
from caching_helpers import MiB, check_segments, make_alloc  # noqa: F401


def live_ranges_disjoint(live):
    spans = sorted((x.ptr, x.ptr + x.size) for x in live)
    for (s0, e0), (s1, _) in zip(spans, spans[1:]):
        assert e0 <= s1, f"live allocations overlap at {s1:#x}"


@pytest.mark.parametrize("expandable", [False, True])
def test_allocator_fuzz(make_alloc, expandable):
    a = make_alloc(f"expandable_segments:{expandable}")
    free0 = a.device.mem_get_info()[0]
    rng = random.Random(123)          # the same stream as random.seed(123) + module functions
    mem = []                          # (counter, allocation, elements)
    total = 0
    c = 0
    t0 = time.perf_counter()

    def alloc():
        nonlocal total, c
        b = rng.randrange(2 * 1024 * 1024 // 4, 20 * 1024 * 1024 // 4)
        x = a.malloc(b * 4)
        assert x.requested_size == b * 4 and x.size >= b * 4
        mem.append((c, x, b))
        c += 1
        total += b

    def free():
        nonlocal total
        idx = rng.randrange(0, len(mem))
        _, x, b = mem.pop(idx)
        a.free(x)
        total -= b

    choices = [alloc, free, a.empty_cache]
    for _ in range(10_000):
        while total >= 1024 * 1024 * 1024 / (4 * 10):
            free()
        (action,) = rng.choices(choices, weights=[1, 1 if mem else 0, 0.1])
        action()
        check_segments(a.segments(), a.memory_stats())
    live_ranges_disjoint([x for _, x, _ in mem])
    s = a.memory_stats()
    assert s["num_ooms"] == 0
    assert s["allocated_bytes.all.current"] == sum(x.size for _, x, _ in mem)
    assert s["requested_bytes.all.current"] == sum(b * 4 for _, _, b in mem)
    for _, x, _ in mem:
        a.free(x)
    a.empty_cache()
    assert a.memory_stats()["reserved_bytes.all.current"] == 0
    assert a.device.mem_get_info()[0] == free0
    elapsed = time.perf_counter() - t0
    print(f"fuzz expandable={expandable}: 10,000 actions, consistency after each, {elapsed:.1f} s")


# ------------------------------------------------------------------ hypothesis
SIZES = st.one_of(st.integers(1, 4096), st.integers(4097, 2 * MiB), st.integers(2 * MiB, 40 * MiB))
OPS = st.lists(st.one_of(
    st.tuples(st.just("alloc"), SIZES, st.integers(0, 1)),
    st.tuples(st.just("free"), st.integers(0, 10_000), st.just(0)),
    st.tuples(st.just("record"), st.integers(0, 10_000), st.integers(0, 1)),
    st.tuples(st.just("sync"), st.just(0), st.just(0)),
    st.tuples(st.just("empty"), st.just(0), st.just(0)),
), min_size=1, max_size=60)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=OPS, conf=st.sampled_from(["", "expandable_segments:True", "max_split_size_mb:20",
                                      "roundup_power2_divisions:4,large_segment_size_mb:24"]))
def test_random_programs_keep_every_invariant(ops, conf):
    dev = ar.SimDevice("tiny-1gb")
    try:
        a = ar.CachingAllocator(dev, conf)
        free0 = dev.mem_get_info()[0]
        streams = [dev.default_stream, dev.create_stream()]
        live = []
        for op, arg, k in ops:
            if op == "alloc":
                try:
                    live.append(a.malloc(arg, stream=streams[k]))
                except ar.OutOfMemoryError:
                    pass
            elif op == "free" and live:
                a.free(live.pop(arg % len(live)))
            elif op == "record" and live:
                x = live[arg % len(live)]
                dev.sleep(streams[1 - k], 50)
                a.record_stream(x, streams[1 - k])
            elif op == "sync":
                dev.synchronize()
            elif op == "empty":
                a.empty_cache()
            segs = a.segments()
            stats = a.memory_stats()
            check_segments(segs, stats)                        # tiling, free neighbours, 6.3
            ar.check_stats_consistency(segs, stats)
            live_ranges_disjoint(live)                          # live blocks never overlap
            assert stats["reserved_bytes.all.current"] >= stats["allocated_bytes.all.current"]
            # every live allocation is an active_allocated block of its own stream
            blocks = {b["address"]: (b, s) for s in segs for b in s["blocks"]}
            for x in live:
                b, s = blocks[x.ptr]
                assert b["state"] == "active_allocated" and b["size"] == x.size
                assert s["stream"] == x.stream.handle
        for x in live:
            a.free(x)
        a.empty_cache()
        st_ = a.memory_stats()
        assert st_["reserved_bytes.all.current"] == 0 and st_["active_bytes.all.current"] == 0
        assert a.segments() == []
        assert dev.mem_get_info()[0] == free0                   # every byte back to the device
    finally:
        dev.close()
