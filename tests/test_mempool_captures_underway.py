"""An open ``use_mem_pool`` changes the whole allocator (pytorch/pytorch#175015).

``use_mem_pool`` calls ``beginAllocateToPool`` (torch/cuda/memory.py ->
``_cuda_beginAllocateCurrentThreadToPool``), which pushes the pool on ``captures_underway`` exactly
as ``CUDAGraph::capture_begin`` does.  Every branch of ``c10/cuda/CUDACachingAllocator.cpp`` (2.11)
that tests ``captures_underway.empty()`` then takes its graph-capture side, for *every* thread:

* ``malloc`` skips ``process_events``: cross-stream frees are not recycled;
* ``free`` of a block with ``stream_uses`` goes to ``deferred_blocks`` instead of ``insert_events``,
  and ``recordStream`` files the stream in ``block_to_cudagraph_stream_uses``, whose uses
  ``remove_cudagraph_stream_uses`` later drops ("all streams recorded during cudagraph must have
  completed" -- true for a graph, not for a MemPool);
* ``malloc``'s last rung (``release_cached_blocks`` + retry) is skipped;
* ``release_cached_blocks`` (``empty_cache()``) leaves the default pools alone.

Also here: ``release_available_cached_blocks`` has no such guard and can ``cudaFree`` during a real
capture (pytorch/pytorch#159594), and how a pool's expandable segments appear in
``memory_snapshot(pool_id)`` (PyTorch's TestMemPool under test_cuda_expandable_segments.py).
"""
from __future__ import annotations

import threading
from contextlib import contextmanager

import pytest

import allocator_ref as ar
from allocator_ref.device import CudaError
from caching_helpers import MiB, assert_consistent, make_alloc  # noqa: F401


@contextmanager
def pool_open_in_another_thread(a):
    """Another thread holds ``with use_mem_pool(pool):`` open while the body runs in this one."""
    pool = ar.MemPool(a)
    opened, leave = threading.Event(), threading.Event()

    def hold():
        with a.use_mem_pool(pool):
            opened.set()
            leave.wait(10)
    t = threading.Thread(target=hold)
    t.start()
    opened.wait(10)
    try:
        yield pool
    finally:
        leave.set()
        t.join(10)


def busy_stream(a, us=1000.0):
    s = a.device.create_stream()
    a.device.sleep(s, us)              # a long kernel on s
    return s


def test_process_events_is_skipped_while_any_thread_holds_a_mem_pool(make_alloc):
    """malloc: ``if (C10_LIKELY(captures_underway.empty())) process_events(context);``"""
    a = make_alloc()
    x = a.malloc(4 * MiB)
    a.record_stream(x, busy_stream(a))
    a.free(x)                                  # an event on the busy stream
    a.device.synchronize()                     # the stream's work is done: the block could be reused
    with pool_open_in_another_thread(a):
        y = a.malloc(4 * MiB)                  # this thread, default pool
        assert y.ptr != x.ptr and a.device_allocator.cuda_events != {}      # not recycled: process_events never ran
    z = a.malloc(4 * MiB)                      # the context is closed: process_events runs
    assert z.ptr == x.ptr and a.device_allocator.cuda_events == {}
    a.free(y), a.free(z)
    assert_consistent(a)


def test_record_stream_free_is_deferred_under_a_mem_pool(make_alloc):
    """free: ``if (!block->stream_uses.empty()) { if (!captures_underway.empty()) deferred_blocks...``"""
    a = make_alloc()
    s2 = busy_stream(a)
    pool = ar.MemPool(a)
    with a.use_mem_pool(pool):
        x = a.malloc(4 * MiB)
        a.record_stream(x, s2)
        a.free(x)
        assert x._block in a.device_allocator.deferred_blocks and a.device_allocator.cuda_events == {}     # no event was recorded
    a.free(a.malloc(512))                      # next malloc without a context: insert_events_deferred...
    assert a.device_allocator.deferred_blocks == {}


def test_uses_recorded_under_a_mem_pool_are_dropped_when_the_deferred_free_runs(make_alloc):
    """recordStream files the stream in block_to_cudagraph_stream_uses while captures_underway is
    non-empty; insert_events_deferred_until_no_capture -> remove_cudagraph_stream_uses drops it, so
    the block is freed without waiting for that stream: its memory can be handed out while the
    stream still reads it."""
    a = make_alloc()
    s2 = busy_stream(a, 5000.0)
    pool = ar.MemPool(a)
    with a.use_mem_pool(pool):
        x = a.malloc(4 * MiB)
        a.record_stream(x, s2)
        a.free(x)
    a.free(a.malloc(512))                      # process_events: the deferred free runs, s2 forgotten
    still_running = a.device.create_event(timing=False)
    still_running.record(s2)
    assert not still_running.query()           # s2's kernel has not finished ...
    with a.use_mem_pool(pool):
        y = a.malloc(4 * MiB)
    assert y.ptr == x.ptr                      # ... and its memory is already someone else's
    a.free(y)


def test_the_full_flush_rung_is_skipped_under_a_mem_pool(make_alloc):
    """malloc: ``|| (C10_LIKELY(captures_underway.empty()) && release_cached_blocks(...) && alloc_block(..., true, ...))``
    (pytorch/pytorch#159674): a cached default-pool block that the last rung would free stays."""
    def run(open_pool):
        a = make_alloc(profile="tiny-1gb")
        a.set_per_process_memory_fraction(80 / 1024)
        other = a.device.create_stream()
        a.free(a.malloc(50 * MiB, other))      # cached on another stream: no reuse for this one
        if not open_pool:
            y = a.malloc(50 * MiB)             # rung 6: release_cached_blocks, retry: fits
            return a, y
        with pool_open_in_another_thread(a):
            with pytest.raises(ar.OutOfMemoryError):
                a.malloc(50 * MiB)
        return a, None
    a, y = run(open_pool=False)
    assert a.memory_stats()["num_alloc_retries"] == 1
    a, _ = run(open_pool=True)
    assert a.memory_stats()["num_alloc_retries"] == 0 and a.memory_stats()["num_ooms"] == 1


