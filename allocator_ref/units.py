"""Byte counts in words a learner reads at a glance: ``format_bytes(12 * 2**20) == "12.0 MiB"``.

The one helper every report uses (the doctor's text, the pictures' captions), so the same bytes
read the same everywhere.  One decimal is enough to tell blocks apart; PyTorch's own
``format_size`` (two decimals, used in its error messages) lives in ``allocator_ref.caching.oom``.
"""
from __future__ import annotations

_UNITS = ("B", "KiB", "MiB", "GiB", "TiB")


def format_bytes(n: int) -> str:
    """1536 -> '1.5 KiB'; 512 -> '512 B'; binary units, one decimal."""
    n = int(n)
    if abs(n) < 1024:
        return f"{n} B"
    value = float(n)
    for unit in _UNITS[1:]:
        value /= 1024.0
        if abs(value) < 1024 or unit == _UNITS[-1]:
            return f"{value:.1f} {unit}"
    raise AssertionError("unreachable")


def percent_of(part: int, whole: int) -> str:
    """``part`` as a share of ``whole``, one decimal, never rounded onto 0 or 100 it did not reach.

    2057 of 2058 is '99.9', not '100.0' (a report that says 100.0% of allocations matched, beside
    "Reproduced: NO", says two things at once); 1 of 5000 is '0.1', not '0.0'.  An empty whole is '100.0'
    (nothing to match, nothing missed)."""
    if whole <= 0 or part == whole:
        return "100.0"
    if part == 0:
        return "0.0"
    text = f"{100.0 * part / whole:.1f}"
    if text == "100.0":
        return "99.9"
    return "0.1" if text == "0.0" else text
