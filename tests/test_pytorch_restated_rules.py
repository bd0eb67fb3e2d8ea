"""PyTorch 2.11 on paths no real trace exercises, each test citing the C++ it follows.

c10/cuda/CUDACachingAllocator.cpp (release_available_cached_blocks, try_merge_blocks,
NativeCachingAllocator::snapshot), c10/util/RingBuffer (RingBuffer::setMaxEntries /
insertEntries / getEntries), torch/csrc/cuda/memory_snapshot.cpp (_record_memory_history).
Every test runs the allocator the way a user would and reads the stats, snapshot and trace.
"""
from __future__ import annotations

import pytest

from caching_helpers import MiB, make_alloc  # noqa: F401

ALL_BUT_ALLOC = ["free_requested", "free_completed", "segment_alloc", "segment_free",
                 "segment_map", "segment_unmap", "snapshot", "oom"]


def test_release_available_stops_at_an_expandable_lower_bound(make_alloc):
    """release_available_cached_blocks (2.11): an expandable block at the lower bound sends it to
    the "free several oversize blocks, walking left" branch, which returns false at begin();
    the ladder then reaches release_cached_blocks (one sync-all, one retry)."""
    a = make_alloc("expandable_segments:True", profile="tiny-1gb")
    a.set_per_process_memory_fraction(800 / 1024)             # 800 MiB allowed
    x = a.malloc(300 * MiB)
    a.free(x)                                                  # a free 300 MiB expandable block
    a.set_allocator_settings("expandable_segments:False")
    y = a.malloc(400 * MiB)
    a.free(y)                                                  # a free 400 MiB cudaMalloc block
    a.set_allocator_settings("max_split_size_mb:20")
    a.reset_accumulated_memory_stats()
    z = a.malloc(250 * MiB)
    st = a.memory_stats()
    assert st["num_alloc_retries"] == 1
    assert st["num_sync_all_streams"] == 1
    assert a.memory_reserved() == 250 * MiB                    # (skipping right would keep 550 MiB)
    a.free(z)


def test_release_available_releases_one_big_enough_block(make_alloc):
    """release_available_cached_blocks: a same-stream, non-expandable block >= key.size at the
    lower bound is the one released; no full cache release, no retry."""
    a = make_alloc("max_split_size_mb:20", profile="tiny-1gb")
    a.set_per_process_memory_fraction(800 / 1024)
    keep = a.malloc(200 * MiB)
    big = a.malloc(500 * MiB)
    a.free(big)                                                # cached 500 MiB, oversize
    a.reset_accumulated_memory_stats()
    z = a.malloc(300 * MiB)                                    # 700 + 300 > 800: release the 500
    st = a.memory_stats()
    assert st["num_alloc_retries"] == 0 and st["num_sync_all_streams"] == 0
    assert st["num_device_free"] == 1
    assert a.memory_reserved() == 500 * MiB
    a.free(z)
    a.free(keep)


def test_segment_context_moves_with_a_src_dst_merge(make_alloc):
    """try_merge_blocks [src dst]: dst takes src's context_when_segment_allocated, so the
    segment's frames are those of the block now at its head (here: none)."""
    a = make_alloc(profile="tiny-1gb")
    a.record_memory_history("all", context="all")

    def make_segment():
        return a.malloc(5 * MiB)                               # a 20 MiB segment, split

    first = make_segment()                                     # new front block, no segment context
    second = a.malloc(15 * MiB)                                # the remainder, which has it
    assert second.ptr == first.ptr + 5 * MiB
    a.free(first)
    a.free(second)                                             # merges [first second]: src = first
    (segment,) = a.segments(record=False)
    assert segment["total_size"] == 20 * MiB and len(segment["blocks"]) == 1
    assert segment["frames"] == []
    # an unsplit segment made in a named function keeps that function's frame
    a.empty_cache()
    whole = make_segment_of(a, 20 * MiB)
    frames = [s for s in a.segments(record=False) if s["address"] == whole.ptr][0]["frames"]
    assert frames and frames[0]["name"] == "make_segment_of"
    a.free(whole)
    a.record_memory_history(None)


def make_segment_of(a, nbytes):
    return a.malloc(nbytes)


