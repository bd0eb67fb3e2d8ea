"""snapshot(): the dict shape of torch.cuda.memory._snapshot() and the trace rules
(THCPModule_memorySnapshot in torch/csrc/cuda/Module.cpp; record_trace in CUDACachingAllocator.cpp)."""
from __future__ import annotations

import pytest

import allocator_ref as ar
from caching_helpers import MiB, actions, make_alloc  # noqa: F401

# PyTorch's four keys, plus the course's mark (allocator_ref/provenance.py): a course-made snapshot says so
TOP = {"segments", "device_traces", "allocator_settings", "external_annotations", "allocator_ref"}
SEGMENT = {"device", "address", "total_size", "allocated_size", "active_size", "requested_size", "stream",
           "segment_type", "segment_pool_id", "is_expandable", "frames", "blocks"}
BLOCK = {"address", "size", "requested_size", "state", "frames"}
TRACE_REQUIRED = {"action", "size", "stream", "time_us", "compile_context", "user_metadata"}
TRACE_OPTIONAL = {"pool_id", "frames"}
SETTINGS = {"PYTORCH_CUDA_ALLOC_CONF", "max_split_size", "garbage_collection_threshold", "expandable_segments",
            "pinned_num_register_threads", "release_lock_on_cudamalloc", "pinned_use_cuda_host_register",
            "graph_capture_record_stream_reuse", "roundup_power2_divisions"}


def test_shape(make_alloc):
    a = make_alloc()
    a.record_memory_history("all")
    x = a.malloc(4)
    y = a.malloc(5 * MiB)
    a.free(y)
    snap = a.snapshot()
    assert set(snap) == TOP
    assert isinstance(snap["device_traces"], list) and len(snap["device_traces"]) == 1
    assert snap["external_annotations"] == []
    assert set(snap["allocator_settings"]) == SETTINGS
    segs = snap["segments"]
    assert [s["address"] for s in segs] == sorted(s["address"] for s in segs)
    for s in segs:
        assert set(s) == SEGMENT
        assert s["device"] == 0 and s["stream"] == 0
        assert s["segment_pool_id"] == (0, 0) and s["is_expandable"] is False
        assert s["frames"] == []
        for b in s["blocks"]:
            assert set(b) == BLOCK
            assert b["state"] in ("active_allocated", "active_pending_free", "inactive")
    for e in snap["device_traces"][0]:
        assert TRACE_REQUIRED <= set(e) <= TRACE_REQUIRED | TRACE_OPTIONAL | {"addr", "device_free"}
        assert ("addr" in e) != ("device_free" in e)
        assert e["compile_context"] == "N/A" and e["user_metadata"] == ""
        if "pool_id" in e:
            assert tuple(e["pool_id"]) == (0, 0)
    a.free(x)


def test_trace_addr_and_size_rules(make_alloc):
    a = make_alloc()
    a.record_memory_history("all")
    x = a.malloc(4)                  # segment_alloc(seg, 2 MiB), alloc(x, 4)
    y = a.malloc(1000)               # alloc(y, 1000)
    a.free(x)                        # free_requested/free_completed(x, 4)
    z = a.malloc(100)                # reuses x's 512 B block: alloc(x, 100)
    a.free(z)                        # sizes are the block's requested_size: 100
    a.free(y)                        # y merges: free_*(y, 1000)
    a.empty_cache()                  # segment_free(seg, 2 MiB)
    seg = x.ptr
    assert actions(a.snapshot()["device_traces"][0]) == [
        ("segment_alloc", seg, 2 * MiB), ("alloc", x.ptr, 4), ("alloc", y.ptr, 1000),
        ("free_requested", x.ptr, 4), ("free_completed", x.ptr, 4),
        ("alloc", x.ptr, 100), ("free_requested", x.ptr, 100), ("free_completed", x.ptr, 100),
        ("free_requested", y.ptr, 1000), ("free_completed", y.ptr, 1000),
        ("segment_free", seg, 2 * MiB)]
    assert y.ptr == seg + 512


def test_trace_stream_and_time(make_alloc):
    a = make_alloc()
    a.record_memory_history("all")
    side = a.device.create_stream()
    x = a.malloc(4, stream=side)
    a.free(x)
    entries = [e for e in a.snapshot()["device_traces"][0] if e["action"] != "snapshot"]
    assert {e["stream"] for e in entries} == {side.handle}
    times = [e["time_us"] for e in entries]
    assert times == sorted(times) and all(isinstance(t, int) for t in times)


def test_snapshot_entry(make_alloc):
    a = make_alloc()
    a.record_memory_history("all")
    a.malloc(4)
    a.malloc(5 * MiB)
    snap = a.snapshot()
    marks = [e for e in snap["device_traces"][0] if e["action"] == "snapshot"]
    for e in marks:
        assert e["addr"] == 0
        assert e["size"] == sum(s["active_size"] for s in snap["segments"]) == 512 + 5 * MiB


