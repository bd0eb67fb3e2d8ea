"""Every policy under the same random workload keeps its invariants and gives everything back.

The workload: malloc / free / record_stream / empty_cache / synchronize and
busy kernels on two streams, drawn by hypothesis.  After every step:

* no two live allocations overlap;
* reserved >= allocated, and allocated is exactly the sum of the live sizes;
* the snapshot's segments add up to the same figures (where there are segments);
* the allocation count matches the live set (where the policy counts it);

each allocation is written (on its own stream or, after ``record_stream``, on
the other one) with its own byte, and at the end every live allocation still
holds its byte for the designs that order reuse after pending work (Direct
through cudaFree's sync, the stream-ordered pool through its rules).  BFC
ignores streams, so it is only held to the bookkeeping invariants; and after
``close()`` the device reports as much free memory as at the start.
"""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from allocator_ref.caching import OutOfMemoryError
from allocator_ref.device import SimDevice
from allocator_ref.policies import BFCAllocator, StreamOrderedAllocator
from allocator_ref.policies.registry import make_allocator, policy_names

KiB, MiB = 1024, 1024**2

SIZES = st.sampled_from([0, 1, 300, 4 * KiB, 100_000, MiB + 3, 3 * MiB, 9 * MiB, 40 * MiB])
STREAM = st.integers(0, 1)
OPS = st.one_of(
    st.tuples(st.just("malloc"), SIZES, STREAM),
    st.tuples(st.just("malloc"), SIZES, STREAM),          # twice as likely as the others
    st.tuples(st.just("free"), st.integers(0, 30)),
    st.tuples(st.just("record_stream"), st.integers(0, 30), STREAM),
    st.tuples(st.just("write"), st.integers(0, 30), STREAM),
    st.tuples(st.just("sleep"), STREAM, st.sampled_from([10.0, 500.0])),
    st.tuples(st.just("empty_cache")),
    st.tuples(st.just("synchronize")),
)

STREAM_SAFE = {"direct", "stream_ordered", "stream_ordered_threshold_0", "stream_ordered_switches_off"}
WRITE_BYTES = 64 * KiB      # enough to overlap a reused block; small enough to stay fast

FACTORIES = {
    # every registered design but PyTorch's own (its properties: test_caching_properties.py) ...
    # (and the torch_npu port of it, the same caching core: test_npu_allocator.py) ...
    **{name: (lambda d, name=name: make_allocator(d, name)) for name in policy_names()
       if name not in ("caching", "npu")},
    # ... and the settings that change what these properties exercise
    "stream_ordered_threshold_0": lambda d: StreamOrderedAllocator(d, release_threshold=0),
    "stream_ordered_switches_off": lambda d: StreamOrderedAllocator(
        d, follow_event_dependencies=False, allow_opportunistic=False, allow_internal_dependencies=False),
    "bfc_gc": lambda d: BFCAllocator(d, memory_limit=256 * MiB, garbage_collection=True),
}


def check_invariants(a) -> None:
    live = a.live_allocations()
    for left, right in zip(live, live[1:]):
        assert left.ptr + left.size <= right.ptr, f"{left} overlaps {right}"
    assert a.memory_allocated() == sum(x.size for x in live)
    assert a.memory_reserved() >= a.memory_allocated()
    assert a.max_memory_allocated() >= a.memory_allocated()
    assert a.max_memory_reserved() >= a.memory_reserved()
    # the keys this policy fills (the stream-ordered pool also returns PyTorch's unfilled zeros)
    stats = {k: v for k, v in a.memory_stats().items() if k in a.STAT_KEYS}
    if "allocation.all.current" in stats:
        assert stats["allocation.all.current"] == len(live)
    if "active_bytes.all.current" in stats:
        assert stats["active_bytes.all.current"] >= stats["allocated_bytes.all.current"]
    segments = a.segments()
    assert sum(s["total_size"] for s in segments) == a.memory_reserved()
    assert sum(s["allocated_size"] for s in segments) == a.memory_allocated()
    for s in segments:
        assert sum(b["size"] for b in s["blocks"]) == s["total_size"]
    # PyTorch's _check_memory_stat_consistency, for the keys this policy fills
    from_snapshot = {
        "segment.all.current": len(segments),
        "active_bytes.all.current": sum(s["active_size"] for s in segments),
        "requested_bytes.all.current": sum(s["requested_size"] for s in segments),
        "active.all.current": sum(b["state"] != "inactive" for s in segments for b in s["blocks"]),
    }
    for key, value in from_snapshot.items():
        if key in stats:
            assert stats[key] == value, f"{key} = {stats[key]} but the snapshot adds up to {value}"


