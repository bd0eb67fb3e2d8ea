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
from bisect import bisect_left
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

# Reported a moment before the change they announce, so a trace listener that reads the block map
# sees the state before it (c10/cuda/CUDACachingAllocator.cpp): alloc_block records SEGMENT_ALLOC
# before the new block joins a pool, free_block records FREE_COMPLETED before try_merge_blocks, and
# release_block records SEGMENT_FREE before cudaFree and pool->blocks.erase.  ``after_event`` below
# gives them their effect; every picture and total "after event i" goes through it.
ANNOUNCED_BEFORE = ("segment_alloc", "free_completed", "segment_free")
# memory_stats()' counters lag on another set: alloc_found_block raises allocated_bytes after
# record_trace(ALLOC), free_block lowers active_bytes after FREE_COMPLETED, release_block lowers
# reserved_bytes after SEGMENT_FREE (and alloc_block raises reserved_bytes *before* SEGMENT_ALLOC).
COUNTED_AFTER = ("alloc", "free_completed", "segment_free")


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


# ---------------------------------------------------------------- the state right after an event

SMALL_SEGMENT = 2 * 2**20     # kSmallBuffer: every small-pool segment is exactly 2 MiB, no large one is


def after_event(event: dict, segment: Optional[dict]) -> Optional[dict]:
    """The segment that holds ``event``'s address right *after* the event, from ``segment``, the one
    read while the allocator reported it (None: no segment there then; None back: none there now).

    The one place that gives an event of ``ANNOUNCED_BEFORE`` its effect (a snapshot dict, as
    ``DeviceCachingAllocator::snapshot`` writes it); every other event is already done when reported.
    """
    action = event.get("action")
    if action not in ANNOUNCED_BEFORE:
        return segment
    if action == "segment_alloc":
        return segment if segment is not None else fresh_segment(event)
    if action == "segment_free":
        return None if segment is not None and segment["address"] == event["addr"] else segment
    return _merged_at(segment, event["addr"]) if segment is not None else None      # free_completed


def totals_after_event(action: str, size: int, totals: tuple, block_size: int = 0,
                       shown_free: bool = False) -> tuple:
    """(allocated, reserved, active) as the block map shows them right after an event, from
    ``totals``, the allocator's counters read while it reported the event (``memory_stats``).

    ``size`` is the event's; ``block_size`` that of the block at its address (``active_blocks``);
    ``shown_free`` says the block map already shows that block free: a ``free_requested`` no other
    stream holds back reads free at once (``block_state``), though its counters move at
    ``free_completed``.  The counters' side of ``after_event``: the same moment, summed.
    """
    allocated, reserved, active = totals
    if action in COUNTED_AFTER:
        if action == "alloc":
            return allocated + block_size, reserved, active + block_size
        if action == "free_completed":
            return allocated, reserved, active - block_size
        return allocated, reserved - size, active                                   # segment_free
    if action == "free_requested" and shown_free:
        return allocated, reserved, active - block_size
    return totals


def fresh_segment(event: dict) -> dict:
    """The segment a ``segment_alloc`` adds: one inactive block as big as the segment (``alloc_block``)."""
    size = event.get("size", 0)
    return {"device": event.get("device", 0), "address": event["addr"], "total_size": size,
            "allocated_size": 0, "active_size": 0, "requested_size": 0, "stream": event.get("stream", 0),
            "segment_type": "small" if size == SMALL_SEGMENT else "large",
            "segment_pool_id": tuple(event.get("pool_id", (0, 0))), "is_expandable": False, "frames": [],
            "blocks": [{"address": event["addr"], "size": size, "requested_size": 0,
                        "state": "inactive", "frames": []}]}


def _merged_at(segment: dict, addr: int) -> dict:
    """``segment`` with the block at ``addr`` free and merged with its free neighbours (``free_block``).

    The freed block absorbs them and keeps its own ``requested_size``, as ``try_merge_blocks`` leaves it.
    PyTorch never leaves two free blocks side by side, so there is at most one on each side; other
    designs can (stream_ordered keeps a neighbour freed on another stream apart), and then the free
    blocks that follow are taken too, as the frames have always drawn it.
    """
    blocks = segment["blocks"]
    k = bisect_left(blocks, addr, key=_address)
    if k == len(blocks) or blocks[k]["address"] != addr:
        return segment
    i, j = k, k + 1
    if i > 0 and blocks[i - 1]["state"] == "inactive":
        i -= 1
    while j < len(blocks) and blocks[j]["state"] == "inactive":
        j += 1
    merged = dict(blocks[k], address=blocks[i]["address"], state="inactive",
                  size=sum(b["size"] for b in blocks[i:j]))
    return with_blocks(segment, i, j, [merged])


def with_blocks(segment: dict, i: int, j: int, new: list) -> dict:
    """``segment`` with its blocks ``i:j`` replaced by ``new``; its totals follow (as ``snapshot`` adds them)."""
    (a0, c0, r0), (a1, c1, r1) = _sums(segment["blocks"][i:j]), _sums(new)
    return dict(segment, blocks=segment["blocks"][:i] + new + segment["blocks"][j:],
                allocated_size=segment["allocated_size"] - a0 + a1,
                active_size=segment["active_size"] - c0 + c1,
                requested_size=segment["requested_size"] - r0 + r1)


def _sums(blocks: list) -> tuple[int, int, int]:
    """(allocated, active, requested) bytes of some block dicts."""
    allocated = active = requested = 0
    for b in blocks:
        if b["state"] == "active_allocated":
            allocated += b["size"]
        if b["state"] != "inactive":
            active += b["size"]
            requested += b["requested_size"]
    return allocated, active, requested


def _address(block: dict) -> int:
    return block["address"]
