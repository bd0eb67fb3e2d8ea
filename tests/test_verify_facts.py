"""The doctor reads its facts off the replay engine's counters (trace/verify_facts.py) instead of
recording a frame per event: the facts must be the frames' own, event for event, on every trace
(expandable segments included).  Course-made runs always; the real traces in ../shared/traces
when present."""
import pytest

import allocator_ref as ar
import allocator_ref.memory_doctor.diagnosis as diagnosis
import allocator_ref.trace.verify_facts as verify_facts
from allocator_ref.memory_doctor.diagnosis import diagnose
from allocator_ref.memory_doctor.report import frames_of
from allocator_ref.trace.recording import load_recording
from allocator_ref.trace.replay import TraceStepper
from allocator_ref.viz.replay_frames import LazyFrames, frames_of_stepper
from benchmarks.common import trace_paths
from benchmarks.gen_pending_frees import pending_frees_snapshot

MiB = 2**20
FACTS = ("allocated", "reserved", "peak_reserved_at", "peak_allocated_at", "holdings", "by_pool", "by_stream",
         "largest", "oom", "oom_count", "pending_max", "pending_max_at", "verified", "readings",
         "user_empty_caches")


def oom_run() -> dict:
    a = ar.CachingAllocator(ar.SimDevice("tiny-1gb"), "")
    side = a.device.create_stream()
    a.record_memory_history(max_entries=100_000)
    live = [a.malloc((3 + k % 4) * MiB) for k in range(150)]
    for k, x in enumerate(live):
        if k % 5 == 0:
            a.record_stream(x, side)
        if k % 3:
            a.free(x)
    try:
        a.malloc(900 * MiB)
    except ar.OutOfMemoryError:
        pass
    return a.snapshot()


def facts_off_frames(recording, device, profile="h100-80gb"):
    """What the doctor read before issue 49 moved it to the engine's counters: every fact off
    frames recorded of the whole trace (viz), the block map at an event included."""
    stepper = TraceStepper(recording, device=device, profile=profile)
    frames = frames_of_stepper(stepper)
    verify = stepper.finish()
    totals = frames.memory_totals()
    return {"events": len(frames), "first_event": frames.first_event, "verify": verify,
            "allocated": [a for a, _ in totals], "reserved": [r for _, r in totals],
            "actions": [e.get("action") for e in frames.events],
            "pending": [active - alloc for alloc, active in frames.segment_sums("allocated_size", "active_size")],
            "state_at": frames.state, "segment_ids": lambda: frames.segment_ids, "frames": frames}


def from_frames(rec, device):
    """The same diagnosis the old way: every fact read off frames of the whole trace."""
    engine = diagnosis.replay_facts
    kept = {}

    def off_frames(recording, device, profile="h100-80gb"):
        kept.update(facts_off_frames(recording, device, profile))
        return kept
    diagnosis.replay_facts = off_frames
    try:
        diag = diagnose(rec, device=device)
    finally:
        diagnosis.replay_facts = engine
    diag.frames = kept["frames"]
    return diag


def expandable_run() -> dict:
    """Expandable segments, as the real expandable OOM trace: segment_map events grow one segment."""
    a = ar.CachingAllocator(ar.SimDevice("tiny-1gb"), "expandable_segments:True")
    a.record_memory_history(max_entries=100_000)
    live = [a.malloc((5 + k % 7) * MiB) for k in range(60)]
    for k, x in enumerate(live):
        if k % 3:
            a.free(x)
    a.malloc(30 * MiB)
    return a.snapshot()


def real_traces():
    return [pytest.param(p, id=p.stem) for p in trace_paths()] or [
        pytest.param(None, marks=pytest.mark.skip(reason="no real traces in ../shared/traces"))]


@pytest.mark.parametrize("make", [oom_run, lambda: pending_frees_snapshot(300), expandable_run],
                         ids=["oom", "pending-frees", "expandable"])
def test_the_engine_counters_give_the_frames_facts(make):
    rec = load_recording(make())
    fast, slow = diagnose(rec), from_frames(rec, None)
    assert fast.frames is None                           # no fact needed a frame
    assert fast.verified and fast.events_replayed == slow.events_replayed == len(slow.frames)
    for name in FACTS:
        assert getattr(fast, name) == getattr(slow, name), name
    if make is not expandable_run:
        assert fast.pending_max > 0                      # something was held for another stream
    else:
        maps = [e for e in rec.device(0).events if e["action"] == "segment_map"]
        assert len(maps) > 1 and fast.holdings           # it grew, and holds free bytes at the peak
    # The segment numbers the holdings show are the player's own.
    assert [h.number for h in fast.holdings] == [slow.frames.segment_ids[h.address] for h in fast.holdings]
    # The frames are still there for the player, recorded when the drawing side asks for them.
    drawn = frames_of(fast)
    assert isinstance(drawn, LazyFrames) and drawn._frames is None and len(drawn) == len(slow.frames)
    assert drawn.state(fast.peak_reserved_at) == slow.frames.state(slow.peak_reserved_at)


@pytest.mark.slow
@pytest.mark.parametrize("path", real_traces())
def test_on_real_traces_the_facts_are_the_frames_facts(path):
    rec = load_recording(path)
    for device in rec.devices_with_events:
        fast, slow = diagnose(rec, device=device), from_frames(rec, device)
        for name in FACTS:
            assert getattr(fast, name) == getattr(slow, name), (device, name)


def test_one_run_keeps_the_block_map_at_the_peak_and_at_the_oom():
    """capture_at takes several events (the recorded peak and each OOM): one verify run keeps
    each block map, and each is the one a run stopped right after that event shows."""
    from allocator_ref.trace.replay import TraceStepper
    rec = load_recording(oom_run())
    events = rec.device(0).events
    oom = next(i for i, e in enumerate(events) if e["action"] == "oom")
    peak = max((i for i, e in enumerate(events) if e["action"] == "alloc"),
               key=rec.device(0).reserved_after_each_event().__getitem__)
    facts = verify_facts.VerifyFacts(TraceStepper(rec), capture_at=[peak, oom])
    kept = facts.totals.captured_at
    assert set(kept) == {peak, oom} and kept[peak] != kept[oom]
    for i in (peak, oom):
        assert kept[i] == verify_facts.state_after(rec, 0, i)
    single = verify_facts.VerifyFacts(TraceStepper(rec), capture_at=oom).totals
    assert single.captured == kept[oom]                      # one event, as the doctor asks today