def write(a, dev, x, stream, tags, slow=True) -> None:
    """A kernel writing x's own byte on ``stream`` (recorded first when it is not x's stream).

    ``slow``: queued behind a 300 us kernel, so the write lands late -- after
    a free and a reuse that do not wait for it.
    """
    if x and not x.freed:
        if stream is not x.stream:
            a.record_stream(x, stream)
        if slow:
            dev.sleep(stream, 300.0)
        dev.fill(x.ptr, min(x.size, WRITE_BYTES), tags[id(x)], stream)


def run(a, dev, ops) -> dict:
    streams = [dev.default_stream, dev.create_stream()]
    handed = []                                   # every allocation ever returned, freed or not
    tags = {}
    for op in ops:
        kind = op[0]
        if kind == "malloc":
            try:
                x = a.malloc(op[1], streams[op[2]])
            except OutOfMemoryError:
                continue
            handed.append(x)
            tags[id(x)] = len(handed) % 255 + 1
            write(a, dev, x, x.stream, tags, slow=False)
        elif kind == "write" and handed:
            write(a, dev, handed[op[1] % len(handed)], streams[op[2]], tags)
        elif kind == "free" and handed:
            x = handed[op[1] % len(handed)]
            if not x.freed:
                a.free(x)
        elif kind == "record_stream" and handed:
            x = handed[op[1] % len(handed)]
            if not x.freed and streams[op[2]] is not x.stream:
                a.record_stream(x, streams[op[2]])
        elif kind == "sleep":
            dev.sleep(streams[op[1]], op[2])
        elif kind == "empty_cache":
            a.empty_cache()
        elif kind == "synchronize":
            a.synchronize()
        check_invariants(a)
    return tags


def data_intact(a, dev, tags) -> bool:
    dev.synchronize()
    return all(dev.read(x.ptr, min(x.size, WRITE_BYTES)) == bytes([tags[id(x)]]) * min(x.size, WRITE_BYTES)
               for x in a.live_allocations())


@pytest.mark.parametrize("name", sorted(FACTORIES))
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=st.lists(OPS, max_size=60))
@example(ops=[("malloc", 4 * KiB, 1), ("write", 0, 1), ("free", 0), ("malloc", 4 * KiB, 0)])  # LATE_WRITE
def test_random_workload_keeps_invariants_and_returns_everything(name, ops):
    dev = SimDevice("tiny-1gb")
    try:
        start = dev.mem_get_info()[0]
        a = FACTORIES[name](dev)
        tags = run(a, dev, ops)
        if name in STREAM_SAFE:
            assert data_intact(a, dev, tags), "a late write from another stream reached reused memory"
        a.close()
        assert dev.mem_get_info()[0] == start
        assert a.memory_reserved() == 0 and a.memory_allocated() == 0
    finally:
        dev.close()


LATE_WRITE = [("malloc", 4 * KiB, 1), ("write", 0, 1), ("free", 0), ("malloc", 4 * KiB, 0)]


@pytest.mark.parametrize("name,intact", [("bfc", False), ("stream_ordered", True), ("direct", True)])
def test_the_data_check_has_teeth(name, intact):
    """The late-write sequence above really corrupts BFC's reused block, and not the others'."""
    dev = SimDevice("tiny-1gb")
    try:
        a = FACTORIES[name](dev)
        tags = run(a, dev, LATE_WRITE)
        assert data_intact(a, dev, tags) is intact
        a.close()
    finally:
        dev.close()