def test_empty_cache_skips_the_default_pools_under_a_mem_pool(make_alloc):
    """release_cached_blocks: ``if (mempool_id == {0,0} && captures_underway.empty())`` -- the default
    pools are released only when no pool is open anywhere (pytorch/pytorch#158152 made it silent)."""
    a = make_alloc()
    a.free(a.malloc(4 * MiB))
    with pool_open_in_another_thread(a):
        a.empty_cache()
        assert a.memory_reserved() == 20 * MiB
    a.empty_cache()
    assert a.memory_reserved() == 0


def test_release_available_cached_blocks_can_cudafree_during_capture(make_alloc):
    """malloc's rung 5 has no captures_underway guard: release_available_cached_blocks ->
    release_block -> cudaFree while the stream captures, which fails and invalidates the capture
    (pytorch/pytorch#159594; the guard proposed in #187795 is not in 2.11)."""
    a = make_alloc("max_split_size_mb:100", profile="tiny-1gb")
    a.set_per_process_memory_fraction(300 / 1024)
    s = a.device.create_stream()
    shared = ar.graph_pool_handle()
    g1 = ar.CUDAGraph(a)
    with ar.graph(g1, pool=shared, stream=s) as cs:
        a.free(a.malloc(200 * MiB, cs))        # leaves a free 200 MiB oversize block in the pool
    g2 = ar.CUDAGraph(a)
    g2.capture_begin(s, pool=shared)
    # 150 MiB: the 200 MiB block is too big for it (>= size + max_non_split_rounding_size), a new
    # segment is over the fraction, so rung 5 releases the cached 200 MiB block: a cudaFree.
    with pytest.raises(CudaError, match="cudaErrorStreamCaptureUnsupported.*cudaFree|cudaFree.*capturing"):
        a.malloc(150 * MiB, s)
    with pytest.raises(CudaError, match="Invalidated"):
        g2.capture_end()


# ------------------------------------------------ TestMemPool under expandable segments
def test_pytorch_segment_asserts_cannot_hold_with_expandable_segments(make_alloc):
    """PyTorch's test_cuda_expandable_segments.py imports TestMemPool, so test_nested_mempool and
    test_mempool_no_split run with expandable_segments:True.  In 2.11 their segment counts cannot
    hold there: ``snapshot(mempool_id)`` lists only ``get_private_pool_head_blocks`` (blocks with
    ``prev == nullptr``), and ``find_expandable_block`` maps a pool's next 20 MiB page right behind
    the last one on the same stream (the unmapped rest of one reservation), so the second block has a
    ``prev`` and both show as ONE segment.  The reference gives what that source gives."""
    a = make_alloc("expandable_segments:True")
    p1, p2, p3 = ar.MemPool(a), ar.MemPool(a), ar.MemPool(a)
    data = []
    with a.use_mem_pool(p1):
        data.append(a.malloc(20 * MiB))
        with a.use_mem_pool(p2):
            data.append(a.malloc(20 * MiB))
            with a.use_mem_pool(p3):
                data.append(a.malloc(20 * MiB))
            data.append(a.malloc(20 * MiB))
        data.append(a.malloc(20 * MiB))
    counts = [len(a.segments(mempool_id=p.id)) for p in (p1, p2, p3)]
    assert counts != [2, 2, 1]                 # test_nested_mempool's assertEqual fails here ...
    assert counts == [1, 1, 1]                 # ... because each pool's two blocks share one range
    (seg,) = a.segments(mempool_id=p1.id)
    assert [b["size"] for b in seg["blocks"]] == [20 * MiB, 20 * MiB] and seg["is_expandable"]
    split, no_split = ar.MemPool(a), ar.MemPool(a, no_split=True)
    for _ in range(2):
        for p in (split, no_split):
            with a.use_mem_pool(p):
                data.append(a.malloc(4 * MiB))
    # test_mempool_no_split: `len(pool_no_split.snapshot()) > len(pool_split.snapshot())` is 1 > 1
    assert len(no_split.snapshot()) == len(split.snapshot()) == 1
    assert [len(s["blocks"]) for s in no_split.snapshot()] == [2]    # and "1 block per segment" fails
    for x in data:
        a.free(x)


def test_destroying_a_pool_while_another_is_open_hits_the_sync_assert(make_alloc):
    """MemPool::~MemPool -> emptyCache(id) -> release_cached_blocks(id) -> synchronize_and_free_events(
    pool), whose ``TORCH_INTERNAL_ASSERT(captures_underway.empty())`` fails while any other pool or
    capture is open (the assert pytorch/pytorch#180395 reports)."""
    a = make_alloc()
    doomed = ar.MemPool(a)
    with a.use_mem_pool(doomed):
        a.free(a.malloc(4 * MiB))
    with pool_open_in_another_thread(a) as other:
        with pytest.raises(RuntimeError, match="capture is underway") as info:
            doomed.close()
        assert str(other.id) in "".join(getattr(info.value, "__notes__", []))
    a.empty_cache()                            # nothing open any more: the released pool goes
    assert doomed.id not in a.device_allocator.graph_pools
