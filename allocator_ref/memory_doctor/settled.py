"""The loaded run, kept out of the garbage collector's walks while the doctor replays it.

A doctor run loads a snapshot (a million small objects: events, frames, segments), verifies
it, then replays its program a dozen times.  Every replay makes and drops allocator objects,
so CPython's cyclic collector runs, and each full (oldest-generation) collection walks every
object alive, the loaded snapshot included, although none of it can become garbage while the
doctor holds it.  ``gc.freeze()`` moves what exists now out of every collection's walk;
``gc.unfreeze()`` puts it back when the doctor is done, so nothing stays frozen after it
(a notebook that calls the doctor often frees each run as usual).  On the fullstep trace it
took the collector's time from about 0.16 s to 0.10 s of CPU (benchmarks/REPORT.md).
"""
from __future__ import annotations

import gc
from contextlib import contextmanager


@contextmanager
def settled():
    """Everything alive now is left out of the collector's walks until the block ends."""
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()
