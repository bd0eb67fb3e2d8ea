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
  (the recorded peak and the first OOM: ``capture_at``), else comes from a second engine run
  that keeps it (``state_after``); an event announced before its change (a ``free_completed``)
  is given its effect by ``events.after_event``, as the frames' are;
* segment numbers ("seg N") follow the player's rule: the segments at the start by address,
  then each new segment as it first appears (a ``segment_alloc``, or an expandable segment's
  ``segment_map``/``segment_unmap`` reshaping its mapped ranges: new ranges by address).

Any trace is read this way, expandable segments and a replay that diverged included: the
counters are the allocator's own, whatever it did, and the facts index the events it reported.
"""
from __future__ import annotations

from typing import Optional

from ..caching.snapshot import block_state
from ..caching.stats import AGGREGATE
from ..events import ANNOUNCED_BEFORE, after_event, totals_after_event
from .replay import TraceStepper

RESHAPES = ("segment_map", "segment_unmap")     # an expandable segment's mapped ranges split or join


class TotalsAfterEachEvent:
    """A trace listener: (action, allocated, reserved, active) after each event the allocator makes."""

    def __init__(self, allocator, capture_at=None) -> None:
        self.allocator = allocator
        self.da = allocator.device_allocator
        # The events after which to keep the whole block map (an index, or several: the peak and
        # each OOM, so one run answers every "what did memory look like there?").
        self.capture_at = {capture_at} if isinstance(capture_at, int) else set(capture_at or ())
        self.captured_at: dict = {}       # event index -> the segments right after it
        # "seg N": the segments at the start by address, then each as it first appears.
        self.segment_ids: dict = {}
        for address in sorted(s["address"] for s in allocator.segments(record=False)):
            self.segment_ids.setdefault(address, len(self.segment_ids))
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
        if action == "segment_alloc":
            self.segment_ids.setdefault(entry.addr, len(self.segment_ids))
        elif action in RESHAPES:
            for address in sorted(s["address"] for s in self.allocator.segments(record=False)):
                self.segment_ids.setdefault(address, len(self.segment_ids))
        if len(self.actions) in self.capture_at:
            self.captured_at[len(self.actions)] = settle(entry, self.allocator.segments(record=False))
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


def settle(entry, segments: list) -> list:
    """The segments right *after* ``entry``, from those read while the allocator reports it: an
    event announced before its change (``events.ANNOUNCED_BEFORE``) gets it from
    ``events.after_event``, on the one segment it touches (the frames do the same)."""
    if entry.action not in ANNOUNCED_BEFORE:
        return segments                  # (an alloc, the last event of its malloc, is done already)
    old = next((s for s in segments if s["address"] <= entry.addr < s["address"] + s["total_size"]), None)
    new = after_event(entry.to_dict(), old)
    if new is old:
        return segments
    kept = [s for s in segments if s is not old]
    return kept if new is None else sorted(kept + [new], key=lambda s: s["address"])


class VerifyFacts:
    """One verify run of a device with the totals after each event (see the module doc)."""

    def __init__(self, stepper: TraceStepper, capture_at=None) -> None:
        """``capture_at``: an event whose block map to keep, or several (the recorded peak and
        each OOM, say: a verified replay makes the recorded curve, so they are known before
        the run); read them in ``totals.captured_at``."""
        self.stepper = stepper
        allocator = stepper.allocator
        self.totals = TotalsAfterEachEvent(allocator, capture_at)
        stop = allocator.trace.add_listener(self.totals)
        try:
            self.result = stepper.finish()
        finally:
            stop()
        self.first_event = 0

    def segment_numbers(self) -> dict:
        """address -> the number the player shows as "seg N" (stable over the trace)."""
        return self.totals.segment_ids


def state_after(recording, device: int, index: int, profile: str = "h100-80gb") -> list:
    """The segments right after the ``index``-th event the allocator reports on ``device`` (the
    frames' index: 'snapshot' looks left out), from a second engine run that keeps them there."""
    stepper = TraceStepper(recording, device=device, profile=profile)
    totals = TotalsAfterEachEvent(stepper.allocator, index)
    stop = stepper.allocator.trace.add_listener(totals)
    try:
        stepper.run_until(index + 1)     # a verified replay reports event i as the trace's i-th
        if index not in totals.captured_at:
            stepper.run_until(len(stepper.events))     # one that diverged may report it later
    finally:
        stop()
    return totals.captured_at.get(index, [])


__all__ = ["TotalsAfterEachEvent", "VerifyFacts", "settle", "state_after"]