def test_snapshot_entry_shows_in_the_next_snapshot(make_alloc):
    """NativeCachingAllocator::snapshot copies the trace, then DeviceCachingAllocator::snapshot
    records SNAPSHOT: the entry is the last one of the *next* snapshot."""
    a = make_alloc()
    a.record_memory_history("all")
    x = a.malloc(1000)
    first = a.snapshot()["device_traces"][0]
    assert first[-1]["action"] == "alloc"
    second = a.snapshot()["device_traces"][0]
    assert second[-1]["action"] == "snapshot" and second[-1]["size"] == x.size
    assert second[:-1] == first
    a.free(x)


def test_state_history_keeps_the_latest_event(make_alloc):
    """memory_snapshot.cpp: enabled="state" records with max_entries = 1."""
    a = make_alloc()
    a.record_memory_history("state")
    x = a.malloc(1000)
    assert [e["action"] for e in a.snapshot()["device_traces"][0]] == ["alloc"]
    a.free(x)
    assert [e["action"] for e in a.snapshot()["device_traces"][0]] == ["free_completed"]
    a.record_memory_history(None)                              # recordHistory(false): clears
    assert a.snapshot()["device_traces"][0] == []


def sizes(a):
    return [e["size"] // 512 for e in a.snapshot()["device_traces"][0]]


def test_resizing_the_ring_behaves_as_ringbuffer(make_alloc):
    """RingBuffer::setMaxEntries only changes the limit: nothing is dropped or reordered, later
    inserts append below the limit or overwrite slot alloc_trace_next, and getEntries rotates
    at alloc_trace_next."""
    a = make_alloc()
    live = []

    def events(first, last):
        for k in range(first, last + 1):
            live.append(a.malloc(512 * k))

    a.record_memory_history("all", max_entries=3, skip_actions=ALL_BUT_ALLOC)
    events(1, 5)                     # slots [4, 5, 3], next = 2
    assert sizes(a) == [3, 4, 5]
    a.record_memory_history("all", max_entries=10, skip_actions=ALL_BUT_ALLOC)
    assert sizes(a) == [3, 4, 5]     # a bigger limit keeps the ring as it is
    events(6, 6)                     # below the limit: appended at the end, next still 2
    assert sizes(a) == [3, 6, 4, 5]
    a.record_memory_history("all", max_entries=3, skip_actions=ALL_BUT_ALLOC)
    assert sizes(a) == [3, 6, 4, 5]  # a smaller limit drops nothing
    events(7, 7)                     # full: overwrite slot 2 (the 3), next = 3 == limit -> 0
    assert sizes(a) == [4, 5, 7, 6]
    events(8, 8)                     # slot 0 (the 4), next = 1
    assert sizes(a) == [5, 7, 6, 8]
    a.record_memory_history("all", max_entries=3, clear_history=True, skip_actions=ALL_BUT_ALLOC)
    assert sizes(a) == []
    for x in live:
        a.free(x)
    a.record_memory_history(None)


@pytest.mark.parametrize("skip", [None, []])
def test_skip_actions_none_is_an_empty_list(make_alloc, skip):
    """torch.cuda.memory._record_memory_history: skip_actions=None is treated as []."""
    a = make_alloc()
    a.record_memory_history("all", skip_actions=skip)
    a.free(a.malloc(1000))
    actions = [e["action"] for e in a.snapshot()["device_traces"][0]]
    assert actions == ["segment_alloc", "alloc", "free_requested", "free_completed"]


def test_merging_blocks_that_are_not_split_neighbours_is_refused(make_alloc):
    """try_merge_blocks asserts dst->is_split() && src->is_split() (c10/cuda/
    CUDACachingAllocator.cpp, DeviceCachingAllocator::try_merge_blocks): two whole cached
    segments handed to it fail loudly, and neither segment is changed."""
    a = make_alloc(profile="tiny-1gb")
    x, y = a.malloc(40 * MiB), a.malloc(40 * MiB)              # two segments, each one whole block
    a.free(x)
    a.free(y)
    da = a.device_allocator
    dst, src = (b for b in da.large_blocks if b.ptr in (x.ptr, y.ptr))
    before = a.snapshot()["segments"]
    with pytest.raises(AssertionError, match="not a split neighbour"):
        da.try_merge_blocks(dst, src, da.large_blocks)
    assert a.snapshot()["segments"] == before and not dst.is_split() and not src.is_split()
