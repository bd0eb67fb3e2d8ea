"""Frames: what the allocator looked like after each event, and what changed.

An animation of an allocator is a list of frames.  Frame ``i`` holds

* ``event``: the i-th trace event (a PyTorch trace-entry dict),
* ``segments``: the segment list right after it (snapshot format),
* ``caption``: one line in plain words, worked out from the difference
  between the state before and after ("12.0 MiB request: best fit is the
  20.0 MiB free block at +0x0 in segment 3; split: ...");
* ``changed``: the block and segment addresses to highlight.

Frames come from a pure function of (states, events), so an animation can be
tested without a browser: ``build_frames(states, events)``.  To watch a live
allocator, ``record_frames(allocator)`` records the block map after every event
it reports (on the caching allocator it re-reads only the blocks the event
touched: ``segment_reader.py``).  Long traces (20,000 events) would not fit in
memory as 20,000 full states, so :class:`FrameSource` keeps a full copy only
every ``keyframe_every`` events and the changed segments in between; a frame is
rebuilt on demand from the nearest keyframe (a jump costs at most
``keyframe_every`` small updates).
"""
from __future__ import annotations

from bisect import bisect_right
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Iterable, Iterator, Optional

from ..editions.messages import translator
from ..events import ANNOUNCED_BEFORE, NEW_MEMORY, after_event
from .blockmap import segments_of
from .segment_reader import SegmentFollower, can_follow
from .sizes import format_bytes, format_offset

tr = translator("doctor")          # the captions in the reader's language (the snapshot tools' catalogue)


@dataclass(frozen=True)
class Frame:
    index: int                 # position in the trace (0 = after the first event)
    event: dict                # the trace entry, PyTorch's dict format
    segments: list             # state after the event, in address order
    caption: str               # one line, plain words
    changed: frozenset         # addresses (blocks and segments) to highlight
    segment_ids: dict          # address -> the number shown as "seg N" (stable over the trace)


def as_event(entry: Any) -> dict:
    """A TraceEntry or a trace dict, as a trace dict."""
    return entry.to_dict() if hasattr(entry, "to_dict") else dict(entry)


# ---------------------------------------------------------------- looking things up

def _segment_at(segments: list, addr: int) -> Optional[dict]:
    """The segment whose address range holds ``addr`` (segments sorted by address)."""
    starts = [s["address"] for s in segments]
    i = bisect_right(starts, addr) - 1
    if i >= 0 and addr < segments[i]["address"] + _span(segments[i]):
        return segments[i]
    return None


def _span(segment: dict) -> int:
    return max(segment.get("total_size", 0), sum(b["size"] for b in segment.get("blocks", ())))


def _block_at(segment: Optional[dict], addr: int) -> Optional[dict]:
    """The block of ``segment`` that holds ``addr``."""
    for block in (segment or {}).get("blocks", ()):
        if block["address"] <= addr < block["address"] + block["size"]:
            return block
    return None


