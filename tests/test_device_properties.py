"""Property tests (hypothesis) on the simulated device's bookkeeping.

Whatever sequence of malloc / free / malloc_async / free_async a program makes:
live ranges never overlap, the device never hands out more than its capacity,
and freeing everything brings mem_get_info back to where it started.
"""
from __future__ import annotations

import time

from hypothesis import given, settings
from hypothesis import strategies as st

from allocator_ref.device import CudaOutOfMemoryError, SimDevice
from allocator_ref.device.sim.address_space import AddressSpace

MiB = 1 << 20

sizes = st.one_of(st.integers(1, 4096), st.integers(4096, 4 * MiB), st.integers(4 * MiB, 300 * MiB))
ops = st.lists(st.tuples(st.sampled_from(["malloc", "free", "malloc_async", "free_async", "sync"]),
                         sizes, st.integers(0, 10**6)), max_size=80)


def _assert_no_overlap(ranges):
    ranges = sorted(ranges)
    for (s1, e1), (s2, e2) in zip(ranges, ranges[1:]):
        assert e1 <= s2, f"[{s1:#x},{e1:#x}) overlaps [{s2:#x},{e2:#x})"


@settings(max_examples=150, deadline=None)
@given(ops)
def test_random_sequences_never_overlap_never_exceed_and_free_back(sequence):
    dev = SimDevice("tiny-1gb")
    s = dev.create_stream()
    free0, total = dev.mem_get_info()
    live: dict[int, tuple[int, str]] = {}
    for op, size, pick in sequence:
        if op in ("malloc", "malloc_async"):
            try:
                p = dev.malloc(size) if op == "malloc" else dev.malloc_async(size, s)
            except CudaOutOfMemoryError:
                continue                         # allowed: the device stays usable
            live[p] = (size, op)
        elif op in ("free", "free_async") and live:
            p = sorted(live)[pick % len(live)]
            _, kind = live.pop(p)
            dev.free_async(p, s) if kind == "malloc_async" else dev.free(p)
        elif op == "sync":
            dev.synchronize()
        ranges = [(p, p + dev.allocation_size(p)) for p in live]
        _assert_no_overlap(ranges)
        for p, (size, _) in live.items():
            assert dev.allocation_size(p) >= size
        free, _ = dev.mem_get_info()
        assert 0 <= free <= total - dev.info.context_reserve
        assert sum(e - b for b, e in ranges) <= total - dev.info.context_reserve - free
    for p, (_, kind) in list(live.items()):
        dev.free_async(p, s) if kind == "malloc_async" else dev.free(p)
    dev.synchronize()                            # release threshold 0: the pool empties
    assert dev.mempool_reserved() == 0
    assert dev.mem_get_info()[0] == free0
    dev.close()


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.integers(1, 64), st.sampled_from([1, 8, 64])), max_size=120))
def test_address_space_keeps_holes_and_live_ranges_disjoint(steps):
    space = AddressSpace(0x1000, 1 << 20)
    live = []
    for allocate, units, align in steps:
        if allocate:
            start = space.allocate(units * 512, align * 512)
            if start is not None:
                assert start % (align * 512) == 0
                live.append(start)
        elif live:
            space.release(live.pop(units % len(live)))
        holes = list(space._holes.items())
        _assert_no_overlap(holes + space.live_ranges())
        covered = sum(e - s for s, e in holes) + sum(e - s for s, e in space.live_ranges())
        assert covered <= 1 << 20
    for start in live:
        space.release(start)
    assert list(space._holes.items()) == [(0x1000, 0x1000 + (1 << 20))]   # everything merged back


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["allocate", "claim", "release"]), st.integers(0, 2047),
                          st.integers(1, 64)), max_size=120))
def test_claimed_addresses_mix_with_best_fit(steps):
    """Addresses requested by a trace (claim) and best-fit ones never collide."""
    base, size = 0x10000, 1 << 20
    space = AddressSpace(base, size)
    live = []
    for op, where, units in steps:
        length = units * 512
        if op == "allocate":
            start = space.allocate(length, 512)
            if start is not None:
                live.append(start)
        elif op == "claim":
            start = base - 4096 + where * 512          # sometimes outside the managed window
            if space.overlapping(start, length) is None:
                space.claim(start, length)
                live.append(start)
        elif live:
            space.release(live.pop(where % len(live)))
        _assert_no_overlap(list(space._holes.items()) + space.live_ranges())
        assert sorted(space._by_size) == sorted((e - s, s) for s, e in space._holes.items())
    for start in live:
        space.release(start)
    assert list(space._holes.items()) == [(base, base + size)]


def test_malloc_free_stay_fast_with_many_live_allocations():
    """The replay tool makes thousands of calls per second of budget: no per-byte work."""
    dev = SimDevice("h100-80gb")
    t0 = time.perf_counter()
    ptrs = [dev.malloc(1 + (i * 7919) % (8 * MiB)) for i in range(5000)]
    for p in ptrs[::2]:
        dev.free(p)
    for i in range(2500):
        ptrs.append(dev.malloc(512 + i))
    elapsed = time.perf_counter() - t0
    assert elapsed < 3.0, f"10,000 calls took {elapsed:.2f} s"
    dev.close()
