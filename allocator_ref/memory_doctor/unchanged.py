"""A ``max_split_size_mb`` row the recorded replay has already answered.

PyTorch compares sizes with ``max_split_size`` in a few places of
``DeviceCachingAllocator`` (c10/cuda/CUDACachingAllocator.cpp), each mirrored in
caching/device_caching_allocator.py:

* ``get_free_block``: a request below it skips a cached block of at least it; a request of
  at least it skips a block ``max_non_split_rounding`` larger than itself;
* ``should_split``: a large block is split only for a request below it;
* ``release_available_cached_blocks`` (the retry ladder): unset, it releases nothing; set, it
  releases cached blocks of at least it, and only those;
* ``alloc_found_block`` / ``release_block``: the oversize stats, which no row shows;
* and the rebuild of the state at the first event (trace/rebuild.py) asks the same of each block.

When the replay of the recorded settings (no ``max_split_size``) made no segment of ``X`` or
more, no block reached ``X`` (a block lies inside a segment), and no request did either (one
that was served fits in a block; the refused ones are checked).  Under ``max_split_size_mb:X``
each of those comparisons then comes out as it did, so the replay makes the same decision at
every step, from the same start, and measures the same row: it is taken from that replay
instead of being run again (tests/test_doctor_unchanged.py runs both and compares).
"""
from __future__ import annotations

import dataclasses
from typing import Optional

from ..caching.config import SIZE_MAX, AllocatorConfig, round_size

MEASURED = ("usable", "peak_reserved", "peak_allocated", "fragmentation", "frag_at_live_peak", "device_calls",
            "device_call_ms", "alloc_retries", "ooms", "fits", "start_does_not_fit", "peak_at", "start_held",
            "start_live", "largest_segment")


def answered_by(trial, done: list, program, usable: Optional[int]):
    """The replayed row (a remedies.Trial of ``done``) of the recorded settings on the same GPU whose
    answer ``trial`` shares, or None.  ``program`` is what both replay (whatif.Program)."""
    if trial.kind != "max_split" or trial.policy != "caching" or trial.fraction is not None:
        return None
    base = next((t for t in done if t.kind in ("recorded", "recorded-on-target") and t.usable == usable
                 and not t.skipped and t.policy == "caching"), None)
    if base is None or base.largest_segment == 0:
        return None
    recorded, changed = AllocatorConfig.parse(base.config), AllocatorConfig.parse(trial.config)
    if recorded.max_split_size != SIZE_MAX or recorded.expandable_segments:
        return None                  # an expandable segment's blocks are not bounded by a cudaMalloc
    if dataclasses.replace(changed, max_split_size=SIZE_MAX, last_settings="") != \
            dataclasses.replace(recorded, last_settings=""):
        return None                  # something else changed too
    if program.start is not None and program.start.expandable:
        return None
    largest_request = max((round_size(a.size, recorded) for a in program.actions if a.kind in ("malloc", "request")),
                          default=0)
    if max(base.largest_segment, largest_request) >= changed.max_split_size:
        return None
    return base


def copy_answer(trial, base):
    """``trial`` with what ``base``'s replay measured (its own settings and words stay)."""
    for name in MEASURED:
        setattr(trial, name, getattr(base, name))
    return trial
