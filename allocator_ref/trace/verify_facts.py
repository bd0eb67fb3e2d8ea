"""What a verify replay shows after each event, read off the engine without drawing a frame.

The doctor needs, for every event of a trace, memory allocated, reserved and held for other
streams, and the whole block map at one moment (the reserved peak).  Recording a frame per
event (``viz.record_frames``) answers that, but costs three times the replay itself.  So a
verify run of the engine (engine.py) reports :class:`VerifyFacts`:

* the totals after each event come from the allocator's own counters
  (``memory_allocated``/``memory_reserved``/``active_bytes``), read by a trace listener while
  the allocator reports the event.  Some counters move only after the report (PyTorch's
  ``DeviceCachingAllocator`` does the same), so the listener hands its reading to
  ``events.totals_after_event``, the one place that gives such events their effect (the
  frames' block maps go through its sibling ``events.after_event``);
* the block map at one event is kept during the run when the event is known beforehand
  (the recorded peak: ``capture_at``), else comes from a second engine run stopped right
  after it (``state_after``);
* segment numbers ("seg N") follow the player's rule: the segments at the start by address,
  then each new segment in the order the trace allocates it.

Only the caching allocator's plain segments are read this way: a trace with expandable
segments (whose mapped ranges split and join) takes the frames (``available`` says which).
"""
from __future__ import annotations

from typing import Optional

from ..caching.snapshot import block_state
from ..caching.stats import AGGREGATE
from ..events import EXPANDABLE, totals_after_event
from .recording import DeviceRecording
from .replay import TraceStepper



def available(dev: DeviceRecording) -> bool:
    """Can these facts stand in for the frames on this device (no expandable segments)?"""
    if any(s.get("is_expandable") for s in dev.segments):
        return False
    return not any(e["action"] in EXPANDABLE for e in dev.events) and not dev.start_state().expandable


class TotalsAfterEachEvent:
    """A trace listener: (action, allocated, reserved, active) after each event the allocator makes."""

    def __init__(self, allocator, capture_at=None) -> None:
        self.allocator = allocator
        self.da = allocator.device_allocator
        # The events after which to keep the whole block map (an index, or several: the peak and
        # each OOM, so one run answers every "what did memory look like there?").
        self.capture_at = {capture_at} if isinstance(capture_at, int) else set(capture_at or ())
        self.captured_at: dict = {}       # event index -> the segments right after it
        self.actions: list = []
        self.allocated: list = []
        self.reserved: list = []
        self.active: list = []

    def __call__(self, entry) -> None:
        action = entry.action
        if action == "snapshot":                 # a look at the state, not a change
            return
        stats = self.da.stats
        counted = (stats.allocated_bytes[AGGREGATE].current, stats.reserved_bytes[AGGREGATE].current,
                   stats.active_bytes[AGGREGATE].current)
        block = self.da.active_blocks.get(entry.addr)       # the user's block, if the event names one
        if block is None:
            allocated, reserved, active = totals_after_event(action, entry.size, counted)
        else:
            allocated, reserved, active = totals_after_event(action, entry.size, counted, block.size,
                                                             block_state(block) == "inactive")
        if len(self.actions) in self.capture_at and action in ("alloc", "oom"):
            # The last event of a malloc: the blocks already are what they are after it.
            self.captured_at[len(self.actions)] = self.allocator.segments(record=False)
        self.actions.append(action)
        self.allocated.append(allocated)
        self.reserved.append(reserved)
        self.active.append(active)

    @property
    def captured(self) -> Optional[list]:
        """The block map kept for a single ``capture_at`` event (None if it was not reached)."""
        return next(iter(self.captured_at.values())) if len(self.capture_at) == 1 and self.captured_at else None

    def __deepcopy__(self, memo: dict) -> "_Muted":
        # The replay tries readings of an ambiguous trace on copies of its allocator: what a
        # copy does is not what happened.
        return _Muted()


class _Muted:
    def __call__(self, entry) -> None:
        pass


class VerifyFacts:
    """One verify run of a device with the totals after each event (see the module doc)."""

    def __init__(self, stepper: TraceStepper, capture_at=None) -> None:
        """``capture_at``: an event whose block map to keep, or several (the recorded peak and
        each OOM, say: a verified replay makes the recorded curve, so they are known before
        the run); read them in ``totals.captured_at``."""
        self.stepper = stepper
        allocator = stepper.allocator
        # The player numbers the segments present at the start by address (FrameSource).
        self.start_addresses = sorted(s["address"] for s in allocator.segments(record=False))
        self.totals = TotalsAfterEachEvent(allocator, capture_at)
        stop = allocator.trace.add_listener(self.totals)
        try:
            self.result = stepper.finish()
        finally:
            stop()
        self.first_event = 0

    def segment_numbers(self) -> dict:
        """address -> the number the player shows as "seg N" (stable over the trace)."""
        ids: dict = {}
        for address in self.start_addresses:
            ids.setdefault(address, len(ids))
        for e in self.stepper.events:
            if e["action"] == "segment_alloc":
                ids.setdefault(e["addr"], len(ids))
        return ids


def state_after(recording, device: int, index: int, profile: str = "h100-80gb") -> Optional[list]:
    """The segments right after event ``index`` of ``device`` (an ``alloc`` or ``oom``: the last
    event of its malloc) from an engine run stopped there; None when it cannot stop exactly there."""
    if recording.device(device).events[index]["action"] not in ("alloc", "oom"):
        return None
    stepper = TraceStepper(recording, device=device, profile=profile)
    stepper.run_until(index + 1)
    if stepper.next_event != index + 1 or stepper.divergence is not None:
        return None
    return stepper.allocator.segments(record=False)


__all__ = ["available", "TotalsAfterEachEvent", "VerifyFacts", "state_after"]