def test_oom_entry(make_alloc):
    a = make_alloc(profile="tiny-1gb")
    a.record_memory_history("all")
    with pytest.raises(ar.OutOfMemoryError):
        a.malloc(2 * 1024 * MiB + 1)
    free = a.device.mem_get_info()[0]
    ooms = [e for e in a.snapshot()["device_traces"][0] if e["action"] == "oom"]
    assert len(ooms) == 1
    assert ooms[0]["device_free"] == free and "addr" not in ooms[0]
    assert ooms[0]["size"] == 2 * 1024 * MiB + 512          # rounded request


def test_expandable_map_unmap_entries(make_alloc):
    a = make_alloc("expandable_segments:True")
    a.record_memory_history("all")
    x = a.malloc(2 * MiB)
    a.free(x)
    a.empty_cache()
    assert actions(a.snapshot()["device_traces"][0]) == [
        ("segment_map", x.ptr, 20 * MiB), ("alloc", x.ptr, 2 * MiB),
        ("free_requested", x.ptr, 2 * MiB), ("free_completed", x.ptr, 2 * MiB),
        ("segment_unmap", x.ptr, 20 * MiB)]


def test_history_off_records_nothing(make_alloc):
    a = make_alloc()
    a.malloc(4)
    assert a.snapshot()["device_traces"] == [[]]
    a.record_memory_history("all")
    a.malloc(4)
    a.record_memory_history(None)
    n = len(a.snapshot()["device_traces"][0])
    a.malloc(4)
    a.malloc(5 * MiB)
    assert len(a.snapshot()["device_traces"][0]) == n


def test_ring_buffer_max_entries(make_alloc):
    a = make_alloc()
    a.record_memory_history("all", max_entries=3)
    xs = [a.malloc(4) for _ in range(5)]        # segment_alloc + 5 allocs = 6 entries
    tr = actions(a.snapshot()["device_traces"][0], drop=())
    # the snapshot call itself adds a 'snapshot' entry as the newest one, if this allocator records it
    if tr and tr[-1][0] == "snapshot":
        expected = [("alloc", xs[3].ptr, 4), ("alloc", xs[4].ptr, 4)]
        assert tr[:-1] == expected
    else:
        assert tr == [("alloc", xs[2].ptr, 4), ("alloc", xs[3].ptr, 4), ("alloc", xs[4].ptr, 4)]
    assert len(tr) == 3


def test_ring_buffer_at_least_one(make_alloc):
    a = make_alloc()
    a.record_memory_history("all", max_entries=0)
    a.malloc(4)
    assert len(a.snapshot()["device_traces"][0]) == 1


def test_skip_actions(make_alloc):
    a = make_alloc()
    a.record_memory_history("all", skip_actions=["alloc", "free_requested"])
    x = a.malloc(4)
    a.free(x)
    acts = [act for act, _, _ in actions(a.snapshot()["device_traces"][0])]
    assert acts == ["segment_alloc", "free_completed"]


def test_record_memory_history_argument_errors(make_alloc):
    a = make_alloc()
    with pytest.raises(ValueError):
        a.record_memory_history("sometimes")
    with pytest.raises(ValueError):
        a.record_memory_history("all", context="everything")
    with pytest.raises(ValueError):
        a.record_memory_history("all", skip_actions=["allocate"])


def test_listener_sees_events_with_history_off(make_alloc):
    a = make_alloc()
    seen = []
    stop = a.trace.add_listener(lambda e: seen.append(e.action))
    x = a.malloc(4)
    a.free(x)
    stop()
    a.malloc(4)
    assert seen == ["segment_alloc", "alloc", "free_requested", "free_completed"]


def test_allocator_settings_in_snapshot(make_alloc):
    a = make_alloc("max_split_size_mb:40,roundup_power2_divisions:[256:4,>:2]")
    st = a.snapshot()["allocator_settings"]
    assert st["PYTORCH_CUDA_ALLOC_CONF"] == "max_split_size_mb:40,roundup_power2_divisions:[256:4,>:2]"
    assert st["max_split_size"] == 40 * MiB
    # 256 -> index 8 (and fills 0..7); ">" fills 9..15
    assert st["roundup_power2_divisions"] == {str(2**k): (4 if k <= 8 else 2) for k in range(16)}


def test_pending_free_block_state_and_requested_size(make_alloc):
    a = make_alloc()
    side = a.device.create_stream()
    x = a.malloc(3000)
    a.device.sleep(side, 1e9)
    a.record_stream(x, side)
    a.free(x)
    blk = a.segments()[0]["blocks"][0]
    assert blk["state"] == "active_pending_free"
    assert blk["requested_size"] == 3000 and blk["size"] == 3072
    assert a.segments()[0]["requested_size"] == 3000
