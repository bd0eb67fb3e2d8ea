"""Who recorded a snapshot: PyTorch, or this course's simulation.

A snapshot the course makes (``CachingAllocator.snapshot()``, the other designs' ``snapshot()``,
predict's recording of a script) has the same shape as ``torch.cuda.memory._snapshot()``
(``THCPModule_memorySnapshot`` in torch/csrc/cuda/Module.cpp: ``segments``, ``device_traces``,
``allocator_settings``, ``external_annotations``), so nothing in the shape tells the two apart.
The course therefore writes one top-level key of its own when it records, and every tool that
reads a snapshot asks :func:`course_made` instead of guessing from the data.  PyTorch never writes
this key, and its own readers (``torch.cuda._memory_viz``) ignore keys they do not know.

The doctor words its report from this fact (the recorded decisions of the course's simulated run,
never PyTorch's), through its catalogue, so no one rewrites its text afterwards.
"""
from __future__ import annotations

from typing import Any

KEY = "allocator_ref"                      # the top-level key; PyTorch's snapshot has no such key
MARK = {"recorded_by": "course"}           # what the course writes under it


def mark_course_made(snapshot: dict) -> dict:
    """``snapshot`` with the course's mark added: call it where the course builds a snapshot dict."""
    snapshot[KEY] = dict(MARK)
    return snapshot


def course_made(snapshot: Any) -> bool:
    """True for a snapshot the course recorded, False for PyTorch's (or anything without the mark)."""
    mark = snapshot.get(KEY) if isinstance(snapshot, dict) else None
    return isinstance(mark, dict) and mark.get("recorded_by") == MARK["recorded_by"]


__all__ = ["KEY", "MARK", "mark_course_made", "course_made"]
