"""Trace events: what every allocator reports, the way PyTorch's trace does.

Data flows down as requests (malloc, free, record_stream, map) and comes back
up as these events.  Every picture, statistic and snapshot in the course is
built from them, so what a learner sees is what the allocator did.

Mirrors ``c10::cuda::CUDACachingAllocator::TraceEntry`` and the dicts that
``torch.cuda.memory._snapshot()["device_traces"]`` holds (``TraceEntry`` in ``CUDACachingAllocator.h``):

=================  ===================  ==============================
action             addr                 size
=================  ===================  ==============================
``alloc``          block address        user request (un-rounded)
``free_requested`` block address        block.requested_size
``free_completed`` block address        block.requested_size
``segment_alloc``  segment address      segment size
``segment_free``   segment address      segment size
``segment_map``    mapped range start   mapped bytes
``segment_unmap``  unmapped range start unmapped bytes
``snapshot``       0                    sum of active sizes
``oom``            (device_free)        rounded request size
=================  ===================  ==============================
"""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from enum import Enum
from typing import Callable, Iterable, Optional


class Action(str, Enum):
    """The actions of a trace entry (``TraceEntry::Action`` in ``CUDACachingAllocator.h``).

    A ``str`` so that a snapshot's ``entry["action"] == Action.ALLOC`` holds as it is read."""
    ALLOC = "alloc"                       # the user's malloc returned a block
    FREE_REQUESTED = "free_requested"     # the user freed it (it may still wait for other streams)
    FREE_COMPLETED = "free_completed"     # the block is back in its pool
    SEGMENT_ALLOC = "segment_alloc"       # cudaMalloc of a new segment
    SEGMENT_FREE = "segment_free"         # cudaFree of a segment
    SEGMENT_MAP = "segment_map"           # pages mapped into an expandable segment
    SEGMENT_UNMAP = "segment_unmap"       # pages unmapped from it
    SNAPSHOT = "snapshot"                 # someone took a snapshot: nothing changed
    OOM = "oom"                           # a malloc failed (addr holds the device's free bytes)


ACTIONS = tuple(a.value for a in Action)

# What each action does, said once here: every replay, picture and verdict reads these tuples
# (plain strings, so they compare and hash as a snapshot's own strings do).
NEW_MEMORY = ("segment_alloc", "segment_map")         # memory taken from the device (cudaMalloc, map)
RELEASES = ("segment_free", "segment_unmap")          # memory given back to it (cudaFree, unmap)
USER_CALLS = ("alloc", "free_requested")              # the user's malloc and free
FAILED_CALL = "oom"                                   # a user's malloc that failed, announced instead
ANNOUNCES = ("snapshot", "oom")                       # reports: no memory changes hands
EXPANDABLE = ("segment_map", "segment_unmap")         # only expandable segments make these
RESERVED_CHANGE = {**{a: 1 for a in NEW_MEMORY}, **{a: -1 for a in RELEASES}}   # sign on memory_reserved()


_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep     # allocator_ref/


def gather_python_stack(limit: int = 32) -> list:
    """The calling Python stack, innermost first, without this package's own frames.

    (Gathers a live stack; ``memory_doctor.diagnosis.python_frames`` formats a recorded one.)
    The reference allocator's ``GatheredContext``: what a snapshot shows as ``frames``
    so a learner sees which line of *their* code made an allocation.
    """
    frames = []
    frame = sys._getframe(1)
    while frame is not None and len(frames) < limit:
        filename = frame.f_code.co_filename
        if not filename.startswith(_PACKAGE_DIR):
            frames.append({"filename": filename, "line": frame.f_lineno, "name": frame.f_code.co_name})
        frame = frame.f_back
    return frames


@dataclass
class TraceEntry:
    """One thing the allocator did.  ``to_dict`` gives PyTorch's trace-entry dict."""

    action: str
    addr: int                 # for "oom" this is the device's free bytes (PyTorch's device_free)
    size: int
    stream: int               # raw stream handle, 0 = default stream
    time_us: int = 0
    frames: Optional[list] = None      # only present when a context was recorded
    pool_id: tuple = (0, 0)
    compile_context: str = "N/A"
    user_metadata: str = ""

    def to_dict(self) -> dict:
        d = {"action": self.action}
        if self.action == "oom":
            d["device_free"] = self.addr
        else:
            d["addr"] = self.addr
        d.update(size=self.size, stream=self.stream, time_us=self.time_us,
                 compile_context=self.compile_context, user_metadata=self.user_metadata,
                 pool_id=tuple(self.pool_id))
        if self.frames is not None:
            d["frames"] = list(self.frames)
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "TraceEntry":
        action = d["action"]
        addr = d.get("device_free", 0) if action == "oom" else d.get("addr", 0)
        return cls(action=action, addr=int(addr), size=int(d.get("size", 0)),
                   stream=int(d.get("stream", 0)), time_us=int(d.get("time_us", 0) or 0),
                   frames=d.get("frames"), pool_id=tuple(d.get("pool_id", (0, 0))),
                   compile_context=d.get("compile_context", "N/A"),
                   user_metadata=d.get("user_metadata", ""))


