"""Frames: a pure function of (states, events); captions say what each event did; stepping back works."""
import allocator_ref as ar
from allocator_ref.viz.blockmap import render_blockmap
from allocator_ref.viz.frames import FrameSource, build_frames, record_frames

MiB = 2**20
A = 0x7F0000000000


def seg(addr, blocks, kind="large"):
    out, at = [], addr
    for size, state in blocks:
        out.append({"address": at, "size": size, "state": state, "frames": [],
                    "requested_size": size if state != "inactive" else 0})
        at += size
    return {"device": 0, "address": addr, "total_size": at - addr, "stream": 0, "segment_type": kind,
            "segment_pool_id": (0, 0), "is_expandable": False, "frames": [], "blocks": out,
            "allocated_size": sum(b["size"] for b in out if b["state"] == "active_allocated")}


def ev(action, addr, size):
    return {"action": action, "addr": addr, "size": size, "stream": 0}


# A 20 MiB segment: 12 MiB split off, then 4 MiB, the 4 MiB freed (waits for a stream, then merges
# with the free tail), the 12 MiB freed (merges into one free block), the segment released.
EVENTS = [ev("segment_alloc", A, 20 * MiB), ev("alloc", A, 12 * MiB), ev("alloc", A + 12 * MiB, 4 * MiB),
          ev("free_requested", A + 12 * MiB, 4 * MiB), ev("free_completed", A + 12 * MiB, 4 * MiB),
          ev("free_requested", A, 12 * MiB), ev("free_completed", A, 12 * MiB), ev("segment_free", A, 20 * MiB)]
STATES = [[seg(A, [(20 * MiB, "inactive")])],
          [seg(A, [(12 * MiB, "active_allocated"), (8 * MiB, "inactive")])],
          [seg(A, [(12 * MiB, "active_allocated"), (4 * MiB, "active_allocated"), (4 * MiB, "inactive")])],
          [seg(A, [(12 * MiB, "active_allocated"), (4 * MiB, "active_pending_free"), (4 * MiB, "inactive")])],
          [seg(A, [(12 * MiB, "active_allocated"), (8 * MiB, "inactive")])],
          [seg(A, [(12 * MiB, "inactive"), (8 * MiB, "inactive")])],
          [seg(A, [(20 * MiB, "inactive")])],
          []]


def test_captions_describe_each_split_and_merge():
    captions = [f.caption for f in build_frames(STATES, EVENTS)]
    assert captions[0] == "cudaMalloc of a new 20.0 MiB segment 0 (large pool, stream 0)"
    assert captions[1].startswith("12.0 MiB request: no cached block fits")
    assert captions[1].endswith("split: 12.0 MiB allocated, 8.0 MiB stays free")
    assert captions[2] == ("4.0 MiB request: best fit is the 8.0 MiB free block at +0xc00000 in segment 0; "
                           "split: 4.0 MiB allocated, 4.0 MiB stays free")
    assert "stays pending free" in captions[3]
    assert captions[4] == ("pending free done (the other stream finished): free of 4.0 MiB at +0xc00000 in "
                           "segment 0: merged with the free block after it \u2192 8.0 MiB free")
    assert "goes back to the cache at once" in captions[5]
    assert captions[6].startswith("free of 12.0 MiB at +0x0 in segment 0: merged with the free block after it "
                                  "\u2192 20.0 MiB free; segment 0 is now entirely free")
    assert captions[7] == "segment 0 (20.0 MiB) released to the driver (cudaFree)"


def test_changed_addresses_are_the_blocks_that_moved():
    frames = build_frames(STATES, EVENTS)
    assert frames[0].changed == {A}
    assert frames[1].changed == {A, A + 12 * MiB}                 # the allocated front and the free rest
    assert frames[2].changed == {A + 12 * MiB, A + 16 * MiB}
    assert frames[3].changed == {A + 12 * MiB}
    assert frames[7].changed == {A}                               # the segment that went away


def test_stepping_back_restores_the_previous_frame():
    source = FrameSource.from_states(STATES, EVENTS, keyframe_every=3)     # rebuilt from keyframes + changes
    pictures = [render_blockmap(source[i].segments, highlight=source[i].changed) for i in range(len(source))]
    for i in range(len(source)):
        assert source.state(i) == STATES[i]
    for i in reversed(range(len(source))):                     # walk backwards, one step at a time
        assert render_blockmap(source[i].segments, highlight=source[i].changed) == pictures[i]
        assert source[i].caption == build_frames(STATES, EVENTS)[i].caption
    assert source.memory_totals()[2] == (16 * MiB, 20 * MiB)


def test_other_actions_have_plain_captions():
    events = [ev("segment_map", A, 20 * MiB), {"action": "oom", "device_free": 95 * MiB, "size": 5 * 2**30},
              ev("segment_unmap", A, 20 * MiB)]
    states = [[seg(A, [(20 * MiB, "inactive")])], [seg(A, [(20 * MiB, "inactive")])], []]
    captions = [f.caption for f in build_frames(states, events)]
    assert "20.0 MiB of physical memory mapped" in captions[0]
    assert captions[1] == "out of memory: a 5.0 GiB request failed; the device had only 95.0 MiB free"
    assert "unmapped" in captions[2] and "virtual addresses stay reserved" in captions[2]


def strip_frames(segments):
    return [dict(s, frames=None, blocks=[dict(b, frames=None) for b in s["blocks"]]) for s in segments]


def test_record_frames_matches_the_allocator_after_every_call():
    a = ar.CachingAllocator(ar.SimDevice("tiny-1gb"), "")
    s2 = a.device.create_stream()
    with record_frames(a) as frames:
        calls = [lambda: a.malloc(12 * MiB), lambda: a.malloc(4 * MiB), lambda: a.malloc(100)]
        live = []
        for call in calls:
            live.append(call())
            assert strip_frames(frames.state(len(frames) - 1)) == strip_frames(a.segments())
        a.record_stream(live[1], s2)
        a.device.sleep(s2, 1000)               # s2 is busy: the free must wait for it
        a.free(live[1])
        assert strip_frames(frames.state(len(frames) - 1)) == strip_frames(a.segments())
        for x in (live[0], live[2]):
            a.free(x)
            assert strip_frames(frames.state(len(frames) - 1)) == strip_frames(a.segments())
        a.empty_cache()
        assert strip_frames(frames.state(len(frames) - 1)) == strip_frames(a.segments())
    actions = [f.event["action"] for f in frames]
    assert "snapshot" not in actions and actions[:2] == ["segment_alloc", "alloc"]
    assert any(f.caption.startswith("pending free done") for f in frames)
    assert frames[-1].caption.endswith("released to the driver (cudaFree)")
