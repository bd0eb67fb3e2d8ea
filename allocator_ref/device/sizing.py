"""A simulated GPU big enough for the snapshot it replays.

A snapshot does not say how big its GPU was.  The replays run on a device profile
(``h100-80gb`` by default); a run recorded on a larger GPU (a B200 holds 180 GB) reserved
more than that profile holds, and its replay would fail for want of memory that PyTorch
had.  ``fit_profile`` keeps the profile when the snapshot fits in it, and otherwise asks for
the same profile on a GPU just large enough: the most the trace ever held in segments, plus
the profile's CUDA-context reserve, rounded up to a whole GiB.  The new device is written
``NAME@BYTES`` (``costs.load_profile`` reads it) so every replay built from the name, the
verification and every what-if alike, gets the same GPU.

Expandable segments need no more than that: PyTorch's ``ExpandableSegment`` reserves 1.125x
the device's memory of address space (``CUDACachingAllocator.cpp``, ``ExpandableSegment``'s
constructor), so a device that holds the segment also has the address range for it.
"""
from __future__ import annotations

from typing import Optional

from ..editions.messages import translator
from ..events import RESERVED_CHANGE
from .costs import load_profile

tr = translator("doctor")          # the doctor says why it sized the simulated GPU up

GiB = 2**30


def most_reserved(events: list, finals: list) -> int:
    """The most bytes the trace ever held in segments (memory_reserved's peak).

    Walked backwards from the final segments: before each segment_alloc/map there was that
    much less, before each segment_free/unmap that much more.
    """
    held = sum(int(s.get("total_size", 0)) for s in finals)
    peak = held
    for e in reversed(events):
        sign = RESERVED_CHANGE.get(e.get("action"))
        if sign:
            held -= sign * int(e.get("size", 0))
            peak = max(peak, held)
    return peak


def fit_profile(profile: str, needed: int) -> tuple[str, str]:
    """(profile to replay on, one line saying why, or "" when ``profile`` already holds ``needed``)."""
    prof = load_profile(profile)
    usable = prof.total_memory - prof.context_reserve
    if needed <= usable:
        return profile, ""
    total = -(-(needed + prof.context_reserve) // GiB) * GiB
    base = profile.partition("@")[0]
    return (f"{base}@{total}",
            tr("the trace held up to {needed} GiB in segments, more than the '{base}' profile's {usable} GiB usable: "
               "its replays run on a simulated {base} sized to {total} GiB", needed=f"{needed / GiB:.1f}", base=base,
               usable=f"{usable / GiB:.1f}", total=total // GiB))


def profile_for_snapshot(snapshot: dict, device: int, profile: str, events: Optional[list] = None,
                         device_memory: Optional[int] = None) -> tuple[str, str]:
    """``fit_profile`` for one device of a loaded snapshot (and at least ``device_memory`` bytes total)."""
    if events is None:
        traces = snapshot.get("device_traces") or []
        events = traces[device] if 0 <= device < len(traces) else []
    finals = [s for s in snapshot.get("segments") or [] if s.get("device", 0) == device]
    name, note = fit_profile(profile, most_reserved(events or [], finals))
    prof = load_profile(name)
    if device_memory is not None and device_memory > prof.total_memory:
        base = profile.partition("@")[0]
        name = f"{base}@{int(device_memory)}"
        note = tr("--device-memory {gib} GiB is more than the '{base}' profile holds: every replay runs on a "
                  "simulated {base} of that size", gib=f"{device_memory / GiB:g}", base=base)
    return name, note
