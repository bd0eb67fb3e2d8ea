"""Byte counts and addresses in words a learner reads at a glance.

``format_bytes(12 * 2**20) == "12.0 MiB"``.  One decimal is enough to tell
blocks apart in a picture; PyTorch's own ``format_size`` (two decimals, used
in its error messages) lives in ``allocator_ref.caching``.
"""
from __future__ import annotations

from ..units import format_bytes  # noqa: F401 (one helper for every byte count: units.py)


def format_offset(offset: int) -> str:
    """Offset inside a segment, the way the captions write it: '+0x400000'."""
    return f"+{offset:#x}"
