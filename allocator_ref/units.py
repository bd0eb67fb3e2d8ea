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
