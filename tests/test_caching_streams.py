"""Streams: ownership, record_stream, events (recordStream, insert_events, process_events in
CUDACachingAllocator.cpp; test_record_stream, test_record_stream_on_shifted_view and
test_caching_allocator_record_stream_oom in test/test_cuda.py)."""
from __future__ import annotations

import pytest

import allocator_ref as ar
from caching_helpers import MiB, Recorder, assert_consistent, cur, make_alloc, seg_blocks  # noqa: F401

LONG = 1e9    # a kernel of 1000 virtual seconds: its events stay pending until a sync


def test_record_stream_block_not_reused_too_soon(make_alloc):
    a = make_alloc(profile="tiny-1gb")
    dev = a.device
    side = dev.create_stream()
    x = a.malloc(1000)                       # 1024 B block at the segment's start
    dev.sleep(side, LONG)                    # side stream busy
    a.record_stream(x, side)
    a.free(x)                                # pending: an event on `side` guards it
    y = a.malloc(1000)
    assert y.ptr != x.ptr                    # not reused too soon
    assert y.ptr == x.ptr + 1024             # carved from the remainder instead
    dev.synchronize()
    z = a.malloc(1000)                       # process_events frees x's block; best fit = it
    assert z.ptr == x.ptr
    assert z.stream is dev.default_stream
    a.free(y), a.free(z)


def test_record_stream_after_stream_sync_reused_on_its_own_stream(make_alloc):
    a = make_alloc(profile="tiny-1gb")
    dev = a.device
    side = dev.create_stream()
    x = a.malloc(5 * MiB)
    a.record_stream(x, side)
    dev.sleep(side, LONG)                    # work queued after the use... the event is recorded at free
    a.free(x)
    side.synchronize()
    y = a.malloc(5 * MiB)
    assert y.ptr == x.ptr
    assert cur(a, "segment") == 1
    a.free(y)


def test_record_stream_on_own_stream_is_ignored(make_alloc):
    a = make_alloc(profile="tiny-1gb")
    dev = a.device
    dev.sleep(None, LONG)
    x = a.malloc(1000)
    a.record_stream(x, dev.default_stream)
    a.free(x)
    assert seg_blocks(a) == [(2 * 1024 * 1024, "inactive")]   # freed at once and merged
    assert cur(a, "active_bytes") == 0


def test_record_stream_through_offset_protects_whole_block(make_alloc):
    # test_record_stream_on_shifted_view: the allocation (not ptr+offset) is recorded
    a = make_alloc(profile="tiny-1gb")
    dev = a.device
    side = dev.create_stream()
    x = a.malloc(4096)
    dev.sleep(side, LONG)
    a.record_stream(x, side)
    a.free(x)
    # every request that would fit anywhere inside x's block must avoid it
    ys = [a.malloc(512) for _ in range(8)]
    for y in ys:
        assert not (x.ptr <= y.ptr < x.ptr + 4096)
    dev.synchronize()
    z = a.malloc(4096)
    assert z.ptr == x.ptr
    for y in ys:
        a.free(y)
    a.free(z)


def test_pending_free_state_and_stats(make_alloc):
    a = make_alloc(profile="tiny-1gb")
    dev = a.device
    side = dev.create_stream()
    a.record_memory_history("all")
    x = a.malloc(5 * MiB)
    dev.sleep(side, LONG)
    a.record_stream(x, side)
    a.free(x)
    s = a.memory_stats()
    # free request done: allocated dropped (free), active not (free_block waits for the events)
    assert s["allocated_bytes.all.current"] == 0 and s["allocation.all.current"] == 0
    assert s["active_bytes.all.current"] == 5 * MiB and s["active.all.current"] == 1
    assert s["requested_bytes.all.current"] == 5 * MiB
    assert seg_blocks(a) == [(5 * MiB, "active_pending_free"), (15 * MiB, "inactive")]
    assert s["inactive_split_bytes.all.current"] == 15 * MiB
    seg = a.segments()[0]
    assert seg["allocated_size"] == 0 and seg["active_size"] == 5 * MiB and seg["requested_size"] == 5 * MiB
    assert_consistent(a)
    acts = [e["action"] for e in a.snapshot()["device_traces"][0] if e["action"] != "snapshot"]
    assert acts == ["segment_alloc", "alloc", "free_requested"]
    dev.synchronize()
    a.malloc(512).__class__                  # any malloc runs process_events
    acts = [e["action"] for e in a.snapshot()["device_traces"][0] if e["action"] != "snapshot"]
    assert acts[3] == "free_completed"
    s = a.memory_stats()
    assert s["active_bytes.large_pool.current"] == 0
    assert s["requested_bytes.large_pool.current"] == 0


