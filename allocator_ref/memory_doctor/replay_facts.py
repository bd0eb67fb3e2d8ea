"""What one verify replay of a device shows after each event, and the block map at one event.

The doctor's facts (``diagnosis.py``) are read off the replay engine's counters
(``trace/verify_facts.py``), for every trace: plain or expandable segments, a replay that
reproduced PyTorch or one that diverged.  No fact comes from a drawing: the frames the player
and the HTML page draw are the drawing side's (``report.frames_of``), recorded only when one
of them asks.
"""
from __future__ import annotations

from ..trace.replay import TraceStepper
from ..trace.verify_facts import VerifyFacts, state_after

CALL_ACTIONS = ("alloc", "free_requested", "free_completed", "oom")     # where a user call finished


def replay_facts(recording, device: int, profile: str = "h100-80gb") -> dict:
    """What one verify replay of ``device`` shows after each event the allocator reported (``events``
    of them, from ``first_event``), and how to get the block map at one of them (``state_at``)."""
    dev = recording.device(device)
    # A verified replay makes the recorded reserved curve, so its peak (read as diagnose reads
    # it: where a user call finished) and its first OOM are known before the run: their block
    # maps are kept then, and a trace with an OOM is replayed once.
    recorded = dev.reserved_after_each_event()
    calls = [i for i, e in enumerate(dev.events) if e["action"] in CALL_ACTIONS]
    wanted = {max(calls, key=recorded.__getitem__)} if calls else set()
    first_oom = next((i for i, e in enumerate(dev.events) if e["action"] == "oom"), None)
    if first_oom is not None:
        wanted.add(first_oom)
    facts = VerifyFacts(TraceStepper(recording, device=device, profile=profile), capture_at=wanted)
    t = facts.totals
    cached: dict = dict(t.captured_at)

    def state_at(i: int) -> list:
        if i not in cached:                  # (a replay that diverged peaks elsewhere: one more run)
            cached[i] = state_after(recording, device, i, profile)
        return cached[i]

    return {"events": len(t.actions), "first_event": facts.first_event, "verify": facts.result,
            "allocated": t.allocated, "reserved": t.reserved, "actions": t.actions,
            "pending": [a - b for a, b in zip(t.active, t.allocated)],
            "state_at": state_at, "segment_ids": facts.segment_numbers}