@dataclass
class TraceRecorder:
    """The trace ring buffer behind ``_record_memory_history``.

    ``enabled`` is None (off), "state" or "all".  Both "state" and "all" record
    (``record_history`` is true for either); "state" only shrinks the ring to one
    entry (``torch/csrc/cuda/memory_snapshot.cpp::_record_memory_history`` sets
    ``max_entries = enabled == "all" ? max_entries : 1``), so the latest event is kept.
    The ring is ``c10::RingBuffer``: a vector plus the index of the next slot to
    overwrite; ``setMaxEntries`` changes only the limit (see :meth:`_insert`).
    Listeners (the live widget, the replay checker) see every event even when
    history is off: they are how pictures follow the allocator.
    """

    enabled: Optional[str] = None
    context: Optional[str] = None
    max_entries: int = sys.maxsize
    skip_actions: frozenset = frozenset()
    listeners: list = field(default_factory=list)
    overflowed: bool = False
    active: bool = False      # anyone to tell? (history on or a listener): allocators skip building entries otherwise
    user_metadata: str = ""   # torch.cuda.memory._set_memory_metadata: stamped on every later entry
    _buffer: list = field(default_factory=list)    # RingBuffer::alloc_trace
    _next: int = 0                                 # RingBuffer::alloc_trace_next

    def configure(self, enabled: Optional[str] = "all", context: Optional[str] = "all",
                  max_entries: int = sys.maxsize, clear_history: bool = False,
                  skip_actions: Optional[Iterable[str]] = ()) -> None:
        """``torch.cuda.memory._record_memory_history``'s arguments and checks."""
        if enabled not in (None, "state", "all"):
            raise ValueError(f"enabled must be None, 'state' or 'all', got {enabled!r}")
        if context not in (None, "state", "alloc", "all"):
            raise ValueError(f"context must be None, 'state', 'alloc' or 'all', got {context!r}")
        if not isinstance(max_entries, int) or isinstance(max_entries, bool):
            raise TypeError(f"max_entries must be an int, got {type(max_entries).__name__}")
        skip_actions = [] if skip_actions is None else list(skip_actions)   # memory.py: None means []
        unknown = set(skip_actions) - set(ACTIONS)
        if unknown:
            raise ValueError(f"skip_actions has unknown actions {sorted(unknown)}; known: {list(ACTIONS)}")
        self.enabled = enabled
        # DeviceCachingAllocator::recordHistory: record_context_ = enabled ? when : NEVER.
        self.context = context if enabled is not None else None
        self._update_active()
        # memory_snapshot.cpp: "state" keeps a one-entry ring; RingBuffer::setMaxEntries clamps to >= 1.
        self.max_entries = max(1, max_entries if enabled == "all" else 1)
        self.skip_actions = frozenset(skip_actions)
        if clear_history or enabled is None:     # RingBuffer::clear
            self._buffer.clear()
            self._next = 0
            self.overflowed = False

    def record(self, entry: TraceEntry) -> None:
        if self.user_metadata:
            entry.user_metadata = self.user_metadata
        for listener in self.listeners:
            listener(entry)
        if self.enabled is None or entry.action in self.skip_actions:
            return
        self._insert(entry)

    def _insert(self, entry: TraceEntry) -> None:
        """``RingBuffer::insertEntries``: append below the limit, else overwrite slot ``next``.

        Like PyTorch, a limit lowered after the buffer grew does not drop entries: only the
        first ``max_entries`` slots are overwritten from then on, and a limit raised again
        appends after them, so the order read back can jump (that is PyTorch's behaviour).
        """
        if len(self._buffer) < self.max_entries:
            self._buffer.append(entry)
            return
        if self._next >= len(self._buffer):
            self._next = 0            # C++ would write past the vector here (undefined); wrap instead
        self._buffer[self._next] = entry
        self.overflowed = True
        self._next += 1
        if self._next == self.max_entries:
            self._next = 0

    @property
    def entries(self) -> list:
        """``RingBuffer::getEntries``: from slot ``next`` to the end, then the start."""
        return self._buffer[self._next:] + self._buffer[:self._next]

    def add_listener(self, fn: Callable[[TraceEntry], None]) -> Callable[[], None]:
        """Call ``fn(entry)`` for every future event; returns a function that stops it."""
        self.listeners.append(fn)
        self._update_active()

        def remove() -> None:
            if fn in self.listeners:
                self.listeners.remove(fn)
            self._update_active()
        return remove

    def _update_active(self) -> None:
        self.active = self.enabled is not None or bool(self.listeners)

    def dicts(self) -> list[dict]:
        return [e.to_dict() for e in self.entries]
