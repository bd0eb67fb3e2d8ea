"""Expandable segments (ExpandableSegment, find_expandable_block, map_block in
CUDACachingAllocator.cpp): layouts, map/unmap events, release, stats, runtime toggle, PyTorch's two
budget tests and the fragmentation comparison.  Numbers by hand in comments."""
from __future__ import annotations

import pytest

import allocator_ref as ar
from caching_helpers import (GiB, MiB, Recorder, assert_consistent, cur, make_alloc,  # noqa: F401
                             seg_blocks)

EXP = "expandable_segments:True"


def budget(a, mib):
    f = mib / 1024
    assert int(f * GiB) == mib * MiB
    a.set_per_process_memory_fraction(f)


def test_two_mib_maps_one_20mib_page(make_alloc):
    a = make_alloc(EXP)
    rec = Recorder(a)
    x = a.malloc(2 * MiB)
    assert seg_blocks(a) == [(2_097_152, "active_allocated"), (18_874_368, "inactive")]
    seg = a.segments()[0]
    assert seg["is_expandable"] is True and seg["segment_type"] == "large"
    assert seg["address"] == x.ptr
    assert rec.simple() == [("segment_map", x.ptr, 20 * MiB), ("alloc", x.ptr, 2 * MiB)]
    s = a.memory_stats()
    assert s["segment.all.current"] == 0                   # no segment stats for expandable memory
    assert s["reserved_bytes.large_pool.current"] == 20 * MiB
    assert s["inactive_split.all.current"] == 0 and s["inactive_split_bytes.all.current"] == 0
    assert s["num_device_alloc"] == 1
    a.free(x)


def test_32mib_maps_40mib(make_alloc):
    a = make_alloc(EXP)
    rec = Recorder(a)
    x = a.malloc(32 * MiB)
    assert seg_blocks(a) == [(33_554_432, "active_allocated"), (8_388_608, "inactive")]
    assert rec.simple() == [("segment_map", x.ptr, 40 * MiB), ("alloc", x.ptr, 32 * MiB)]
    assert cur(a, "reserved_bytes") == 40 * MiB
    a.free(x)


def test_small_pool_pages_are_2mib(make_alloc):
    a = make_alloc(EXP)
    x = a.malloc(1000)
    seg = a.segments()[0]
    assert seg["segment_type"] == "small" and seg["is_expandable"]
    assert seg_blocks(a) == [(1024, "active_allocated"), (2 * MiB - 1024, "inactive")]
    assert cur(a, "reserved_bytes", "small_pool") == 2 * MiB
    # 1.5 MiB more in the small pool? no: 1.5 MiB rounds > 1 MiB -> large pool. 1 MiB fits the 2 MiB page
    y = a.malloc(MiB)
    assert y.ptr == x.ptr + 1024
    z = a.malloc(MiB)                        # needs a second page, mapped right after the first
    assert z.ptr == x.ptr + 1024 + MiB
    assert cur(a, "reserved_bytes", "small_pool") == 4 * MiB
    assert len(a.segments()) == 1            # one contiguous mapped range
    a.free(x), a.free(y), a.free(z)


def test_growth_maps_the_next_page_and_extends_the_free_tail(make_alloc):
    a = make_alloc(EXP)
    rec = Recorder(a)
    x = a.malloc(2 * MiB)                    # page 0 mapped: 2 used, 18 free
    y = a.malloc(32 * MiB)                   # 18 free < 32: map page 1 (20 MiB) -> 38 free -> 32 + 6
    assert y.ptr == x.ptr + 2 * MiB
    assert seg_blocks(a) == [(2 * MiB, "active_allocated"), (32 * MiB, "active_allocated"),
                             (6 * MiB, "inactive")]
    assert rec.simple()[2] == ("segment_map", x.ptr + 20 * MiB, 20 * MiB)
    assert cur(a, "reserved_bytes") == 40 * MiB
    assert a.memory_stats()["num_device_alloc"] == 2
    a.free(x), a.free(y)


def test_empty_cache_unmaps_whole_pages_and_releases_the_reservation(make_alloc):
    a = make_alloc(EXP)
    free0 = a.device.mem_get_info()[0]
    x = a.malloc(2 * MiB)
    y = a.malloc(30 * MiB)                   # 2 + 30 in pages 0-1 (40 MiB mapped), 8 free
    a.free(y)                                # free block [2, 40) MiB
    rec = Recorder(a)
    a.empty_cache()
    # only whole pages inside [2, 40): page 1 = [20, 40); [2, 20) stays mapped
    assert rec.simple() == [("segment_unmap", x.ptr + 20 * MiB, 20 * MiB)]
    assert seg_blocks(a) == [(2 * MiB, "active_allocated"), (18 * MiB, "inactive")]
    assert cur(a, "reserved_bytes") == 20 * MiB
    s = a.memory_stats()
    assert s["num_device_free"] == 1 and s["segment.all.current"] == 0
    a.free(x)
    rec2 = Recorder(a)
    a.empty_cache()
    assert rec2.simple() == [("segment_unmap", x.ptr, 20 * MiB)]
    assert a.segments() == [] and cur(a, "reserved_bytes") == 0
    assert a.device.mem_get_info()[0] == free0
    assert a.device_allocator.expandable_segments_ == []      # fully unmapped -> reservation released


