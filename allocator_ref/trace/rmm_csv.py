"""RMM's ``logging_resource_adaptor`` CSV as trace events.

The log has the header ``Thread,Time,Action,Pointer,Size,Stream`` and one row
per allocate/free (RMM's ``logging_resource_adaptor.hpp``).  RMM logs no segments and
no rounding, so the events are only ``alloc`` and ``free_requested`` +
``free_completed``: enough to replay the same requests on any policy.
"""
from __future__ import annotations

import csv
import io
from pathlib import Path

from ..events import TraceEntry
from .snapshot import max_snapshot_bytes, read_regular_file

REQUIRED = ("Action", "Pointer", "Size", "Stream")


def _int(text, what: str, line: int, source: str) -> int:
    text = (text or "").strip()
    try:
        value = int(text, 16) if text.lower().startswith("0x") else int(text)
    except ValueError:
        raise ValueError(f"{source}:{line}: {what} {text[:40]!r} is not a number") from None
    if not 0 <= value < 2**64:
        raise ValueError(f"{source}:{line}: {what} {text[:40]!r} is not between 0 and 2**64")
    return value


def read_rmm_log(path) -> list[TraceEntry]:
    """Parse an RMM log into TraceEntry objects (time in µs from the log's Time column when present)."""
    path = Path(path)
    entries: list[TraceEntry] = []
    sizes: dict[int, int] = {}
    # The same file checks as snapshots: a regular file under the size limit, read once.
    try:
        text = read_regular_file(path, max_snapshot_bytes(),
                                 "an RMM log is a regular CSV file").decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path}: not an RMM log: not UTF-8 text (byte {exc.start})") from None
    with io.StringIO(text, newline="") as f:
        reader = csv.DictReader(f)
        if reader.fieldnames is None or any(k not in reader.fieldnames for k in REQUIRED):
            raise ValueError(f"{path}: not an RMM log: the header must contain {', '.join(REQUIRED)} "
                             f"(got {reader.fieldnames})")
        for line, row in enumerate(reader, start=2):
            action = (row["Action"] or "").strip().lower()
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
