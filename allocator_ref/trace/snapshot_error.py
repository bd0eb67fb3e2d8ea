"""The one error a bad snapshot file raises, and how a value from it is shown in that error.

Its own file so that the checks (validate.py) and the upgrade of older formats (formats.py)
can both raise it without importing each other.
"""
from __future__ import annotations

from typing import Any


class SnapshotError(ValueError):
    """A snapshot file that cannot be used; the message names the file and the problem."""


def show(value: Any) -> str:
    """A value for an error message, short and safe whatever it is (a huge int, a long string)."""
    if isinstance(value, bool) or value is None:
        return repr(value)
    if isinstance(value, int):
        return str(value) if value.bit_length() <= 128 else f"an integer of {value.bit_length()} bits"
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, str):
        return repr(value[:40] + "...") if len(value) > 40 else repr(value)
    return f"a {type(value).__name__}"
