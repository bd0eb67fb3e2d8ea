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
from .frames import FrameSource, record_frames


def frames_of_snapshot(snapshot: Any, start: int = 0, count: Optional[int] = None, device: Optional[int] = None,
                       keyframe_every: int = 100, profile: str = "h100-80gb") -> FrameSource:
    """The block maps after each of ``count`` trace events from ``start`` (default: to the end),
    replayed on a simulated ``profile`` (a profile name, or ``NAME@BYTES`` for a sized one).

    ``snapshot`` is a Recording or anything ``load_recording`` takes.  For the whole trace,
    ``frames.verify_result`` is the replay engine's verification of the replay that made them
    (``TraceStepper.finish``).
    """
    if start < 0 or (count is not None and count <= 0):
        raise ValueError(f"start must be >= 0 and count > 0 (or None for the rest of the trace), "
                         f"got start={start}, count={count}")
    stepper = TraceStepper(snapshot, device=device, profile=profile)
    frames = frames_of_stepper(stepper, start, count, keyframe_every)
    whole = start == 0 and frames.first_event + len(frames) >= len(stepper.events)
    frames.verify_result = stepper.finish() if whole else None
    return frames


def frames_of_stepper(stepper: TraceStepper, start: int = 0, count: Optional[int] = None,
                      keyframe_every: int = 100) -> FrameSource:
    """Frames of the events a replay engine's stepper makes from ``start`` (``count`` of them,
    or to the end); the stepper is left where the frames end."""
    if start >= len(stepper.events):
        raise ValueError(f"start={start} is past the trace's {len(stepper.events)} events")
    stepper.run_until(start)
    first = stepper.next_event            # a malloc in progress may have made a few already
    stop = len(stepper.events) if count is None else first + count
    with record_frames(stepper.allocator, keyframe_every=keyframe_every) as frames:
        stepper.run_until(stop)
    frames.first_event = first            # frame i shows the state after trace event first + i
    frames.divergence = stepper.divergence
    return frames


class LazyFrames:
    """The frames of a whole trace, recorded only when something asks for them.

    The doctor reads its facts off the replay engine (trace/verify_facts.py); the frames are
    for the player and the HTML page, so they are recorded (one more replay) the first time
    one of them is used.  ``len`` and ``first_event`` are known without recording.
    """

    def __init__(self, snapshot: Any, device: Optional[int], count: int, first_event: int = 0,
                 profile: str = "h100-80gb") -> None:
        self._snapshot, self._device, self._count, self._profile = snapshot, device, count, profile
        self.first_event = first_event
        self._frames: Optional[FrameSource] = None

    @property
    def recorded(self) -> FrameSource:
        if self._frames is None:
            self._frames = frames_of_snapshot(self._snapshot, device=self._device, profile=self._profile)
        return self._frames

    def __len__(self) -> int:
        return self._count if self._frames is None else len(self._frames)

    def __getitem__(self, i):
        return self.recorded[i]

    def __iter__(self):
        return iter(self.recorded)

    def __getattr__(self, name: str):
        if name.startswith("__") or name in ("_snapshot", "_device", "_count", "_frames", "_profile"):
            raise AttributeError(name)
        return getattr(self.recorded, name)
