"""What one verify replay of a device shows after each event, and the block map at one event.

The doctor's facts (``diagnosis.py``) are read off the replay engine's counters
(``trace/verify_facts.py``) where they can stand in for frames; the frames the player and the
HTML page draw are recorded only when one of them asks (``LazyFrames``).  A replay the counters
cannot follow (one that diverged) is read off recorded frames instead.
"""
from __future__ import annotations

from ..trace.replay import TraceStepper
from ..viz.replay_frames import frames_of_stepper

CALL_ACTIONS = ("alloc", "free_requested", "free_completed", "oom")     # where a user call finished


def replay_facts(recording, device: int, profile: str = "h100-80gb") -> dict:
    """What one verify replay of ``device`` shows after each event, and how to get the block map
    at one event.  Read off the replay engine's counters (trace/verify_facts.py) where they can
    stand in for the frames, with the frames recorded only if the player or the page asks
    (``LazyFrames``); else (expandable segments, a replay that diverged) off the frames."""
    from ..trace.verify_facts import VerifyFacts, available, state_after
    from ..viz.replay_frames import LazyFrames
    dev = recording.device(device)
    if available(dev):
        # A verified replay makes the recorded reserved curve, so its peak (read as diagnose reads
        # it: where a user call finished) is known before the run: its block map is kept then.
        recorded = dev.reserved_after_each_event()
        calls = [i for i, e in enumerate(dev.events) if e["action"] in CALL_ACTIONS]
        peak = max(calls, key=recorded.__getitem__) if calls else None
        facts = VerifyFacts(TraceStepper(recording, device=device, profile=profile), capture_at=peak)
        t = facts.totals
        if facts.result.perfect and len(t.actions) == len(dev.events):
            cached: dict = {} if t.captured is None else {peak: t.captured}

            def state_at(i: int) -> list:
                if i not in cached:
                    exact = state_after(recording, device, i, profile)
                    cached[i] = exact if exact is not None else frames.recorded.state(i)
                return cached[i]

            frames = LazyFrames(recording, device, len(dev.events), profile=profile)
            return {"frames": frames, "verify": facts.result, "allocated": t.allocated, "reserved": t.reserved,
                    "actions": t.actions, "pending": [a - b for a, b in zip(t.active, t.allocated)],
                    "state_at": state_at, "segment_ids": facts.segment_numbers}
    stepper = TraceStepper(recording, device=device, profile=profile)
    frames = frames_of_stepper(stepper)
    verify = stepper.finish()
    totals = frames.memory_totals()
    return {"frames": frames, "verify": verify, "allocated": [a for a, _ in totals],
            "reserved": [r for _, r in totals], "actions": [e.get("action") for e in frames.events],
            "pending": [active - alloc for alloc, active in frames.segment_sums("allocated_size", "active_size")],
            "state_at": frames.state, "segment_ids": lambda: frames.segment_ids}
