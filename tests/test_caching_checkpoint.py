"""Checkpointing a private pool: ``getCheckpointState`` / ``setCheckpointPoolState``.

Restated from ``c10/cuda/CUDACachingAllocator.cpp`` (Note [Checkpointing PrivatePoolState],
``getCheckpointState``, ``freeBlocksAllocatedToPool``, ``setSegmentStateToCheckpoint``,
``setCheckpointPoolState``) and ``NativeCachingAllocator::setCheckpointPoolState`` (the
``CheckpointDelta``), which ``torch/_inductor/cudagraph_trees.py`` calls through
``torch._C._cuda_getCheckpointState`` / ``_cuda_setCheckpointPoolState``.
"""
from __future__ import annotations

import pytest

import allocator_ref as ar
from allocator_ref.caching.checkpoint import PrivatePoolState
from allocator_ref.caching.pools import current_thread_filter
from caching_helpers import MiB, assert_consistent, make_alloc  # noqa: F401


def layout(a, pool):
    return [(seg["address"], [(b["address"], b["size"], b["state"]) for b in seg["blocks"]])
            for seg in a.segments(mempool_id=pool)]


def recorded(a, mode=""):
    """One recording into a shared pool: a 6 MiB temporary (freed) and a 2 MiB output (kept)."""
    s = a.device.create_stream()
    pool = ar.graph_pool_handle()
    g = ar.CUDAGraph(a)
    with ar.graph(g, pool=pool, stream=s) as cs:
        tmp = a.malloc(6 * MiB, cs)
        out = a.malloc(2 * MiB, cs)
        a.free(tmp)
    return g, pool, s, out


@pytest.mark.parametrize("conf", ["", "expandable_segments:True"])
def test_set_checkpoint_puts_the_pool_back_and_reports_the_delta(make_alloc, conf):
    """setCheckpointPoolState frees what is allocated now (ptrs_freed), re-creates what the checkpoint
    had allocated (allocations_created) and leaves the pool's segments block for block as they were."""
    a = make_alloc(conf)
    g, pool, s, out = recorded(a)
    state = a.get_checkpoint_state(pool)
    before = layout(a, pool)
    a.free(out)                                    # the output died between replays ...
    a.device_allocator.begin_allocate_to_pool(pool, current_thread_filter())
    x = a.malloc(10 * MiB, s)                      # ... and something else took the pool's memory
    a.device_allocator.end_allocate_to_pool(pool)
    a.device_allocator.release_pool(pool)
    assert layout(a, pool) != before
    delta = a.set_checkpoint_pool_state(state)
    assert layout(a, pool) == before
    assert delta.ptrs_freed == [x.ptr] and x.freed              # x's tensor is stale now
    (created,) = delta.allocations_created
    assert (created.ptr, created.size) == (out.ptr, out.size) and not created.freed
    # setSegmentStateToCheckpoint passes block_state.size as orig_size: requested size is lost
    assert created.requested_size == created.size
    assert a.memory_allocated() == created.size
    assert_consistent(a)
    a.free(created)
    g.reset()


def test_checkpoint_holds_every_block_of_each_segment(make_alloc):
    """PrivatePoolState: one SegmentState per head block (get_private_pool_head_blocks), one BlockState
    per block with stream, size, ptr, allocated and gc_count_base."""
    a = make_alloc()
    g, pool, s, out = recorded(a)
    state = a.get_checkpoint_state(pool)
    assert state.owner_id == pool
    (seg,) = state.segments
    assert [(b.size, b.allocated) for b in seg.blocks] == [(6 * MiB, False), (2 * MiB, True), (12 * MiB, False)]
    assert all(b.stream is s for b in seg.blocks) and not seg.is_small
    a.free(out)
    g.reset()


def test_checkpoint_errors_say_what_is_wrong(make_alloc):
    """getCheckpointState: "Could not find pool of id"; setCheckpointPoolState: "Not expected to
    checkpoint freeable graph"; BlockState: "Events should have synchronized when checkpointing block"."""
    a = make_alloc()
    with pytest.raises(RuntimeError, match="Could not find pool of id"):
        a.get_checkpoint_state((0, 12345))
    g, pool, s, out = recorded(a)
    other = a.device.create_stream()
    a.record_stream(out, other)
    a.device.sleep(other, 100.0)                   # a kernel that reads `out` on another stream
    a.free(out)                                    # pending: an event on `other`
    with pytest.raises(RuntimeError, match="Events should have synchronized"):
        a.get_checkpoint_state(pool)
    a.device.synchronize()
    a.free(a.malloc(512))                          # process_events frees `out`
    state = a.get_checkpoint_state(pool)
    with pytest.raises(TypeError, match="PrivatePoolState"):
        a.set_checkpoint_pool_state({"segments": []})
    g.reset()                                      # use_count 0: the pool is freeable
    with pytest.raises(RuntimeError, match="freeable"):
        a.set_checkpoint_pool_state(state)
    assert isinstance(state, PrivatePoolState)
