"""Frames recorded incrementally (one segment re-read per event) equal full snapshots after every event.

The slow, obviously right way -- ``settle(event, allocator.segments())`` after each event -- is
recorded alongside the fast one on the same allocator, and every frame is compared.
"""
import os
import random
from pathlib import Path

import pytest

import allocator_ref as ar
from allocator_ref.viz.blockmap import segments_of
from allocator_ref.viz.frames import FrameSource, record_frames, settle

MiB = 2**20
TRACES = Path(os.environ.get("ALLOCATOR_REF_TRACES") or Path(__file__).resolve().parents[1].parent / "shared" / "traces")


class FullSnapshots:
    """The reference: the whole segment list after every event."""

    def __init__(self, allocator):
        self.allocator, self.busy = allocator, False
        self.source = FrameSource(segments_of(allocator), keyframe_every=7)

    def __call__(self, entry):
        if self.busy or entry.action == "snapshot":
            return
        self.busy = True
        try:
            event = entry.to_dict()
            self.source.append(event, settle(event, segments_of(self.allocator)))
        finally:
            self.busy = False


def workload(a, seed, steps=700):
    rng = random.Random(seed)
    side = a.device.create_stream()
    live = []
    for _ in range(steps):
        r = rng.random()
        if live and (r < 0.4 or len(live) > 60):
            x = live.pop(rng.randrange(len(live)))
            if rng.random() < 0.15:
                a.record_stream(x, side)
                a.device.sleep(side, rng.randrange(1, 50))
            a.free(x)
        elif r < 0.42:
            a.empty_cache()
        else:
            size = rng.choice([rng.randrange(1, MiB), rng.randrange(MiB, 40 * MiB), rng.randrange(1, 4096)])
            stream = side if rng.random() < 0.1 else None
            try:
                live.append(a.malloc(size, stream))
            except ar.OutOfMemoryError:
                pass
    for x in live:
        a.free(x)
    a.empty_cache()


@pytest.mark.parametrize("config", ["", "expandable_segments:True", "max_split_size_mb:20",
                                    "garbage_collection_threshold:0.5", "roundup_power2_divisions:4"])
@pytest.mark.parametrize("seed", [0, 1])
def test_incremental_frames_equal_full_snapshots(config, seed):
    a = ar.CachingAllocator(ar.SimDevice("tiny-1gb"), config)
    if "garbage" in config:
        a.set_per_process_memory_fraction(0.3)
    full = FullSnapshots(a)
    stop = a.trace.add_listener(full)
    with record_frames(a, keyframe_every=5) as fast:
        workload(a, seed)
    stop()
    slow = full.source
    assert len(fast) == len(slow) > 500
    for i in range(len(slow)):
        assert fast.events[i] == slow.events[i]
        assert fast.state(i) == slow.state(i), (i, slow.events[i]["action"])
    # Frames reached out of order (a jump back, a jump forward) are the same frames.
    for i in (len(slow) - 1, 3, len(slow) // 2, 4, 0):
        f, s = fast[i], slow[i]
        assert (f.segments, f.caption, f.changed) == (s.segments, s.caption, s.changed), i
    assert fast.memory_totals() == slow.memory_totals()
    assert fast.state(len(fast) - 1) == segments_of(a) == []
    # Each event cost one segment's neighbourhood, not a snapshot of everything (expandable
    # segments' map/unmap events reshape ranges and are the only ones read whole).
    reshaping = sum(e["action"] in ("segment_map", "segment_unmap") for e in fast.events)
    assert fast.follower.full_reads <= reshaping


def test_other_designs_are_snapshotted_whole():
    from allocator_ref.viz.segment_reader import can_follow
    a = ar.BFCAllocator(ar.SimDevice("tiny-1gb"))
    assert not can_follow(a)
    full = FullSnapshots(a)
    stop = a.trace.add_listener(full)
    with record_frames(a) as frames:
        x = a.malloc(3 * MiB)
        y = a.malloc(5 * MiB)
        a.free(x)
    stop()
    assert len(frames) == len(full.source) >= 3
    assert [frames.state(i) for i in range(len(frames))] == [full.source.state(i) for i in range(len(frames))]
    assert frames[-1].segments != frames[0].segments


FULLSTEP = TRACES / "cs336-gpt-ctx128-fullstep.pickle"


@pytest.mark.slow
@pytest.mark.skipif(not FULLSTEP.exists(), reason=f"real trace {FULLSTEP} not here (set ALLOCATOR_REF_TRACES)")
def test_the_whole_real_trace_is_frames_of_pytorchs_events_ending_in_its_final_state():
    from allocator_ref import viz
    data = ar.load_snapshot(FULLSTEP)
    events = data["device_traces"][0]
    frames = viz.frames_of_snapshot(data, start=0, count=None)
    assert len(frames) == len(events) and frames.first_event == 0
    assert [f["action"] for f in frames.events] == [e["action"] for e in events]
    assert [f.get("addr") for f in frames.events] == [e.get("addr") for e in events]
    # The last frame is the snapshot's own segment list, block for block.
    def layout(segments):
        return sorted((s["address"], s["total_size"], tuple((b["address"], b["size"], b["state"])
                                                            for b in s["blocks"])) for s in segments)
    assert layout(frames.state(len(frames) - 1)) == layout(data["segments"])


def test_frames_of_a_whole_trace_carry_the_same_verification_as_a_replay():
    from allocator_ref import viz
    from allocator_ref.trace.replay import replay
    a = ar.CachingAllocator(ar.SimDevice("tiny-1gb"), "")
    a.record_memory_history(max_entries=100_000)
    workload(a, seed=3, steps=300)
    snap = a.snapshot()
    frames = viz.frames_of_snapshot(snap)
    ours, plain = frames.verify_result.to_json(), replay(snap, verify=True, progress=False).to_json()
    for key in ("allocs", "allocs_exact", "segment_allocs_made", "segment_allocs_expected", "segment_frees_made",
                "final_state_equal", "first_divergence", "peak_reserved", "peak_allocated", "device_calls"):
        assert ours[key] == plain[key], key
    assert frames.verify_result.perfect
    assert viz.frames_of_snapshot(snap, start=5, count=10).verify_result is None     # a window verifies nothing
