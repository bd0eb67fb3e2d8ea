"""One trace entry as a compact, read-only record: what a big snapshot's trace is loaded into.

PyTorch's ``TraceEntry`` (``CUDACachingAllocator.h``) reaches Python as a dict per event
(``torch/csrc/cuda/memory_snapshot.cpp`` builds it: ``action``, ``addr`` (``device_free`` for
an ``oom``), ``size``, ``stream``, ``time_us``, ``frames``, then ``compile_context``,
``user_metadata``, ``pool_id`` on newer versions).  A dict of six keys costs about 230 bytes,
and each entry's ``frames`` list about 500 more although most stacks repeat.  A
:class:`TraceRecord` keeps the same fields in slots (about 100 bytes) and shares one
``frames`` list per distinct stack, so a 1 GB snapshot fits in memory next to its file.

It reads as the dict did: ``entry["action"]``, ``entry.get("frames")``, ``"addr" in entry``,
``entry.keys()``, ``dict(entry)`` and ``==`` with a dict all work; it cannot be changed (a
tool that wants to edit an event copies it with ``dict(entry)``).
"""
from __future__ import annotations

from array import array
from collections.abc import Mapping
from typing import Optional

# The fields of TraceEntry every event has, as THCPModule_memorySnapshot (torch/csrc/cuda/Module.cpp)
# names them; an oom's device_free is held where the others hold addr (an entry has one or the
# other).  The rest (compile_context, user_metadata, a newer version's fields) are one dict, shared
# by every entry whose rest is the same (nearly all: "N/A", "").
SLOTS = ("action", "addr", "size", "stream", "time_us", "frames")
_MISSING = object()


class TraceRecord(Mapping):
    """A trace entry's fields, read like the dict ``torch.cuda.memory._snapshot()`` gives."""
    __slots__ = SLOTS + ("_keys", "_rest")

    def __getitem__(self, key):
        if key == "addr" or key == "device_free":
            if key not in self._keys:
                raise KeyError(key)
            return self.addr
        get = _GETTERS.get(key)
        if get is not None:
            try:
                return get(self)
            except AttributeError:
                raise KeyError(key) from None
        rest = self._rest
        if rest is None:
            raise KeyError(key)
        return rest[key]

    def get(self, key, default=None):
        try:
            return self[key]
        except KeyError:
            return default

    def __contains__(self, key) -> bool:
        return key in self._keys

    def __iter__(self):
        return iter(self._keys)

    def __len__(self) -> int:
        return len(self._keys)

    def __setattr__(self, name, value):
        raise TypeError("a trace entry is read-only; copy it with dict(entry) to change it")

    def __repr__(self) -> str:
        return repr(dict(self))

    def __reduce__(self):
        # copy.deepcopy and pickle rebuild it from its fields, as a record again.
        return (from_fields, (dict(self),))


ENTRY_TYPES = (dict, TraceRecord)     # what a loaded trace entry may be (isinstance checks)

_GETTERS = {name: TraceRecord.__dict__[name].__get__ for name in SLOTS}
_SETTERS = {name: TraceRecord.__dict__[name].__set__ for name in SLOTS + ("_keys", "_rest")}
_KEYS: dict = {}          # one tuple per distinct key order (every entry of a trace shares one)


def from_fields(entry: dict, frames=_MISSING, shared: Optional[dict] = None) -> TraceRecord:
    """A record holding ``entry``'s fields (``frames`` replaces its frames list when given).

    ``shared`` keeps one dict per distinct rest of the fields (the file gives each entry its own
    ``compile_context`` string, say): pass the same dict for a whole trace."""
    record = TraceRecord.__new__(TraceRecord)
    keys = tuple(entry)
    keys = _KEYS.setdefault(keys, keys)
    rest = None
    for key, value in entry.items():
        if key == "device_free" and "addr" not in entry:
            key = "addr"
        setter = _SETTERS.get(key) if key in _GETTERS else None
        if setter is None:
            if rest is None:
                rest = {}
            rest[key] = value
        else:
            setter(record, frames if key == "frames" and frames is not _MISSING else value)
    if rest is not None and shared is not None:
        try:
            rest = shared.setdefault(tuple((k, type(v), v) for k, v in rest.items()), rest)
        except TypeError:
            pass                              # a value that cannot be a key: kept as it is
    _SETTERS["_keys"](record, keys)
    _SETTERS["_rest"](record, rest)
    return record


class StackPool:
    """One ``frames`` list per distinct stack: the first list seen with those frame records.

    A snapshot shares each frame record through pickle's memo, but gives every event a list of
    its own; two lists holding the same records in the same order are the same stack."""

    def __init__(self) -> None:
        self.lists: dict = {}

    def find(self, frames: list):
        """The list kept for this stack, or None if it is new."""
        return self.lists.get(_stack_key(frames))

    def keep(self, frames: list) -> list:
        self.lists[_stack_key(frames)] = frames
        return frames


def _stack_key(frames: list) -> bytes:
    # The frame records' identities: the kept list holds them, so no id is reused while it lives.
    return array("Q", map(id, frames)).tobytes()
