"""Follow a caching allocator event by event, reading only the segment each event touched.

``CachingAllocator.segments()`` (PyTorch's ``DeviceCachingAllocator::snapshot``) walks every
block of every segment: on a 1,000-segment training run that is milliseconds per call, so
snapshotting after each of 20,000 events takes over a minute.  But one event changes one
segment (a split, a merge, a new or released segment).  :class:`SegmentFollower` keeps the
block map as a dict and, after each event, re-reads just that segment from the allocator's
block chain (``Block.prev``/``Block.next``, the links ``try_merge_blocks`` maintains).

Reading the state while the allocator *reports* an event has one catch, which
``frames.settle`` explains: ``segment_alloc``, ``free_completed`` and ``segment_free`` are
reported a moment before their change.  The follower applies that change itself, and at the
next event re-reads the segment from the allocator, where the change has then happened.
Expandable segments' ``segment_map``/``segment_unmap`` reshape the mapped ranges (one range
can become two): after those the follower reads everything again (such events are few).
"""
from __future__ import annotations

from typing import Any, Optional

from ..caching.snapshot import block_state
from .blockmap import segments_of

_READ_AGAIN = ("segment_map", "segment_unmap")     # reported after the change: re-read all


def can_follow(allocator: Any) -> bool:
    """True for the caching allocator (its blocks link to their neighbours); others are snapshotted."""
    return all(hasattr(allocator, name) for name in ("active_blocks", "large_blocks", "small_blocks"))


def segment_dict(allocator: Any, head: Any) -> dict:
    """The ``segments()`` entry of the mapped range that starts at block ``head`` (same keys, same order)."""
    segment = {
        "device": allocator.device.info.index, "address": head.ptr, "total_size": 0,
        "allocated_size": 0, "active_size": 0, "requested_size": 0,
        "stream": head.stream_key,
        "segment_type": "small" if head.pool.is_small else "large",
        "segment_pool_id": (0, 0),
        "is_expandable": head.expandable_segment is not None,
        "frames": list(head.segment_frames), "blocks": [],
    }
    block = head
    while block is not None and block.mapped:
        state = block_state(block)
        segment["blocks"].append({"address": block.ptr, "size": block.size,
                                  "requested_size": block.requested_size,
                                  "state": state, "frames": list(block.frames)})
        segment["total_size"] += block.size
        if block.allocated:
            segment["allocated_size"] += block.size
        if state != "inactive":
            segment["active_size"] += block.size
            segment["requested_size"] += block.requested_size
        block = block.next
    return segment


def _head(allocator: Any, block: Any) -> Optional[Any]:
    """The first block of ``block``'s mapped range, or None when ``block`` is no longer in use."""
    if block is None or not block.mapped:
        return None
    head = block
    while head.prev is not None and head.prev.mapped:
        head = head.prev
    # A live head is either handed out / waiting for events, or free in its pool.
    if allocator.active_blocks.get(head.ptr) is head:
        return head
    if (head.stream_key, head.size, head.ptr, head) in head.pool.blocks:
        return head
    return None


class SegmentFollower:
    """The allocator's segments as ``{address: segment dict}``, kept up to date event by event.

        follower = SegmentFollower(allocator)
        changed, gone = follower.update(event)    # call from a trace listener, once per event
    """

    def __init__(self, allocator: Any) -> None:
        self.allocator = allocator
        self.segments: dict = {s["address"]: s for s in segments_of(allocator)}
        self._handles: list = []       # blocks the last event touched, re-read at the next one
        self._read_all = False
        self.full_reads = 0            # how often everything had to be read (for benchmarks)

    def update(self, event: dict) -> tuple[dict, tuple]:
        """Apply ``event``; returns (segments new or changed, addresses of segments gone)."""
        action, addr = event.get("action"), event.get("addr")
        block = self.allocator.active_blocks.get(addr) if addr is not None else None
        if self._read_all or action in _READ_AGAIN:
            changed, gone = self._read_everything()
        else:
            changed, gone = self._read_touched(self._handles + [block])
        self._read_all = changed is None
        if changed is None:            # a block we held was no longer live: be safe
            changed, gone = self._read_everything()
        gone = self._settle(event, changed, gone)
        self._handles = [block] if block is not None else []
        return changed, gone

    def _read_touched(self, blocks: list) -> tuple[Optional[dict], tuple]:
        changed: dict = {}
        for block in blocks:
            if block is None:
                continue
            head = _head(self.allocator, block)
            if head is None:
                return None, ()
            if head.ptr not in changed:
                changed[head.ptr] = segment_dict(self.allocator, head)
        self.segments.update(changed)
        return changed, ()

    def _read_everything(self) -> tuple[dict, tuple]:
        self.full_reads += 1
        current = {s["address"]: s for s in segments_of(self.allocator)}
        old = self.segments
        changed = {a: s for a, s in current.items() if old.get(a) != s}
        gone = tuple(a for a in old if a not in current)
        self.segments = current
        return changed, gone

    def _settle(self, event: dict, changed: dict, gone: tuple) -> tuple:
        """Apply the change of an event reported before it happens (see ``frames.settle``)."""
        from .frames import _fresh_segment, _merged, _segment_at
        action, addr = event.get("action"), event.get("addr")
        if action == "segment_alloc" and addr not in self.segments:
            changed[addr] = self.segments[addr] = _fresh_segment(event)
        elif action == "segment_free" and addr in self.segments:
            del self.segments[addr]
            changed.pop(addr, None)
            gone += (addr,)
        elif action == "free_completed":
            seg = changed.get(addr) or _segment_at(sorted(changed.values(), key=lambda s: s["address"]), addr)
            if seg is not None:
                changed[seg["address"]] = self.segments[seg["address"]] = _merged(seg, addr)
        return gone
