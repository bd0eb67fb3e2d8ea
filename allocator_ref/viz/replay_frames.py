"""Frames of a real PyTorch trace, for the player: replay it, record it (all of it, or a window).

``frames_of_snapshot`` replays the trace with ``--verify`` semantics (PyTorch's own
addresses) and records a frame per event.  Recording follows the allocator one segment at
a time (``segment_reader``), so a whole 20,000-event training step is ready in seconds:

    frames = frames_of_snapshot("run.pickle")                  # the whole trace
    frames = frames_of_snapshot("run.pickle", start=4000, count=200)   # or a window of it
    TracePlayer(frames, title="run.pickle")

Frame ``i`` shows the state after trace event ``frames.first_event + i``.
"""
from __future__ import annotations

from typing import Any, Optional

from ..trace.replay import TraceStepper
from ..trace.replay_report import ReplayResult
from .frames import FrameSource, record_frames


def frames_of_snapshot(snapshot: Any, start: int = 0, count: Optional[int] = None, device: Optional[int] = None,
                       keyframe_every: int = 100, profile: str = "h100-80gb") -> FrameSource:
    """The block maps after each of ``count`` trace events from ``start`` (default: to the end)."""
    if start < 0 or (count is not None and count <= 0):
        raise ValueError(f"start must be >= 0 and count > 0 (or None for the rest of the trace), "
                         f"got start={start}, count={count}")
    stepper = TraceStepper(snapshot, device=device, profile=profile)
    if start >= len(stepper.events):
        raise ValueError(f"start={start} is past the trace's {len(stepper.events)} events")
    stepper.run_until(start)
    first = stepper.next_event            # a malloc in progress may have made a few already
    stop = len(stepper.events) if count is None else first + count
    with record_frames(stepper.allocator, keyframe_every=keyframe_every) as frames:
        stepper.run_until(stop)
    frames.first_event = first            # frame i shows the state after trace event first + i
    frames.divergence = stepper.divergence
    whole = start == 0 and stop >= len(stepper.events)
    frames.verify_result = _verify_result(stepper, snapshot) if whole else None
    return frames


def _verify_result(stepper: TraceStepper, snapshot: Any) -> Optional[ReplayResult]:
    """What ``replay(snapshot, verify=True)`` reports, read off the replay that made the frames.

    A whole trace was just replayed at PyTorch's addresses: finishing that replay (the
    final-state comparison) gives the verification without replaying it a second time.
    None if the stepper does not expose its replayer (then replay it again).
    """
    replayer = getattr(stepper, "_replayer", None)
    finish = getattr(replayer, "_finish", None)
    if finish is None:
        return None
    finish()
    source = "<dict>" if isinstance(snapshot, dict) else str(snapshot)
    return ReplayResult(source, "caching", "(as recorded)", True, [replayer.result])
