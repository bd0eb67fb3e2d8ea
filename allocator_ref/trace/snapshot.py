"""Reading and writing memory snapshots safely.

A snapshot is what ``torch.cuda.memory._dump_snapshot(path)`` writes: a pickle
of the dict ``torch.cuda.memory._snapshot()`` returns.

Pickle can run arbitrary code while loading, and snapshots travel between
people.  :func:`load_snapshot` reads a file no file can crash, hang or fool:

* only a regular file, at most ``max_snapshot_mb`` (a course setting, default
  512 MiB; ``ALLOCATOR_REF_MAX_SNAPSHOT_MB`` or ``max_bytes=`` raise it for a
  file you trust), so ``/dev/zero``, a FIFO or a huge sparse file is refused
  before it is read;
* the pickle's opcodes are checked before anything is built
  (``safe_pickle.py``): no globals, calls or extension codes, nesting at most
  ``MAX_DEPTH`` deep, no reference cycles, and at most ``VALUES_PER_BYTE``
  values per byte of file once shared references are expanded;
* every field is then checked (``validate.py``): one clear line says what is
  wrong and where (which segment, block or trace entry).

The file may also be a memory_viz HTML page or a JSON snapshot (``pages.py``: the snapshot
inside goes through the same checks).  A pickle of ``STREAM_BYTES`` (64 MiB) or more loads
streaming: its opcodes are checked through a memory map, then its objects are built from the
open file with each batch of trace entries made compact records as it is read
(``stream_build.py``, ``trace_record.py``), so neither the file nor the trace as dicts is ever
held whole.  Peak RSS of a whole process loading a real run scaled to 1.3 GB (330 ranks):
1.52x the file, 233 s CPU on this 2-core machine; 4.5x as dicts (benchmarks/bench_loader.py).

:func:`save_snapshot` writes protocol 4 with plain types only, the subset
PyTorch's browser viewer (MemoryViz.js) can read.
"""
from __future__ import annotations

import mmap
import os
import pickle
import stat
from pathlib import Path
from typing import Any, Optional, Union

from ..editions.messages import say, translator
from .pages import embedded_snapshot, kind_of
from .safe_pickle import Plan, UnsafePickle, loads_plain, scan
from .stream_build import build_compact
from .trace_record import TraceRecord
from .validate import SnapshotError, validate_snapshot

MAX_DEPTH = 64               # a real snapshot nests about 6 deep
VALUES_PER_BYTE = 16         # real snapshots expand to at most ~4 values per byte (shared frames)
MIN_VALUES = 2**20
MiB = 2**20

tr = translator("doctor")          # a refusal in the reader's language (--lang / ALLOCATOR_REF_LANG)
N_ = translator("doctor", later=True)


def max_snapshot_bytes() -> int:
    """The course's size limit for snapshot files (setting ``max_snapshot_mb``)."""
    from .. import settings
    # A value that is no positive number of MiB is the settings error, naming the variable or file
    # (settings._check_max_snapshot_mb), like every other setting's.
    return int(float(settings.get("max_snapshot_mb").value) * MiB)


def loads_snapshot(data: bytes, source: str = "<bytes>") -> dict:
    """Unpickle snapshot bytes (plain data only, bounded in shape) and check every field.

    The bytes may also be a memory_viz HTML page or a JSON file (pages.py): the snapshot in it
    goes through the same checks."""
    if not data:
        raise SnapshotError(tr("{source}: the file is empty (expected a pickled memory snapshot)", source=source))
    try:
        kind = kind_of(data)
        if kind != "pickle":              # a memory_viz page or a JSON file (pages.py)
            embedded = embedded_snapshot(bytes(data), kind)
            if not isinstance(embedded, bytes):
                return validate_snapshot(embedded, distinct_records=True)
            data = embedded               # the page's pickle, checked as a pickle file is
        obj = loads_plain(bytes(data), MAX_DEPTH, VALUES_PER_BYTE * len(data) + MIN_VALUES)
        return validate_snapshot(obj, distinct_records=True)
    except (UnsafePickle, SnapshotError) as exc:
        raise SnapshotError(tr("{source}: {problem}", source=source, problem=exc)) from None


def load_snapshot(path: Union[str, os.PathLike], max_bytes: Optional[int] = None) -> dict:
    """Read a ``_dump_snapshot`` pickle safely; the result always has segments and device_traces.

    A pickle of ``STREAM_BYTES`` or more is never held as one bytes object: its opcodes are
    checked through a memory map (pages the kernel may drop), then the objects are built
    from the open file (``_load_streaming``)."""
    path = Path(path)
    limit = max_snapshot_bytes() if max_bytes is None else max_bytes
    with open_regular_file(path, limit) as f:
        info = os.fstat(f.fileno())
        if info.st_size >= STREAM_BYTES and kind_of(f.read(1024)) == "pickle":
            return _load_streaming(f, info, str(path))
        f.seek(0)
        data = _read_capped(f, limit)
    if len(data) > limit:
        _too_big(path, len(data), limit)
    return loads_snapshot(data, str(path))


