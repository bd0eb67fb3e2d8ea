"""RMM's ``logging_resource_adaptor`` CSV as trace events.

The log has the header ``Thread,Time,Action,Pointer,Size,Stream`` and one row
per allocate/free (peer-allocators.md section 2.7).  RMM logs no segments and
no rounding, so the events are only ``alloc`` and ``free_requested`` +
``free_completed``: enough to replay the same requests on any policy.
"""
from __future__ import annotations

import csv
from pathlib import Path

from .events import TraceEntry

REQUIRED = ("Action", "Pointer", "Size", "Stream")


def _int(text: str, what: str, line: int, source: str) -> int:
    text = text.strip()
    try:
        return int(text, 16) if text.lower().startswith("0x") else int(text)
    except ValueError:
        raise ValueError(f"{source}:{line}: {what} {text!r} is not a number") from None


def read_rmm_log(path) -> list[TraceEntry]:
    """Parse an RMM log into TraceEntry objects (time in µs from the log's Time column when present)."""
    path = Path(path)
    entries: list[TraceEntry] = []
    sizes: dict[int, int] = {}
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        if reader.fieldnames is None or any(k not in reader.fieldnames for k in REQUIRED):
            raise ValueError(f"{path}: not an RMM log: the header must contain {', '.join(REQUIRED)} "
                             f"(got {reader.fieldnames})")
        for line, row in enumerate(reader, start=2):
            action = row["Action"].strip().lower()
            ptr = _int(row["Pointer"], "Pointer", line, str(path))
            size = _int(row["Size"], "Size", line, str(path))
            stream = _int(row["Stream"], "Stream", line, str(path))
            if action == "allocate":
                sizes[ptr] = size
                entries.append(TraceEntry("alloc", ptr, size, stream, line))
            elif action == "free":
                size = sizes.pop(ptr, size)
                entries.append(TraceEntry("free_requested", ptr, size, stream, line))
                entries.append(TraceEntry("free_completed", ptr, size, stream, line))
            elif action in ("allocate failure", "allocate_failure"):
                entries.append(TraceEntry("oom", 0, size, stream, line))
            else:
                raise ValueError(f"{path}:{line}: unknown action {row['Action']!r} "
                                 "(expected allocate, free or allocate failure)")
    return entries