def _round_request(nbytes: int) -> int:
    """PyTorch's round_size: at least 512 B, then up to a multiple of 512."""
    return max(512, -(-nbytes // 512) * 512)


# ---------------------------------------------------------------- what changed

def changed_addresses(before: list, after: list) -> frozenset:
    """Addresses of segments that appeared or vanished, and of blocks that are new or different."""
    old = {s["address"]: s for s in before}
    marked: set = set()
    for seg in after:
        prev = old.pop(seg["address"], None)
        if prev is seg or prev == seg:
            continue
        if prev is None:
            marked.add(seg["address"])
        old_blocks = {(b["address"], b["size"], b["state"]) for b in (prev or {}).get("blocks", ())}
        marked.update(b["address"] for b in seg.get("blocks", ())
                      if (b["address"], b["size"], b["state"]) not in old_blocks)
    marked.update(old)          # segments that are gone
    return frozenset(marked)


# ---------------------------------------------------------------- captions
#
# Each caption is said with ``tr`` (the doctor's catalogue, allocator_ref/locale/zh_CN/doctor.po), so a
# Chinese notebook's player speaks Chinese; the English sentences are the ones a test or a chapter
# may quote.  Code that needs to know *what* happened reads the frame's event and segments, not these words.

def describe(event: dict, before: list, after: list, segment_ids: Optional[dict] = None,
             previous_event: Optional[dict] = None) -> str:
    """One plain-words line saying what ``event`` did, read off the states around it."""
    if segment_ids is None:
        addresses = sorted({s["address"] for s in before} | {s["address"] for s in after})
        segment_ids = {a: i for i, a in enumerate(addresses)}
    ids = segment_ids
    action = event.get("action", "?")
    explain = _CAPTIONS.get(action)
    if explain is None:
        return tr("{action} event", action=action)
    return explain(event, before, after, ids, previous_event or {})


def _where(seg: Optional[dict], addr: int, ids: dict) -> str:
    if seg is None:
        return tr("at {address}", address=f"{addr:#x}")
    offset, number = format_offset(addr - seg["address"]), ids.get(seg["address"], "?")
    pool_id = tuple(seg.get("segment_pool_id") or (0, 0))
    if pool_id == (0, 0):
        return tr("at {offset} in segment {segment}", offset=offset, segment=number)
    return tr("at {offset} in segment {segment} of private pool {pool}", offset=offset, segment=number,
              pool=str(pool_id))


def _caption_alloc(event, before, after, ids, previous):
    addr, request = event["addr"], event.get("size", 0)
    new_seg, old_seg = _segment_at(after, addr), _segment_at(before, addr)
    block, found = _block_at(new_seg, addr), _block_at(old_seg, addr)
    head = tr("{size} request", size=format_bytes(request))
    if block is None or found is None:
        return tr("{head}: allocated at {address}", head=head, address=f"{addr:#x}")
    where = _where(old_seg, found["address"], ids)
    if previous.get("action") in NEW_MEMORY and found["size"] >= block["size"] \
            and _segment_at(before, previous.get("addr", -1)) is old_seg:
        source = tr("no cached block fits, so it goes in the new memory {where}", where=where)
    else:
        source = tr("best fit is the {size} free block {where}", size=format_bytes(found["size"]), where=where)
    left = found["size"] - block["size"]
    if left > 0:
        return tr("{head}: {source}; split: {allocated} allocated, {left} stays free", head=head, source=source,
                  allocated=format_bytes(block["size"]), left=format_bytes(left))
    spare = block["size"] - _round_request(request)
    if spare > 0:
        return tr("{head}: {source}; not split: the {spare} left over is too small to be worth a block, "
                  "so the whole {size} is handed out", head=head, source=source, spare=format_bytes(spare),
                  size=format_bytes(block["size"]))
    return tr("{head}: {source}; an exact fit, used whole", head=head, source=source)


def _caption_free_requested(event, before, after, ids, previous):
    addr = event["addr"]
    seg = _segment_at(after, addr) or _segment_at(before, addr)
    block = _block_at(seg, addr) or _block_at(_segment_at(before, addr), addr) or {"size": event.get("size", 0)}
    head = tr("free of {size} {where} requested", size=format_bytes(block["size"]), where=_where(seg, addr, ids))
    state = block.get("state")
    if state == "active_pending_free":
        return tr("{head}: another stream used it, so it stays pending free until that stream's work is done",
                  head=head)
    if state == "inactive":
        return tr("{head}: no other stream used it, so it goes back to the cache at once", head=head)
    return head


def _caption_free_completed(event, before, after, ids, previous):
    addr = event["addr"]
    old_seg, new_seg = _segment_at(before, addr), _segment_at(after, addr)
    freed = _block_at(old_seg, addr)
    size = freed["size"] if freed else event.get("size", 0)
    head = tr("free of {size} {where}", size=format_bytes(size), where=_where(old_seg or new_seg, addr, ids))
    if freed is not None and freed.get("state") == "active_pending_free":
        head = tr("pending free done (the other stream finished): {head}", head=head)
    merged = _block_at(new_seg, addr)
    if merged is None:
        return tr("{head}: returned to the cache", head=head)
    before_it = merged["address"] < addr
    after_it = merged["address"] + merged["size"] > addr + size
    if before_it and after_it:
        how = tr("merged with the free blocks before and after it")
    elif before_it:
        how = tr("merged with the free block before it")
    elif after_it:
        how = tr("merged with the free block after it")
    else:
        return tr("{head}: no free neighbour to merge with, so it stays a separate {size} free block",
                  head=head, size=format_bytes(size)) + _whole_segment_free(new_seg, ids)
    return tr("{head}: {how} \u2192 {size} free", head=head, how=how, size=format_bytes(merged["size"])) \
        + _whole_segment_free(new_seg, ids)


def _whole_segment_free(seg, ids) -> str:
    blocks = seg.get("blocks", ()) if seg else ()
    if len(blocks) == 1 and blocks[0]["state"] == "inactive":
        return tr("; segment {segment} is now entirely free (empty_cache() would release it)",
                  segment=ids.get(seg["address"], "?"))
    return ""


def _pool_words(kind: str) -> str:
    return {"large": tr("large pool"), "small": tr("small pool")}.get(kind, f"{kind} pool")


def _caption_segment_alloc(event, before, after, ids, previous):
    seg = _segment_at(after, event["addr"])
    size, stream = format_bytes(event.get("size", 0)), event.get("stream", 0)
    if seg is None:
        return tr("cudaMalloc of a new {size} segment (stream {stream})", size=size, stream=stream)
    return tr("cudaMalloc of a new {size} segment {segment} ({pool}, stream {stream})", size=size,
              segment=ids.get(seg["address"], "?"), pool=_pool_words(seg.get("segment_type", "large")),
              stream=stream)


def _caption_segment_free(event, before, after, ids, previous):
    seg = _segment_at(before, event["addr"])
    size = format_bytes(event.get("size", 0))
    if seg is None:
        return tr("segment ({size}) released to the driver (cudaFree)", size=size)
    return tr("segment {segment} ({size}) released to the driver (cudaFree)", segment=ids.get(seg["address"], "?"),
              size=size)


def _caption_segment_map(event, before, after, ids, previous):
    seg = _segment_at(after, event["addr"])
    grown = tr("; segment {segment} now maps {size}", segment=ids.get(seg["address"], "?"),
               size=format_bytes(seg["total_size"])) if seg else ""
    return tr("expandable segment grows: {size} of physical memory mapped at {address} (cuMemCreate + cuMemMap)",
              size=format_bytes(event.get("size", 0)), address=f"{event['addr']:#x}") + grown


def _caption_segment_unmap(event, before, after, ids, previous):
    return tr("expandable segment shrinks: {size} unmapped at {address} and handed back to the driver "
              "(cuMemUnmap); the virtual addresses stay reserved", size=format_bytes(event.get("size", 0)),
              address=f"{event['addr']:#x}")


def _caption_oom(event, before, after, ids, previous):
    free = event.get("device_free", event.get("addr", 0))
    return tr("out of memory: a {size} request failed; the device had only {free} free",
              size=format_bytes(event.get("size", 0)), free=format_bytes(free))


def _caption_snapshot(event, before, after, ids, previous):
    return tr("snapshot taken (nothing changes)")


_CAPTIONS = {
    "alloc": _caption_alloc,
    "free_requested": _caption_free_requested,
    "free_completed": _caption_free_completed,
    "segment_alloc": _caption_segment_alloc,
    "segment_free": _caption_segment_free,
    "segment_map": _caption_segment_map,
    "segment_unmap": _caption_segment_unmap,
    "oom": _caption_oom,
    "snapshot": _caption_snapshot,
}


# ---------------------------------------------------------------- the frame store

class FrameSource:
    """Frames of a trace, rebuilt on demand from keyframes plus per-event changes.

    ``append(event, segments)`` after every event (``record_frames`` does it);
    ``source[i]`` is then the :class:`Frame` after event ``i``.  It behaves
    like a read-only list: ``len``, indexing (negative too), iteration.
    """

    def __init__(self, initial: Iterable[dict] = (), keyframe_every: int = 200):
        self.keyframe_every = max(1, keyframe_every)
        self.events: list[dict] = []
        self.segment_ids: dict = {}
        self._initial = {s["address"]: s for s in initial}
        for address in sorted(self._initial):
            self._number(address)
        self._latest = dict(self._initial)             # the state after the last appended event
        self._changes: list[tuple[dict, tuple]] = []   # per event: (segments new or changed, addresses gone)
        self._keyframes: dict[int, dict] = {}
        self._cache: tuple[int, dict] = (-1, self._initial)

    @classmethod
    def from_states(cls, states: Iterable[Iterable[dict]], events: Iterable[Any],
                    initial: Iterable[dict] = (), keyframe_every: int = 200) -> "FrameSource":
        source = cls(initial, keyframe_every)
        for event, segments in zip(events, states):
            source.append(event, segments)
        return source

    def _number(self, address: int) -> None:
        # Numbers follow first appearance, so a row keeps its number (and place) for the whole trace.
        self.segment_ids.setdefault(address, len(self.segment_ids))

    def append(self, event: Any, segments: Any) -> None:
        """Record one event and the allocator's segments right after it (compared with the last state)."""
        current = {s["address"]: s for s in segments_of(segments)}
        latest = self._latest
        changed = {a: s for a, s in current.items() if latest.get(a) is not s and latest.get(a) != s}
        gone = tuple(a for a in latest if a not in current)
        self.append_changes(event, changed, gone)

    def append_changes(self, event: Any, changed: dict, gone: tuple = ()) -> None:
        """Record one event by what it changed: segments new or different, addresses of segments gone.

        This is the cheap way in (it costs what the event changed, not the size of the
        state): :class:`~allocator_ref.viz.segment_reader.SegmentFollower` feeds it.
        """
        for address in changed:
            self._number(address)
        self.events.append(as_event(event))
        self._changes.append((changed, gone))
        latest = dict(self._latest) if self._latest is self._initial else self._latest
        for address in gone:
            latest.pop(address, None)
        latest.update(changed)
        self._latest = latest
        index = len(self.events) - 1
        if index % self.keyframe_every == 0:
            self._keyframes[index] = dict(latest)     # a copy: _latest keeps changing in place

    def __len__(self) -> int:
        return len(self.events)

    def memory_totals(self) -> list[tuple[int, int]]:
        """(allocated, reserved) bytes after each event, summed from the changes, without rebuilding states."""
        return self.segment_sums("allocated_size", "total_size")

    def segment_sums(self, *fields: str) -> list[tuple]:
        """For each event, the sum over segments of each named field (e.g. ``"active_size"``)."""
        state = dict(self._initial)
        sums = [sum(s.get(f, 0) for s in state.values()) for f in fields]
        out = []
        for changed, gone in self._changes:
            for address in list(gone) + list(changed):
                old = state.pop(address, None)
                if old is not None:
                    for k, f in enumerate(fields):
                        sums[k] -= old.get(f, 0)
            for address, segment in changed.items():
                state[address] = segment
                for k, f in enumerate(fields):
                    sums[k] += segment.get(f, 0)
            out.append(tuple(sums))
        return out

    def state(self, i: int) -> list:
        """Segments after event ``i`` (``i == -1``: before the first event), in address order."""
        return sorted(self._state_dict(i).values(), key=lambda s: s["address"])

    def _state_dict(self, i: int) -> dict:
        if i < 0:
            return self._initial
        cached_i, cached = self._cache
        if cached_i == i:
            return cached
        start = (i // self.keyframe_every) * self.keyframe_every
        if start <= cached_i < i:           # stepping forward: continue from where we are
            start, state = cached_i, dict(cached)
        else:
            state = dict(self._keyframes[start])
        for j in range(start + 1, i + 1):
            changed, gone = self._changes[j]
            for address in gone:
                state.pop(address, None)
            state.update(changed)
        self._cache = (i, state)
        return state

    def __getitem__(self, i: int) -> Frame:
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError(f"frame {i} out of range (0..{len(self) - 1})")
        before, after = self.state(i - 1), self.state(i)
        event = self.events[i]
        previous = self.events[i - 1] if i > 0 else None
        return Frame(index=i, event=event, segments=after,
                     caption=describe(event, before, after, self.segment_ids, previous),
                     changed=changed_addresses(before, after), segment_ids=self.segment_ids)

    def __iter__(self) -> Iterator[Frame]:
        for i in range(len(self)):
            yield self[i]


def build_frames(states: Iterable[Iterable[dict]], events: Iterable[Any],
                 initial: Iterable[dict] = ()) -> list[Frame]:
    """``states[i]`` is the segment list after ``events[i]``; ``initial`` the one before the first."""
    return list(FrameSource.from_states(states, events, initial))


@contextmanager
def record_frames(allocator: Any, keyframe_every: int = 200,
                  skip_actions: Iterable[str] = ("snapshot",)) -> Iterator[FrameSource]:
    """Record the allocator's block map after every event it reports, for the player.

        with record_frames(a) as frames:
            x = a.malloc(12 * 2**20); a.free(x)
        TracePlayer(frames)

    ``snapshot`` events (someone looked at the state) change nothing and are
    left out unless ``skip_actions=()``.  On the caching allocator each event
    costs what it changed (one segment re-read, see ``segment_reader``), so a
    20,000-event training step records in seconds; other designs are
    snapshotted whole after each event.
    """
    follower = SegmentFollower(allocator) if can_follow(allocator) else None
    initial = follower.segments.values() if follower else segments_of(allocator)
    source = FrameSource(initial, keyframe_every)
    source.follower = follower            # how it was recorded (benchmarks count its full reads)
    stop = allocator.trace.add_listener(_Recorder(allocator, source, follower, frozenset(skip_actions)))
    try:
        yield source
    finally:
        stop()


class _Recorder:
    """The trace listener behind :func:`record_frames`."""

    def __init__(self, allocator: Any, source: FrameSource, follower: Any, skip: frozenset):
        self.allocator, self.source, self.follower, self.skip = allocator, source, follower, skip
        self.busy = False

    def __call__(self, entry: Any) -> None:
        if self.busy or entry.action in self.skip:   # our own snapshot reports a "snapshot" event
            return
        self.busy = True
        try:
            event = as_event(entry)
            if self.follower is not None:
                self.source.append_changes(event, *self.follower.update(event))
            else:
                self.source.append(event, settle(event, segments_of(self.allocator)))
        finally:
            self.busy = False

    def __deepcopy__(self, memo: dict) -> "_Muted":
        # A replay tries readings of an ambiguous trace on deep copies of its allocator
        # (trace/engine.py, _reading_reproduces): what a copy does is not the story told.
        return _Muted()


class _Muted:
    def __call__(self, entry: Any) -> None:
        pass


# ---------------------------------------------------------------- the state right after an event

def settle(event: dict, segments: list) -> list:
    """The state just *after* ``event``, from a snapshot taken while the allocator reports it.

    PyTorch's allocator (and ours, which follows it line by line) reports some events a moment
    before the change they announce (``events.ANNOUNCED_BEFORE``), so a listener's snapshot
    misses that change: ``events.after_event`` applies it to the one segment it touches, and
    this puts that segment back in the list, so each frame shows what the event did.
    """
    if event.get("action") not in ANNOUNCED_BEFORE:
        return segments
    old = _segment_at(segments, event["addr"])
    new = after_event(event, old)
    if new is old:
        return segments
    kept = [s for s in segments if s is not old]
    return kept if new is None else sorted(kept + [new], key=lambda s: s["address"])
