"""``attach_allocator_trace_tracker``: PyTorch's ``attachAllocatorTraceTracker``, the hook
ProcessGroupNCCL's segment registration hangs on (``cacheAllocatorRegisterHook`` registers on
``SEGMENT_ALLOC``; an expandable segment grows by ``SEGMENT_MAP`` instead)."""
from __future__ import annotations

import pytest

import allocator_ref as ar

MiB = 1 << 20


def _run(config: str) -> tuple[ar.CachingAllocator, list, int]:
    a = ar.CachingAllocator(ar.SimDevice("tiny-1gb"), config)
    seen = []
    a.attach_allocator_trace_tracker(seen.append)
    xs = [a.malloc(n * MiB) for n in (25, 25, 3, 100)]
    reserved = a.memory_reserved()
    for x in xs:
        a.free(x)
    a.empty_cache()
    return a, seen, reserved


def _bytes(seen, action):
    return sum(e.size for e in seen if e.action == action)


def test_a_tracker_sees_every_cudamalloc_segment_with_history_off():
    a, seen, reserved = _run("")
    assert _bytes(seen, "segment_alloc") == reserved == 172 * MiB   # 26 + 26 + 20 + 100 MiB
    assert _bytes(seen, "segment_free") == reserved                 # empty_cache gave them all back
    assert [e.action for e in seen].count("alloc") == 4
    assert a.snapshot()["device_traces"] == [[]], "a tracker must not switch the history on"


def test_under_expandable_segments_the_tracker_sees_maps_and_no_segment_alloc():
    _, seen, reserved = _run("expandable_segments:True")
    assert _bytes(seen, "segment_alloc") == 0
    assert _bytes(seen, "segment_map") == reserved == 160 * MiB      # 20 MiB pages
    assert _bytes(seen, "segment_unmap") == reserved


def test_a_tracker_that_is_not_callable_is_refused_with_a_clear_message():
    a = ar.CachingAllocator(ar.SimDevice("tiny-1gb"))
    with pytest.raises(TypeError, match="tracker must be callable"):
        a.attach_allocator_trace_tracker("segment_alloc")
