"""Follow a caching allocator event by event, reading only the blocks each event touched.

``CachingAllocator.segments()`` (PyTorch's ``DeviceCachingAllocator::snapshot``) walks every
block of every segment: on a 1,000-segment training run that is milliseconds per call, so
snapshotting after each of 20,000 events takes over a minute.  But one event changes one
block and its neighbours (a split, a merge), or adds or drops one segment.
:class:`SegmentFollower` keeps the block map as a dict and, after each event, re-reads just
those blocks from the allocator's block chain (``Block.prev``/``Block.next``, the links
``try_merge_blocks`` maintains).

Reading the state while the allocator *reports* an event has one catch: some events are
reported a moment before their change (``events.ANNOUNCED_BEFORE``).  The follower hands the
segment it read to ``events.after_event``, which applies that change, and at the next event
re-reads the segment from the allocator, where the change has then happened.
Expandable segments' ``segment_map``/``segment_unmap`` reshape the mapped ranges (one range
can become two): after those the follower reads everything again (such events are few).
"""
from __future__ import annotations

from bisect import bisect_left, bisect_right
from typing import Any, Optional

from sortedcontainers import SortedList

from ..caching.snapshot import block_state
from ..events import ANNOUNCED_BEFORE, after_event, with_blocks
from .blockmap import segments_of

_READ_AGAIN = ("segment_map", "segment_unmap")     # reported after the change: re-read all


def can_follow(allocator: Any) -> bool:
    """True for the caching allocator (its DeviceCachingAllocator's blocks link to their neighbours);
    others are snapshotted."""
    return hasattr(getattr(allocator, "device_allocator", None), "active_blocks")


def _live(allocator: Any, block: Any) -> bool:
    """Is ``block`` still one of the allocator's blocks (handed out, waiting for events, or cached)?"""
    if allocator.device_allocator.active_blocks.get(block.ptr) is block:
        return True
    return block.mapped and (block.stream_key, block.size, block.ptr, block) in block.pool.blocks


class SegmentFollower:
    """The allocator's segments as ``{address: segment dict}``, kept up to date event by event.

        follower = SegmentFollower(allocator)
        changed, gone = follower.update(event)    # call from a trace listener, once per event

    A segment of a long run can hold thousands of blocks (an expandable segment does), so
    even one segment is not re-read whole: an event changes the block it names and its two
    neighbours (a split makes the next one, a merge swallows them), and only those block
    dicts are replaced in a copy of the segment's list.
    """

    def __init__(self, allocator: Any) -> None:
        self.allocator = allocator
        self.segments: dict = {}
        self.starts = SortedList()
        self._reset({s["address"]: s for s in segments_of(allocator)})
        self._handles: list = []       # blocks the last event touched, re-read at the next one
        self.full_reads = 0            # how often everything had to be read (for benchmarks)

    def _reset(self, segments: dict) -> None:
        self.segments = segments
        self.starts = SortedList(segments)

    def update(self, event: dict) -> tuple[dict, tuple]:
        """Apply ``event``; returns (segments new or changed, addresses of segments gone)."""
        action, addr = event.get("action"), event.get("addr")
        block = self.allocator.device_allocator.active_blocks.get(addr) if addr is not None else None
        changed: Optional[dict] = None
        if action not in _READ_AGAIN:
            changed = self._patch_touched(self._handles + [block])
        if changed is None:            # expandable ranges reshaped, or a block we held is gone
            changed, gone = self._read_everything()
        else:
            gone = ()
        gone = self._settle(event, changed, gone)
        self._handles = [block] if block is not None else []
        return changed, gone

    # ------------------------------------------------------------ reading
    def _segment_of(self, ptr: int) -> Optional[dict]:
        i = self.starts.bisect_right(ptr) - 1
        if i < 0:
            return None
        seg = self.segments[self.starts[i]]
        return seg if ptr < seg["address"] + seg["total_size"] else None

    def _patch_touched(self, blocks: list) -> Optional[dict]:
        changed: dict = {}
        seen: set = set()
        for block in blocks:
            if block is None or id(block) in seen:
                continue
            seen.add(id(block))
            if not _live(self.allocator, block):
                return None
            seg = self._segment_of(block.ptr)
            patched = _patch(self.allocator, seg, block) if seg is not None else None
            if patched is None:
                return None
            changed[seg["address"]] = self.segments[seg["address"]] = patched
        return changed

    def _read_everything(self) -> tuple[dict, tuple]:
        self.full_reads += 1
        current = {s["address"]: s for s in segments_of(self.allocator)}
        old = self.segments
        changed = {a: s for a, s in current.items() if old.get(a) != s}
        gone = tuple(a for a in old if a not in current)
        self._reset(current)
        return changed, gone

    def _settle(self, event: dict, changed: dict, gone: tuple) -> tuple:
        """Apply the change of an event reported before it happens (``events.after_event``)."""
        if event.get("action") not in ANNOUNCED_BEFORE:
            return gone
        old = self._segment_of(event["addr"])
        new = after_event(event, old)
        if new is old:
            return gone
        if old is not None and (new is None or new["address"] != old["address"]):
            del self.segments[old["address"]]
            self.starts.remove(old["address"])
            changed.pop(old["address"], None)
            gone += (old["address"],)
        if new is not None:
            if new["address"] not in self.segments:
                self.starts.add(new["address"])
            changed[new["address"]] = self.segments[new["address"]] = new
        return gone


# ---------------------------------------------------------------- block-level patches

def _block_dict(block: Any) -> dict:
    return {"address": block.ptr, "size": block.size, "requested_size": block.requested_size,
            "state": block_state(block), "frames": list(block.frames)}


def _patch(allocator: Any, segment: dict, block: Any) -> Optional[dict]:
    """``segment`` with ``block`` and its neighbours read again; None if the old dicts do not line up.

    The old dicts to replace and the current blocks to read must cover the same bytes: a
    split or merge next door (the current event's, when ``block`` is the previous
    event's) can move a boundary, so both ends are widened until they agree.
    """
    lo = block.prev if block.prev is not None and block.prev.mapped else block
    hi = block.next if block.next is not None and block.next.mapped else block
    blocks = segment["blocks"]
    i = bisect_right(blocks, lo.ptr, key=_address) - 1
    j = bisect_left(blocks, hi.ptr + hi.size, key=_address)
    if i < 0 or j == 0:
        return None
    while blocks[i]["address"] != lo.ptr:          # widen the start
        if blocks[i]["address"] < lo.ptr:
            lo = lo.prev
            if lo is None or not lo.mapped:
                return None
        else:
            i -= 1
            if i < 0:
                return None
    while True:                                     # widen the end
        old_end = blocks[j - 1]["address"] + blocks[j - 1]["size"]
        new_end = hi.ptr + hi.size
        if old_end == new_end:
            break
        if new_end < old_end:
            hi = hi.next
            if hi is None or not hi.mapped:
                return None
        else:
            j += 1
            if j > len(blocks):
                return None
    return with_blocks(segment, i, j, [_block_dict(b) for b in _chain(lo, hi)])


def _chain(lo: Any, hi: Any) -> list:
    out, b = [lo], lo
    while b is not hi:
        b = b.next
        out.append(b)
    return out


def _address(block: dict) -> int:
    return block["address"]
