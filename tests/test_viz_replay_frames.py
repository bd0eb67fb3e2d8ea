"""A window of a real trace, replayed and turned into player frames."""
from pathlib import Path

import pytest

from allocator_ref import viz
from allocator_ref.trace import load_snapshot
from allocator_ref.trace.replay import TraceStepper

TRACES = Path(__file__).resolve().parents[1].parent / "shared" / "traces"
FULLSTEP = TRACES / "cs336-gpt-ctx128-fullstep.pickle"
needs_trace = pytest.mark.skipif(not FULLSTEP.exists(), reason=f"{FULLSTEP} not found")


@needs_trace
def test_a_window_of_a_real_trace_becomes_frames_that_match_the_trace():
    data = load_snapshot(FULLSTEP)
    events = data["device_traces"][0]
    frames = viz.frames_of_snapshot(data, start=1000, count=60)
    assert len(frames) >= 60 and 1000 <= frames.first_event <= 1010
    # Each frame is one of PyTorch's events, in order, at PyTorch's address.
    for frame, expected in zip(frames, events[frames.first_event:frames.first_event + 60]):
        assert frame.event["action"] == expected["action"]
        assert frame.event.get("addr") == expected.get("addr")
    allocs = [f for f in frames if f.event["action"] == "alloc"]
    assert allocs and all(f.caption for f in allocs)
    # The allocated block is in the frame's state, at the address PyTorch used.
    last = allocs[-1]
    blocks = {b["address"]: b for s in last.segments for b in s["blocks"]}
    assert blocks[last.event["addr"]]["state"] == "active_allocated"


@needs_trace
def test_the_stepper_stops_where_asked_and_stays_exact():
    stepper = TraceStepper(FULLSTEP)
    stepper.run_until(5000)
    assert 5000 <= stepper.position <= 5010
    assert stepper.divergence is None
    assert stepper.allocator.memory_allocated() > 0


def test_bad_windows_are_refused():
    snap = {"segments": [], "device_traces": [[{"action": "alloc", "addr": 1, "size": 4, "stream": 0}]]}
    with pytest.raises(ValueError, match="start"):
        viz.frames_of_snapshot(snap, start=-1)
    with pytest.raises(ValueError, match="past the trace"):
        viz.frames_of_snapshot(snap, start=5)
    with pytest.raises(ValueError, match="no trace events"):
        TraceStepper({"segments": [], "device_traces": [[]]})
