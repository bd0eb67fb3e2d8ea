"""What a judge raises when a submission is wrong (``Fail``), and the submission as a graded
check's clean process sees it (``Apart``).

Their own file because both judges need them: ``check.py`` in the notebook's process and
``clean.py`` in a graded check's clean process (each importing the other would be a circle).
"""
from __future__ import annotations

from typing import Any, Callable, Optional

from ..editions.messages import translator

tr = translator("labs")


class Fail(Exception):
    """Raised by a case's judge: ``message`` is located (may show expected values);
    ``safe`` is what may be printed for a hidden case (no expected values)."""

    def __init__(self, message: str, safe: Optional[str] = None, hint: Optional[str] = None) -> None:
        super().__init__(message)
        self.message = message
        self.safe = safe or tr("your result differs from what the reference allocator does on this input")
        self.hint = hint


class Apart:
    """The submission as a graded check's clean process sees it (``clean._Remote``): it lives in the
    notebook's process, so the judge can only call it (plain data back) or ask :func:`check.observed`."""

    def observe(self, runner: Callable, args: tuple) -> Any:       # pragma: no cover -- apart.py defines it
        raise NotImplementedError


__all__ = ["Fail", "Apart"]
