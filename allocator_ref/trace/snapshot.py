"""Reading and writing memory snapshots safely.

A snapshot is what ``torch.cuda.memory._dump_snapshot(path)`` writes: a pickle
of the dict ``torch.cuda.memory._snapshot()`` returns (spec section 9.1).

Pickle can run arbitrary code while loading, and snapshots travel between
people.  The format needs nothing but dicts, lists, tuples, strings, numbers,
booleans and None, so :func:`load_snapshot` uses an unpickler that refuses
*every* global: a hostile file is rejected before anything in it runs.
:func:`save_snapshot` writes protocol 4 with plain types only, the subset
PyTorch's browser viewer (MemoryViz.js) can read.
"""
from __future__ import annotations

import io
import os
import pickle
from pathlib import Path
from typing import Any, Union


class SnapshotError(ValueError):
    """A snapshot file that cannot be used; the message names the file and the problem."""


class _NoGlobalsUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str):
        raise pickle.UnpicklingError(
            f"refused to load the global '{module}.{name}': a memory snapshot contains only "
            "plain data (dicts, lists, numbers, strings), so this file is not a snapshot "
            "or has been tampered with")


def loads_snapshot(data: bytes, source: str = "<bytes>") -> dict:
    """Unpickle snapshot bytes with every global refused, and check the shape."""
    if not data:
        raise SnapshotError(f"{source}: the file is empty (expected a pickled memory snapshot)")
    try:
        obj = _NoGlobalsUnpickler(io.BytesIO(data)).load()
    except pickle.UnpicklingError as exc:
        raise SnapshotError(f"{source}: {exc}") from None
    except (EOFError, ValueError, IndexError, KeyError, TypeError, AttributeError) as exc:
        raise SnapshotError(f"{source}: truncated or not a pickle ({type(exc).__name__}: {exc}); "
                            "was the file copied completely?") from None
    return _normalise(obj, source)


def load_snapshot(path: Union[str, os.PathLike]) -> dict:
    """Read a ``_dump_snapshot`` pickle safely; the result always has segments and device_traces."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise SnapshotError(f"{path}: cannot read the file ({exc.strerror})") from None
    return loads_snapshot(data, str(path))


def _normalise(obj: Any, source: str) -> dict:
    # torch's _memory_viz accepts a bare list of segments too (memory_snapshot()'s output).
    if isinstance(obj, list):
        obj = {"segments": obj, "device_traces": []}
    if not isinstance(obj, dict):
        raise SnapshotError(f"{source}: expected a dict with 'segments' and 'device_traces', "
                            f"got a {type(obj).__name__}")
    if "segments" not in obj or not isinstance(obj["segments"], list):
        raise SnapshotError(f"{source}: no 'segments' list: this is not a torch memory snapshot "
                            f"(top-level keys: {sorted(map(str, obj))[:8]})")
    for i, segment in enumerate(obj["segments"]):
        missing = {"address", "total_size", "stream", "blocks"} - set(segment) if isinstance(segment, dict) else {"(not a dict)"}
        if missing:
            raise SnapshotError(f"{source}: segment {i} lacks {sorted(missing)}")
        for j, block in enumerate(segment["blocks"]):
            if not isinstance(block, dict) or "size" not in block or "state" not in block:
                raise SnapshotError(f"{source}: segment {i} block {j} lacks 'size' or 'state'")
    traces = obj.setdefault("device_traces", [])
    if not isinstance(traces, list) or any(not isinstance(t, list) for t in traces):
        raise SnapshotError(f"{source}: 'device_traces' must be a list of lists (one per device)")
    for d, trace in enumerate(traces):
        for k, entry in enumerate(trace):
            if not isinstance(entry, dict) or "action" not in entry:
                raise SnapshotError(f"{source}: device {d} trace entry {k} has no 'action'")
    return obj


def _plain(value: Any) -> Any:
    """Only the types MemoryViz.js can read: dict/list/tuple/str/int/float/bool/None."""
    if isinstance(value, dict):
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