def test_expandable_stats_never_track_segments_or_inactive_split(make_alloc):
    a = make_alloc(EXP)
    xs = [a.malloc(n * MiB) for n in (3, 5, 7, 11)]
    a.free(xs[1])
    s = a.memory_stats()
    assert s["segment.all.current"] == 0 and s["segment.all.allocated"] == 0
    assert s["inactive_split.all.allocated"] == 0 and s["inactive_split_bytes.all.allocated"] == 0
    # reserved follows mapped pages: 3+5+7+11 = 26 MiB -> 2 pages
    assert s["reserved_bytes.all.current"] == 40 * MiB
    assert s["oversize_segments.allocated"] == 0
    for x in (xs[0], xs[2], xs[3]):
        a.free(x)


def test_runtime_toggle_affects_new_allocations_only(make_alloc):
    a = make_alloc()
    rec = Recorder(a)
    x = a.malloc(25 * MiB)                   # cudaMalloc 26 MiB, remainder 1 MiB -> not split
    assert x.size == 26 * MiB
    a.set_allocator_settings(EXP)
    y = a.malloc(25 * MiB)                   # expandable: 2 pages (40 MiB), 25 + 15 free
    kinds = sorted((s["is_expandable"], s["total_size"]) for s in a.segments())
    assert kinds == [(False, 26 * MiB), (True, 40 * MiB)]
    a.set_allocator_settings("expandable_segments:False")
    z = a.malloc(3 * MiB)                    # the 15 MiB expandable free block is skipped: new 20 MiB segment
    assert not (y.ptr <= z.ptr < y.ptr + 40 * MiB)
    kinds = sorted((s["is_expandable"], s["total_size"]) for s in a.segments())
    assert kinds == [(False, 20 * MiB), (False, 26 * MiB), (True, 40 * MiB)]
    assert cur(a, "segment") == 2
    acts = [act for act, _, _ in rec.simple()]
    assert acts == ["segment_alloc", "alloc", "segment_map", "alloc", "segment_alloc", "alloc"]
    free0 = None
    for v in (x, y, z):
        a.free(v)
    a.empty_cache()                          # releases expandable memory even with the flag off
    assert a.segments() == [] and cur(a, "reserved_bytes") == 0


def test_max_split_expandable(make_alloc):
    """PyTorch test_max_split_expandable, restated on the 1 GiB device with a 120 MiB budget."""
    a = make_alloc(profile="tiny-1gb")
    budget(a, 120)
    a.set_allocator_settings("expandable_segments:False,max_split_size_mb:40")
    A = a.malloc(40 * MiB)                   # cudaMalloc 40 MiB: total 40
    a.set_allocator_settings("expandable_segments:True,max_split_size_mb:40")
    B = a.malloc(40 * MiB)                   # 40 + 40 <= 120: maps 2 pages exactly, no remainder
    a.set_allocator_settings("expandable_segments:False,max_split_size_mb:40")
    C = a.malloc(40 * MiB)                   # total 120 == allowed: fine
    assert cur(a, "reserved_bytes") == 120 * MiB
    with pytest.raises(ar.OutOfMemoryError):
        a.malloc(40 * MiB)                   # 160 > 120; nothing cached -> OOM
    assert_consistent(a)
    a.free(A), a.free(B), a.free(C)
    rec = Recorder(a)
    D = a.malloc(120 * MiB)
    # release_available (key 120) frees the two non-expandable 40s, skips the expandable one,
    # 80 < 120 -> false; release_cached_blocks unmaps the expandable one; the retry succeeds.
    acts = sorted(act for act, _, _ in rec.simple() if act.startswith("segment"))
    assert acts == ["segment_alloc", "segment_free", "segment_free", "segment_unmap"]
    s = a.memory_stats()
    assert s["num_alloc_retries"] == 2       # one from the OOM, one now
    assert s["num_ooms"] == 1
    assert s["reserved_bytes.all.current"] == 120 * MiB and s["segment.all.current"] == 1
    a.free(D)


