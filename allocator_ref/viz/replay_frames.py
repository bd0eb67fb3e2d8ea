"""Frames of a real PyTorch trace, for the player: replay it, record a window of it.

A real training trace has tens of thousands of events; snapshotting the allocator after
every one of them takes minutes.  ``frames_of_snapshot`` replays the trace with
``--verify`` semantics (PyTorch's own addresses) up to ``start`` without drawing, then
records ``count`` events as frames:

    frames = frames_of_snapshot("run.pickle", start=4000, count=200)
    TracePlayer(frames, title="run.pickle, events 4000-4200")
"""
from __future__ import annotations

from typing import Any, Optional

from ..trace.replay import TraceStepper
from .frames import FrameSource, record_frames


def frames_of_snapshot(snapshot: Any, start: int = 0, count: int = 200, device: Optional[int] = None,
                       keyframe_every: int = 50) -> FrameSource:
    """The block maps after each of ``count`` trace events from ``start`` (a real trace replayed)."""
    if start < 0 or count <= 0:
        raise ValueError(f"start must be >= 0 and count > 0, got start={start}, count={count}")
    stepper = TraceStepper(snapshot, device=device)
    if start >= len(stepper.events):
        raise ValueError(f"start={start} is past the trace's {len(stepper.events)} events")
    stepper.run_until(start)
    first = stepper.next_event            # a malloc in progress may have made a few already
    with record_frames(stepper.allocator, keyframe_every=keyframe_every) as frames:
        stepper.run_until(first + count)
    frames.first_event = first            # frame i shows the state after trace event first + i
    return frames
