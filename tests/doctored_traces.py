"""``ar.doctor(path)`` on a real snapshot, with no option, once per test session.

Each real snapshot's doctor run is seconds of replays (the verify replay, capacity inference, the
what-if sweep), and two modules ask for the same ones: test_doctor_real.py (every snapshot) and
test_doctor_verdicts.py (five of them).  Both only read the report, so the session keeps each one
(keyed by the path and its modification time) instead of running the doctor twice.
"""
from __future__ import annotations

import functools
from pathlib import Path


@functools.lru_cache(maxsize=None)
def _doctored(path: Path, mtime_ns: int):
    import allocator_ref as ar
    return ar.doctor(path)


def doctored(path: Path):
    """The report of ``ar.doctor(path)``, made the first time a test asks for it."""
    return _doctored(path, path.stat().st_mtime_ns)
