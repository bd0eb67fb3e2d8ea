"""One trace entry as a compact, read-only record: what a big snapshot's trace is loaded into.

PyTorch's ``TraceEntry`` (``CUDACachingAllocator.h``) reaches Python as a dict per event
(``torch/csrc/cuda/memory_snapshot.cpp`` builds it: ``action``, ``addr`` (``device_free`` for
an ``oom``), ``size``, ``stream``, ``time_us``, ``frames``, then ``compile_context``,
``user_metadata``, ``pool_id`` on newer versions).  In a real run's snapshot a dict of six keys
is 272 bytes and its ``frames`` list 360 more on average (``sys.getsizeof``), though a few
hundred stacks make all 19,342 events.  A :class:`TraceRecord` keeps the same fields in slots
(96 bytes) and shares one ``frames`` list per distinct stack.

It reads as the dict did: ``entry["action"]``, ``entry.get("frames")``, ``"addr" in entry``,
``entry.keys()``, ``dict(entry)`` and ``==`` with a dict all work; it cannot be changed (a
tool that wants to edit an event copies it with ``dict(entry)``).
"""
from __future__ import annotations

from array import array
from collections.abc import Mapping
from typing import Optional

# The fields of TraceEntry every event has, as THCPModule_memorySnapshot (torch/csrc/cuda/Module.cpp)
# names them.  The rest (an oom's device_free, compile_context, user_metadata, a newer version's
# fields) are one dict, shared by every entry whose rest is the same (nearly all: "N/A", "").
SLOTS = ("action", "addr", "size", "stream", "time_us", "frames")
_MISSING = object()


class TraceRecord(Mapping):
    """A trace entry's fields, read like the dict ``torch.cuda.memory._snapshot()`` gives."""
    __slots__ = SLOTS + ("_keys", "_rest")

    def __getitem__(self, key):
        if key in _SLOT_SET:                  # an unset slot is a field the entry does not have
            try:
                return getattr(self, key)
            except AttributeError:
                raise KeyError(key) from None
        rest = self._rest
        if rest is None:
            raise KeyError(key)
        return rest[key]

    def get(self, key, default=None):
        if key in _SLOT_SET:
            return getattr(self, key, default)
        rest = self._rest
        return default if rest is None else rest.get(key, default)

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

_SLOT_SET = frozenset(SLOTS)
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
        setter = _SETTERS.get(key) if key in _SLOT_SET else None
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
