"""Trace events: what every allocator reports, the way PyTorch's trace does.

Data flows down as requests (malloc, free, record_stream, map) and comes back
up as these events.  Every picture, statistic and snapshot in the course is
built from them, so what a learner sees is what the allocator did.

Mirrors ``c10::cuda::CUDACachingAllocator::TraceEntry`` and the dicts that
``torch.cuda.memory._snapshot()["device_traces"]`` holds (spec section 9.1):

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
from collections import deque
from dataclasses import dataclass, field
from typing import Callable, Iterable, Optional

ACTIONS = (
    "alloc", "free_requested", "free_completed", "segment_alloc", "segment_free",
    "segment_map", "segment_unmap", "snapshot", "oom",
)


_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


def python_frames(limit: int = 32) -> list:
    """The calling Python stack, innermost first, without this package's own frames.

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

    ``enabled`` is None (off), "state" or "all"; entries are kept only while
    "all" is on, in a ring buffer of ``max_entries`` (oldest dropped first).
    Listeners (the live widget, the replay checker) see every event even when
    history is off: they are how pictures follow the allocator.
    """

    enabled: Optional[str] = None
    context: Optional[str] = None
    max_entries: int = sys.maxsize
    skip_actions: frozenset = frozenset()
    entries: deque = field(default_factory=deque)
    listeners: list = field(default_factory=list)
    overflowed: bool = False
    active: bool = False      # anyone to tell? (history "all" or a listener): allocators skip building entries otherwise

    def configure(self, enabled: Optional[str] = "all", context: Optional[str] = "all",
                  max_entries: int = sys.maxsize, clear_history: bool = False,
                  skip_actions: Iterable[str] = ()) -> None:
        """``torch.cuda.memory._record_memory_history``'s arguments and checks."""
        if enabled not in (None, "state", "all"):
            raise ValueError(f"enabled must be None, 'state' or 'all', got {enabled!r}")
        if context not in (None, "state", "alloc", "all"):
            raise ValueError(f"context must be None, 'state', 'alloc' or 'all', got {context!r}")
        if not isinstance(max_entries, int) or isinstance(max_entries, bool):
            raise TypeError(f"max_entries must be an int, got {type(max_entries).__name__}")
        unknown = set(skip_actions) - set(ACTIONS)
        if unknown:
            raise ValueError(f"skip_actions has unknown actions {sorted(unknown)}; known: {list(ACTIONS)}")
        self.enabled = enabled
        self.context = context
        self._update_active()
        # "state" keeps no history (PyTorch forces max_entries = 1); the ring holds at least one entry.
        self.max_entries = 1 if enabled == "state" else max(1, max_entries)
        self.skip_actions = frozenset(skip_actions)
        if clear_history or enabled is None:
            self.entries.clear()
            self.overflowed = False
        while len(self.entries) > self.max_entries:
            self.entries.popleft()

    def record(self, entry: TraceEntry) -> None:
        for listener in self.listeners:
            listener(entry)
        if self.enabled != "all" or entry.action in self.skip_actions:
            return
        if len(self.entries) >= self.max_entries:
            self.entries.popleft()
            self.overflowed = True
        self.entries.append(entry)

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
        self.active = self.enabled == "all" or bool(self.listeners)

    def dicts(self) -> list[dict]:
        return [e.to_dict() for e in self.entries]
