"""Build a big snapshot pickle with its trace entries made compact records as they are read.

``pickle.load`` of a 1 GB snapshot holds every trace entry as a dict (about 800 bytes each,
with its own ``frames`` list) until the last byte is read: peak memory 4.5x the file.  Here the
C unpickler still builds everything, in one pass, but reads a rewritten stream:

* after each batch of trace entries (the ``MARK ... APPENDS`` :func:`safe_pickle.scan` noted in
  its Plan), ``DUP BINPERSID POP`` hands the trace list to :meth:`_Builder.persistent_load`,
  which turns the batch's dicts into :class:`TraceRecord` s (trace_record.py) once the same
  checks ``validate.py`` makes have passed (an entry that fails stays a dict, for the
  validator to name);
* then ``NONE LONG_BINPUT k POP`` for each memo key the batch stored and nothing reads again,
  so the unpickler's memo (``Unpicklerobject.memo`` in CPython's ``Modules/_pickle.c``) lets go
  of the dicts.  The key keeps a value, so ``MEMOIZE``'s next key (``memo_len``, the number of
  keys held) stays what the file expects;
* FRAME opcodes are left out: a frame's length would no longer match what follows it, and
  framing only tells the reader how much to buffer (PEP 3154).

Nothing here reads a file :func:`scan` has not passed whole, and the unpickler still refuses
every global (``_NoGlobals``); only this module's own stream carries ``BINPERSID``.
"""
from __future__ import annotations

import io
import os
import pickle

import numpy as np

from ..editions.messages import translator
from .safe_pickle import Plan, _NoGlobals, build_scanned
from .trace_record import StackPool, from_fields
from .validate import SnapshotError, _Checker, _plain_entry

tr = translator("doctor")

_HANDOVER = b"2Q0"             # DUP, BINPERSID, POP: the trace list to persistent_load, then drop None
_FREE = np.frombuffer(b"Nr\0\0\0\x000", dtype=np.uint8)    # NONE, LONG_BINPUT <key>, POP


class _Builder(_NoGlobals):
    """The plain-data unpickler, told after each trace batch to make its entries records."""

    def __init__(self, stream) -> None:
        super().__init__(stream)
        self.done: dict = {}                # id(trace list) -> how many of its entries are records
        self.lists: list = []               # every trace list seen (checked against the result)
        self.stacks = StackPool()
        self.shared: dict = {}              # one dict per distinct rest of the fields (trace_record.py)
        self.numbers: dict = {}             # this trace's addresses and sizes, one int object each
        self.checker = _Checker(distinct_records=False)

    def persistent_load(self, trace):
        if type(trace) is not list:         # only this module's stream says BINPERSID
            raise pickle.UnpicklingError("a persistent id in a snapshot")
        start = self.done.get(id(trace))
        if start is None:
            start = 0
            self.lists.append(trace)
            self.numbers = {}                   # a block's alloc and frees share its address and size
        for k in range(start, len(trace)):
            trace[k] = self.compact(trace[k])
        self.done[id(trace)] = len(trace)
        return None

    def compact(self, entry):
        """A record of ``entry`` when it passes validate.py's checks; else ``entry`` as it is."""
        if type(entry) is not dict or not _plain_entry(entry):
            return entry
        numbers = self.numbers
        for key in ("addr", "size"):            # ints, checked by _plain_entry (not bools)
            if key in entry:
                value = entry[key]
                entry[key] = numbers.setdefault(value, value)
        frames = entry.get("frames", None)
        if frames is None:
            return entry if "frames" in entry else from_fields(entry, shared=self.shared)
        if type(frames) is not list:
            return entry
        kept = self.stacks.find(frames)
        if kept is None:
            try:
                self.checker.frames(entry, "")
            except SnapshotError:
                return entry
            kept = self.stacks.keep(frames)
        return from_fields(entry, kept, self.shared)


class _Rewritten(io.RawIOBase):
    """The file's bytes without FRAME opcodes, with the hand-over after each trace batch."""

    def __init__(self, fd: int, size: int, plan: Plan) -> None:
        self.chunks = _chunks(fd, size, plan)
        self.left = b""

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        while not self.left:
            self.left = next(self.chunks, None)
            if self.left is None:
                self.left = b""
                return 0
        n = min(len(buffer), len(self.left))
        buffer[:n] = self.left[:n]
        self.left = self.left[n:]
        return n