# From this size on a pickle loads streaming.  Below it the trace stays dicts (what a small file's
# readers have always had); above it the dicts would cost 4.5x the file (a real run scaled to
# 78 MiB, as dicts; benchmarks/bench_loader.py), the records under 2x.
STREAM_BYTES = 64 * MiB


def _load_streaming(f, before: os.stat_result, source: str) -> dict:
    try:
        plan = Plan()
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as view:
            scan(view, MAX_DEPTH, VALUES_PER_BYTE * len(view) + MIN_VALUES, plan)
        obj = build_compact(f.fileno(), before.st_size, plan)
        del plan
        after = os.fstat(f.fileno())
        if (after.st_size, after.st_mtime_ns, after.st_ino) != (before.st_size, before.st_mtime_ns, before.st_ino):
            # What was built is not what was checked: refuse it whole.
            raise SnapshotError(tr("the file changed while it was read; load it again once "
                                   "nothing writes to it"))
        return validate_snapshot(obj, distinct_records=True)
    except (UnsafePickle, SnapshotError) as exc:
        raise SnapshotError(tr("{source}: {problem}", source=source, problem=exc)) from None


SNAPSHOT_FILE = N_("a snapshot is a regular file written by torch.cuda.memory._dump_snapshot")


def open_regular_file(path: Path, limit: int, expected: str = SNAPSHOT_FILE):
    """The open file (binary, unbuffered) if ``path`` is a regular file no bigger than ``limit``;
    anything else is refused unopened (a FIFO, a device) or unread."""
    try:
        # Refuse FIFOs and devices before opening them (opening a FIFO blocks until a writer
        # comes); then check again on what was opened, in case the path changed in between.
        _check_regular(path, os.stat(path), limit, expected)
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0))
    except OSError as exc:
        # strerror is the system's own words: a field, as it comes
        raise SnapshotError(tr("{path}: cannot read the file ({why})", path=path, why=exc.strerror)) from None
    f = os.fdopen(fd, "rb", buffering=0)
    try:
        _check_regular(path, os.fstat(fd), limit, expected)
    except SnapshotError:
        f.close()
        raise
    return f


def read_regular_file(path: Path, limit: int, expected: str = SNAPSHOT_FILE) -> bytes:
    """The bytes of a regular file no bigger than ``limit``; anything else is refused unread."""
    with open_regular_file(path, limit, expected) as f:
        data = _read_capped(f, limit)
    if len(data) > limit:
        _too_big(path, len(data), limit)
    return data


READ_CHUNK = 1 << 20


def _read_capped(f, limit: int) -> bytes:
    """At most ``limit + 1`` bytes, read a chunk at a time: memory follows the file, not the
    limit (``f.read(limit + 1)`` asks for the whole limit at once, and a limit above the
    machine's memory made every load a MemoryError)."""
    data = bytearray()
    while len(data) <= limit:
        chunk = f.read(min(READ_CHUNK, limit + 1 - len(data)))
        if not chunk:
            break
        data += chunk
    return bytes(data)


def _check_regular(path: Path, info: os.stat_result, limit: int, expected: str) -> None:
    if stat.S_ISDIR(info.st_mode):
        raise SnapshotError(tr("{path}: is a folder; {expected}", path=path, expected=say("doctor", expected)))
    if not stat.S_ISREG(info.st_mode):
        kind = tr("a FIFO (named pipe)") if stat.S_ISFIFO(info.st_mode) else \
            tr("a device") if stat.S_ISCHR(info.st_mode) or stat.S_ISBLK(info.st_mode) else \
            tr("a socket") if stat.S_ISSOCK(info.st_mode) else tr("not a regular file")
        raise SnapshotError(tr("{path}: is {kind}; {expected}", path=path, kind=kind,
                               expected=say("doctor", expected)))
    if info.st_size > limit:
        _too_big(path, info.st_size, limit)


def _too_big(path: Path, size: int, limit: int) -> None:
    raise SnapshotError(tr("{path}: is {size:,.1f} MiB, over the {limit:,.0f} MiB limit for "
                           "snapshots; for a file you trust, raise it with "
                           "ALLOCATOR_REF_MAX_SNAPSHOT_MB (or max_snapshot_mb in course-settings.toml, "
                           "or load_snapshot(path, max_bytes=...))", path=path, size=size / MiB,
                           limit=limit / MiB))


def _plain(value: Any) -> Any:
    """Only the types MemoryViz.js can read: dict/list/tuple/str/int/float/bool/None."""
    if isinstance(value, (dict, TraceRecord)):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        converted = [_plain(v) for v in value]
        return tuple(converted) if isinstance(value, tuple) else converted
    if isinstance(value, bool) or value is None or isinstance(value, (str, float)):
        return value
    if isinstance(value, int):
        return int(value)
    raise TypeError(f"cannot store a {type(value).__name__} in a snapshot: only plain data is allowed")


def save_snapshot(snapshot: dict, path: Union[str, os.PathLike]) -> Path:
    """Write a snapshot that torch's _memory_viz and pytorch.org/memory_viz can read (pickle protocol 4)."""
    path = Path(path)
    with open(path, "wb") as f:
        pickle.dump(_plain(snapshot), f, protocol=4)
    return path
