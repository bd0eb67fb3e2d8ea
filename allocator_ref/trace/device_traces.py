"""One device's part of a snapshot: its trace events (what a replay can follow) and its segments.

Every reader of a trace -- the replay, the player's frames, the doctor -- asks the same
two questions, and they are answered here once:

* **Which events are there to follow?**  All but ``snapshot`` entries.  PyTorch appends
  ``{'action': 'snapshot', 'addr': 0, 'size': <active bytes>}`` to the history each time
  a snapshot is taken while history is recorded (``DeviceCachingAllocator::snapshot``
  calls ``record_trace(TraceEntry::SNAPSHOT, ...)``): someone looked, nothing changed.
  A reader that groups events into mallocs must not see them.
* **Which devices are there?**  Every device with trace events *or* segments.
  ``device_traces`` has one list per device the allocator was initialised for, and
  can be shorter than the devices the ``segments`` name (or empty, with history off).
"""
from __future__ import annotations

LOOKED_ONLY = ("snapshot",)        # actions that record a look at the state, not a change


def replayable_events(events: list) -> list:
    """``events`` without ``snapshot`` entries (the same list when it has none)."""
    if not any(e.get("action") in LOOKED_ONLY for e in events):
        return events
    return [e for e in events if e.get("action") not in LOOKED_ONLY]


def replayable_positions(events: list) -> list | None:
    """Where each replayable event sits in the raw trace; None when nothing was left out."""
    if not any(e.get("action") in LOOKED_ONLY for e in events):
        return None
    return [i for i, e in enumerate(events) if e.get("action") not in LOOKED_ONLY]


def raw_trace(snapshot: dict, device: int) -> list:
    """The device's trace as the file has it (``[]`` for a device past the end of the list)."""
    traces = snapshot.get("device_traces") or []
    return traces[device] if 0 <= device < len(traces) else []


def device_events(snapshot: dict, device: int) -> list:
    """The device's trace events a replay follows: every entry but ``snapshot`` ones."""
    return replayable_events(raw_trace(snapshot, device))


def device_segments(snapshot: dict, device: int) -> list:
    """The device's segments at the moment of the snapshot (``device`` defaults to 0 when absent)."""
    return [s for s in snapshot.get("segments", []) if s.get("device", 0) == device]


def devices_of(snapshot: dict) -> list:
    """Every device with replayable trace events or segments, in order."""
    found = {s.get("device", 0) for s in snapshot.get("segments", [])}
    for index, events in enumerate(snapshot.get("device_traces") or []):
        if replayable_events(events):
            found.add(index)
    return sorted(found)