def _chunks(fd: int, size: int, plan: Plan):
    """The rewritten stream, a piece at a time (os.pread: nothing of the file is mapped)."""
    cuts = sorted([(int(p), 9, -1) for p in plan.frames] +
                  [(int(p), 0, b) for b, p in enumerate(plan.batch_ends)])
    freed = _freed_after(plan) if not plan.explicit_keys else None
    pos = 0
    for at, skip, batch in cuts:
        yield from _read(fd, pos, at)
        pos = at + skip
        if batch >= 0:
            yield _HANDOVER
            if freed is not None:
                yield _free_ops(freed(batch))
    yield from _read(fd, pos, size)


def _freed_after(plan: Plan):
    """For batch b, the memo keys nothing reads once it is built: those it stored that no GET
    reads, and those whose last GET came before its end (a shared frames list, say)."""
    last = np.frombuffer(plan.last_read, dtype=np.int32)
    order = np.argsort(last, kind="stable")           # keys grouped by the batch that reads them last
    starts = np.searchsorted(last[order], np.arange(len(plan.batch_ends) + 2))
    keys = plan.batch_keys

    def freed(b: int) -> np.ndarray:
        first, end = keys[2 * b], keys[2 * b + 1]
        unread = np.flatnonzero(last[first:end] == 0) + first
        done = order[starts[b + 1]:starts[b + 2]]     # last read while batch b was being read
        return np.concatenate([unread, done])
    return freed


def _read(fd: int, start: int, stop: int, piece: int = 1 << 20):
    while start < stop:
        data = os.pread(fd, min(piece, stop - start), start)
        if not data:
            raise SnapshotError(tr("the file changed while it was read; load it again once "
                                   "nothing writes to it"))
        yield data
        start += len(data)


def _free_ops(keys: np.ndarray) -> bytes:
    """``NONE LONG_BINPUT k POP`` for each key."""
    ops = np.tile(_FREE, (len(keys), 1))
    ops[:, 2:6] = keys.astype("<u4").view(np.uint8).reshape(-1, 4)
    return ops.tobytes()


def build_compact(fd: int, size: int, plan: Plan):
    """The snapshot the file holds, its trace entries records (plain dicts when the plan found
    an entry placed twice, for validate.py to name)."""
    if plan.shared_entries or not plan.batch_ends:
        return _build_plain(fd)
    reader = io.BufferedReader(_Rewritten(fd, size, plan), 1 << 20)
    builder = _Builder(reader)
    obj = build_scanned(reader, builder)
    traces = obj.get("device_traces") if isinstance(obj, dict) else None
    if not isinstance(traces, list) or {id(t) for t in builder.lists} - {id(t) for t in traces}:
        # A list of lists under another key looked like a trace: read the file again as it is.
        del obj, traces, builder
        return _build_plain(fd)
    _share_block_stacks(obj, builder.stacks)
    return obj


def _share_block_stacks(obj: dict, stacks: StackPool) -> None:
    """Each segment's and block's ``frames`` list made the one kept for its stack (the file gives
    every block a list of its own, and a few stacks made them all); validate.py checks them next."""
    segments = obj.get("segments")
    for seg in segments if isinstance(segments, list) else ():
        if type(seg) is not dict:
            continue
        _share(seg, stacks)
        blocks = seg.get("blocks")
        for block in blocks if type(blocks) is list else ():
            if type(block) is dict:
                _share(block, stacks)


def _share(record: dict, stacks: StackPool) -> None:
    frames = record.get("frames")
    if type(frames) is list:
        record["frames"] = stacks.find(frames) or stacks.keep(frames)


def _build_plain(fd: int):
    os.lseek(fd, 0, os.SEEK_SET)                     # the caller has read the file's first bytes
    with io.BufferedReader(io.FileIO(os.dup(fd), "rb"), 1 << 20) as reader:
        return build_scanned(reader)