def test_empty_cache_waits_for_pending_events(make_alloc):
    a = make_alloc(profile="tiny-1gb")
    dev = a.device
    side = dev.create_stream()
    x = a.malloc(5 * MiB)
    dev.sleep(side, LONG)
    a.record_stream(x, side)
    a.free(x)
    a.empty_cache()                           # synchronize_and_free_events, then release
    s = a.memory_stats()
    assert s["num_sync_all_streams"] == 1
    assert s["reserved_bytes.all.current"] == 0 and s["active_bytes.all.current"] == 0
    assert a.segments() == []


def test_two_streams_record_stream_needs_both(make_alloc):
    a = make_alloc(profile="tiny-1gb")
    dev = a.device
    s1, s2 = dev.create_stream(), dev.create_stream()
    x = a.malloc(1000)
    dev.sleep(s1, 10)
    dev.sleep(s2, LONG)
    a.record_stream(x, s1)
    a.record_stream(x, s2)
    a.free(x)
    s1.synchronize()
    y = a.malloc(1000)
    assert y.ptr != x.ptr                     # s2's event still pending
    s2.synchronize()
    z = a.malloc(1000)
    assert z.ptr == x.ptr
    a.free(y), a.free(z)


def test_blocks_of_different_streams_never_reused_or_merged(make_alloc):
    a = make_alloc(profile="tiny-1gb")
    dev = a.device
    side = dev.create_stream()
    x = a.malloc(1000, stream=side)
    assert x.stream is side
    a.free(x)
    y = a.malloc(1000)                        # default stream: the side stream's cached block is not used
    assert cur(a, "segment") == 2
    segs = sorted(a.segments(), key=lambda s: s["stream"])
    assert [s["stream"] for s in segs] == [0, side.handle]
    a.free(y)
    z = a.malloc(1000, stream=side)           # back on side: its own block again
    assert z.ptr == x.ptr
    a.free(z)
    # large pool too
    p = a.malloc(5 * MiB, stream=side)
    a.free(p)
    q = a.malloc(5 * MiB)
    assert q.ptr != p.ptr
    assert cur(a, "segment") == 4
    a.free(q)
    for seg in a.segments():
        assert len(seg["blocks"]) == 1        # each merged within itself, never across streams
    a.empty_cache()
    assert a.segments() == []


def test_record_stream_heavy_loop_does_not_oom(make_alloc):
    # test_caching_allocator_record_stream_oom: 160 MB blocks kept alive by a busy side stream;
    # when memory runs out the full release waits for their events instead of raising.
    a = make_alloc(profile="tiny-1gb")
    dev = a.device
    side = dev.create_stream()
    y = a.malloc(160 * MiB, stream=side)
    for _ in range(30):
        x = a.malloc(160 * MiB)
        dev.sleep(side, LONG)                 # "y += x" on the side stream
        a.record_stream(x, side)
        a.free(x)
        assert_consistent(a)
    s = a.memory_stats()
    assert s["num_ooms"] == 0
    assert s["num_alloc_retries"] >= 1 and s["num_sync_all_streams"] >= 1
    a.free(y)


def test_stream_of_another_device_is_rejected(make_alloc):
    a = make_alloc(profile="tiny-1gb")
    other = ar.SimDevice("tiny-1gb")
    foreign = other.create_stream()
    before = a.memory_stats()
    with pytest.raises(ar.CudaError):
        a.malloc(1000, stream=foreign)
    x = a.malloc(1000)
    with pytest.raises(ar.CudaError):
        a.record_stream(x, foreign)
    a.free(x)
    assert a.memory_stats()["num_ooms"] == before["num_ooms"]
    other.close()
