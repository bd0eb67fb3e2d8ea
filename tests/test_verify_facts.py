"""The doctor reads its facts off the replay engine's counters (trace/verify_facts.py) instead of
recording a frame per event: the facts must be the frames' own, event for event, on every trace
the fast path takes.  Course-made runs always; the real traces in ../shared/traces when present."""
import pytest

import allocator_ref as ar
import allocator_ref.trace.verify_facts as verify_facts
from allocator_ref.memory_doctor.diagnosis import diagnose
from allocator_ref.trace.recording import load_recording
from allocator_ref.viz.replay_frames import LazyFrames
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


def from_frames(rec, device):
    """The same diagnosis the old way: every fact read off frames of the whole trace."""
    available = verify_facts.available
    verify_facts.available = lambda dev: False
    try:
        return diagnose(rec, device=device)
    finally:
        verify_facts.available = available


def real_traces():
    return [pytest.param(p, id=p.stem) for p in trace_paths()] or [
        pytest.param(None, marks=pytest.mark.skip(reason="no real traces in ../shared/traces"))]


@pytest.mark.parametrize("make", [oom_run, lambda: pending_frees_snapshot(300)], ids=["oom", "pending-frees"])
def test_the_engine_counters_give_the_frames_facts(make):
    rec = load_recording(make())
    fast, slow = diagnose(rec), from_frames(rec, None)
    assert isinstance(fast.frames, LazyFrames) and not isinstance(slow.frames, LazyFrames)
    assert fast.verified and len(fast.frames) == len(slow.frames)
    assert fast.pending_max > 0                          # something was held for another stream
    for name in FACTS:
        assert getattr(fast, name) == getattr(slow, name), name
    # The frames are still there for the player, recorded when asked for.
    assert fast.frames.state(fast.peak_reserved_at) == slow.frames.state(slow.peak_reserved_at)


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