def test_garbage_collect_expandable(make_alloc):
    """PyTorch test_garbage_collect_expandable, restated with a 120 MiB budget."""
    a = make_alloc(profile="tiny-1gb")
    budget(a, 120)
    a.set_allocator_settings("expandable_segments:False,garbage_collection_threshold:0.5")
    A = a.malloc(40 * MiB)                   # clock 1, cudaMalloc 40
    a.set_allocator_settings("expandable_segments:True,garbage_collection_threshold:0.5")
    B = a.malloc(40 * MiB)                   # clock 2, maps 40 (2 pages), followed by unmapped VA
    a.free(A), a.free(B)                     # total 80
    rec = Recorder(a)
    C = a.malloc(80 * MiB)                   # clock 3, no fit; GC: 80 > 60, target 20; candidates:
    # A only (B is expandable) -> A released; 40 + 80 <= 120 -> B's free block grows by 2 pages
    ev = [(act, addr, size) for act, addr, size in rec.simple() if act.startswith("segment")]
    assert ev == [("segment_free", A.ptr, 40 * MiB), ("segment_map", B.ptr + 40 * MiB, 40 * MiB)]
    assert C.ptr == B.ptr and C.size == 80 * MiB
    s = a.memory_stats()
    assert s["num_alloc_retries"] == 0 and s["num_sync_all_streams"] == 0
    assert s["reserved_bytes.all.current"] == 80 * MiB
    a.free(C)


FRAGMENTATION_WORKLOAD = "8 x 16 MiB allocated then freed, then 4 x 32 MiB"


@pytest.mark.parametrize("expandable,peak", [
    # Without: every 16 MiB request (>= 10 MiB) gets its own 16 MiB segment, not split: 8 x 16 = 128.
    # The 8 cached 16 MiB segments cannot merge, so each 32 MiB needs a new segment: +128 -> 256 MiB.
    (False, 256 * MiB),
    # With: pages of 20 MiB. Requests 1-4 map one page each (free tail 4, 8, 12, 16 MiB), request 5
    # takes the 16 MiB tail, 6-8 map one page each (tails 4, 8, 12): 7 pages = 140 MiB for 128 used.
    # Freed, it is one 140 MiB block: the 4 x 32 MiB are carved from it (108, 76, 44, 12 left): 140 MiB.
    (True, 140 * MiB),
])
def test_fragmentation_comparison(make_alloc, expandable, peak):
    a = make_alloc(f"expandable_segments:{expandable}")
    xs = [a.malloc(16 * MiB) for _ in range(8)]
    for x in xs:
        a.free(x)
    ys = [a.malloc(32 * MiB) for _ in range(4)]
    assert a.max_memory_reserved() == peak
    if expandable:
        assert [(b[0], b[1]) for b in seg_blocks(a)] == [(32 * MiB, "active_allocated")] * 4 + \
            [(12 * MiB, "inactive")]
        assert a.memory_stats()["num_device_alloc"] == 7
    else:
        assert a.memory_stats()["num_device_alloc"] == 12
    for y in ys:
        a.free(y)


def test_expandable_stream_gets_its_own_segment(make_alloc):
    a = make_alloc(EXP)
    side = a.device.create_stream()
    x = a.malloc(2 * MiB)
    y = a.malloc(2 * MiB, stream=side)
    segs = a.segments()
    assert len(segs) == 2 and {s["stream"] for s in segs} == {0, side.handle}
    assert len(a.device_allocator.expandable_segments_) == 2
    a.free(x), a.free(y)
    a.empty_cache()
    assert a.device_allocator.expandable_segments_ == []


def test_mapping_oom_leaks_nothing(make_alloc):
    a = make_alloc(EXP, profile="tiny-1gb")
    x = a.malloc(900 * MiB)                  # 45 pages of 20 MiB, exactly used
    free_before = a.device.mem_get_info()[0] # 1024 - 64 - 900 = 60 MiB
    assert free_before == 60 * MiB
    with pytest.raises(ar.OutOfMemoryError):
        a.malloc(100 * MiB)                  # needs 5 pages, only 3 fit: the created ones are released
    assert a.device.mem_get_info()[0] == free_before
    assert cur(a, "reserved_bytes") == 900 * MiB
    assert_consistent(a)
    y = a.malloc(60 * MiB)                   # 3 pages do fit
    assert y.ptr == x.ptr + 900 * MiB
    a.free(x), a.free(y)
    a.empty_cache()
    assert a.device.mem_get_info()[0] == 1024 * MiB - 64 * MiB


def test_segment_unmap_falls_back_to_the_segments_frames(make_alloc):
    """unmap_block records SEGMENT_UNMAP with ``context ? context : block->context_when_segment_allocated``
    (as release_block does for SEGMENT_FREE): under context="alloc" empty_cache gathers no stack, so the
    unmap carries the stack that mapped the segment. (The model used to record it with no frames.)"""
    a = make_alloc(EXP)
    a.record_memory_history(context="alloc")
    x = a.malloc(40 * MiB)                   # maps pages 0-1 exactly (no split: the head keeps the
    a.free(x)                                # stack; a split would leave it on the remainder, as in 2.11)
    a.empty_cache()
    entries = a.trace.dicts()
    (mapped,) = [e for e in entries if e["action"] == "segment_map"]
    unmaps = [e for e in entries if e["action"] == "segment_unmap"]
    assert mapped["frames"] and unmaps
    assert all(e.get("frames") == mapped["frames"] for e in unmaps)
