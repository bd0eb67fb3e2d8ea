"""Infer the allocator's state at the first event of a trace that starts mid-run.

History recording usually starts after the model was built: segments and live
tensors already exist.  What the data allows us to know:

* the segments at the start = the final ``segments`` list, minus those the
  trace allocated, plus those it freed (walked backwards, so addresses
  reused by cudaMalloc are handled);
* blocks live at the start = those the trace frees without having allocated
  them, and those still active at the end that the trace never allocated
  (their exact sizes are in the final snapshot);
* everything between live blocks is free (free neighbours are always merged).

One thing the data does not say directly: the size of a block that was
allocated before recording and freed during it (``free_*`` events carry the
requested size, not the block size).  It is ``round_size(requested)`` unless
the allocator handed out a whole block without splitting (the remainder would
have been <= 1 MiB in the large pool), so we extend it to the next known
boundary when that boundary is within 1 MiB, using the trace's own later
allocations as evidence.  Each inference is reported in ``notes``.
"""
from __future__ import annotations

import bisect
from dataclasses import dataclass, field

from sortedcontainers import SortedDict

from ..caching.config import SIZE_MAX, AllocatorConfig, kSmallBuffer, kSmallSize, round_size
from ..editions.messages import translator

tr = translator("doctor")     # replay's inference lines, in the reader's language


@dataclass
class SegmentAtStart:
    address: int
    size: int
    stream: int
    small: bool
    expandable: bool = False
    live_blocks: list = field(default_factory=list)     # (address, size, requested_size)


@dataclass
class InitialState:
    segments: list = field(default_factory=list)         # SegmentAtStart, by address
    pending_free: list = field(default_factory=list)     # addresses freed before recording, completed during it
    notes: list = field(default_factory=list)
    expandable: list = field(default_factory=list)       # mapped ranges at the start, as snapshot segments

    @property
    def empty(self) -> bool:
        return not self.segments and not self.expandable


def infer_initial_state(events: list[dict], final_segments: list[dict],
                        config: AllocatorConfig) -> InitialState:
    state = InitialState()
    segments = _segments_at_start(events, final_segments, state)
    runs = _expandable_at_start(events, final_segments, config)
    if not segments and not runs:
        return state
    starts = sorted(segments)
    run_starts = [r.address for r in runs]
    pre_live, pending = _blocks_live_at_start(events, final_segments)
    evidence = _alloc_addresses_by_time(events)
    live_starts = sorted(pre_live)
    extended = 0
    for addr, info in sorted(pre_live.items()):
        seg = _segment_containing(segments, starts, addr)
        if seg is None:
            run = _run_containing(runs, run_starts, addr)
            if run is not None:      # an expandable segment always splits: the block is round_size(request)
                size = info.get("exact_size") or round_size(info["requested"], config)
                run.live_blocks.append((addr, size, info["requested"]))
                continue
            state.notes.append(tr("block {addr} freed during the trace lies in no known segment; ignored",
                                   addr=f"{addr:#x}"))
            continue
        size = info.get("exact_size")
        if size is None:
            size = _infer_block_size(addr, info, seg, live_starts, evidence, config)
            if size != round_size(info["requested"], config):
                extended += 1
        seg.live_blocks.append((addr, size, info["requested"]))
    state.pending_free = sorted(pending)
    state.segments = [segments[a] for a in starts]
    state.expandable = [_as_snapshot_segment(r) for r in runs]
    if pre_live:
        state.notes.append(tr(
            "{segments} segment(s) existed before recording; {blocks} block(s) were live at the start "
            "({extended} sized beyond round_size because the allocator could not have split them)",
            segments=len(state.segments), blocks=len(pre_live), extended=extended))
    if pending:
        state.notes.append(tr("{n} block(s) were freed before recording and still waited for other "
                              "streams' events", n=len(pending)))
    return state


def _segments_at_start(events, final_segments, state) -> dict:
    segments = {}
    for s in final_segments:
        if s.get("is_expandable"):
            continue                 # _expandable_at_start
        segments[s["address"]] = SegmentAtStart(s["address"], s["total_size"], s["stream"],
                                                s.get("segment_type") == "small")
    for e in reversed(events):
        action = e["action"]
        if action == "segment_alloc":
            segments.pop(e["addr"], None)
        elif action == "segment_free":
            segments[e["addr"]] = SegmentAtStart(e["addr"], e["size"], e["stream"], e["size"] == kSmallBuffer)
    return segments


def _blocks_live_at_start(events, final_segments):
    live_in_trace, requested_in_trace = set(), set()
    owned = set()          # allocated by the trace and not yet given back (pending frees included)
    pre_live, pending = {}, set()
    for index, e in enumerate(events):
        action, addr = e["action"], e.get("addr")
        if action == "alloc":
            live_in_trace.add(addr)
            owned.add(addr)
        elif action == "free_requested":
            requested_in_trace.add(addr)
            if addr in live_in_trace:
                live_in_trace.discard(addr)
            elif addr not in pre_live:
                pre_live[addr] = {"requested": e["size"], "stream": e["stream"], "until": index}
        elif action == "free_completed":
            owned.discard(addr)
            if addr in requested_in_trace:
                requested_in_trace.discard(addr)
            elif addr not in pre_live and addr not in live_in_trace:
                pre_live[addr] = {"requested": e["size"], "stream": e["stream"], "until": index}
                pending.add(addr)
    for s in final_segments:
        for b in s["blocks"]:
            if b["state"].startswith("active") and b["address"] not in owned \
                    and b["address"] not in pre_live:
                pre_live[b["address"]] = {"requested": b.get("requested_size", b["size"]),
                                          "stream": s["stream"], "until": len(events),
                                          "exact_size": b["size"]}
                if b["state"] == "active_pending_free":
                    # Freed before the trace and still waiting at its end: it starts pending.
                    pending.add(b["address"])
    return pre_live, pending


def _alloc_addresses_by_time(events) -> list:
    """(address, index of its first allocation) for every address the trace allocates, by address.

    Only the first allocation at an address can mark where an earlier block ended, so one
    entry per address keeps the search in _infer_block_size short on any trace.
    """
    first = {}
    for i, e in enumerate(events):
        if e["action"] == "alloc":
            first.setdefault(e["addr"], i)
    return sorted(first.items())


def _segment_containing(segments, starts, addr):
    i = bisect.bisect_right(starts, addr) - 1
    if i < 0:
        return None
    seg = segments[starts[i]]
    return seg if addr < seg.address + seg.size else None


def _infer_block_size(addr, info, seg, live_starts, evidence, config) -> int:
    rounded = round_size(info["requested"], config)
    end_min = addr + rounded
    if seg.small:
        return rounded            # small blocks always split off any remainder >= 512 B
    # How much bigger than the request can an unsplit block be?  A normal request splits
    # off any remainder > 1 MiB; an oversize one (>= max_split_size) is never split and may
    # take a cached block up to max_non_split_rounding_size bigger (get_free_block).
    oversize = config.max_split_size != SIZE_MAX and rounded >= config.max_split_size
    slack = config.max_non_split_rounding_size - 1 if oversize else kSmallSize
    boundary = seg.address + seg.size
    k = bisect.bisect_left(live_starts, end_min)     # the next block live at the start
    if k < len(live_starts) and live_starts[k] < boundary:
        boundary = live_starts[k]
    # An allocation placed right after this block while it was still live marks where it ends.
    i = bisect.bisect_left(evidence, (end_min, -1))
    while i < len(evidence) and evidence[i][0] <= end_min + slack and evidence[i][0] < boundary:
        if evidence[i][1] < info["until"]:
            boundary = evidence[i][0]
            break
        i += 1
    if boundary - end_min <= slack:
        return boundary - addr    # the remainder was too small to split off: the block took it all
    return rounded


# ---------------------------------------------------------------- expandable segments
# The pages mapped at the first event: the final mapped ranges, minus what the trace mapped,
# plus what it unmapped (walked backwards).  Where each reservation began is not in the data:
# rebuild_expandable.py starts one per stream and pool at its lowest mapped (or later mapped)
# address, which is where a segment that grew from its base has it.

@dataclass
class _Run:
    address: int
    size: int
    stream: int
    small: bool
    pool_id: tuple = (0, 0)
    live_blocks: list = field(default_factory=list)


def _expandable_at_start(events, final_segments, config) -> list:
    runs = SortedDict()              # address -> _Run, never overlapping (each map/unmap: O(log n))
    for s in final_segments:
        if s.get("is_expandable"):
            runs[s["address"]] = _Run(s["address"], s["total_size"], s["stream"],
                                      s.get("segment_type") == "small",
                                      tuple(s.get("segment_pool_id") or (0, 0)))
    if not runs and not any(e["action"] in ("segment_map", "segment_unmap") for e in events):
        return []
    for e in reversed(events):
        if e["action"] not in ("segment_map", "segment_unmap"):
            continue
        start, end = e["addr"], e["addr"] + e["size"]
        _cut(runs, start, end)
        if e["action"] == "segment_unmap":
            small = e["size"] % config.large_segment_size != 0
            for neighbour in (_run_ending_at(runs, start), runs.get(end)):
                if neighbour is not None:          # a range touching a known one is of its kind
                    small = neighbour.small
            runs[start] = _Run(start, e["size"], e["stream"], small, tuple(e.get("pool_id") or (0, 0)))
    merged = []
    for r in runs.values():          # neighbours of one stream and pool are one mapped range
        last = merged[-1] if merged else None
        if last and last.address + last.size == r.address and \
                (last.stream, last.small, last.pool_id) == (r.stream, r.small, r.pool_id):
            last.size += r.size
        else:
            merged.append(r)
    return merged


def _run_ending_at(runs, addr):
    i = runs.bisect_left(addr) - 1
    if i < 0:
        return None
    run = runs.peekitem(i)[1]
    return run if run.address + run.size == addr else None


def _cut(runs, start, end) -> None:
    """Take the bytes in [start, end) out of ``runs``."""
    i = max(runs.bisect_left(start) - 1, 0)
    hit = []
    for address in runs.islice(i):
        if address >= end:
            break
        run = runs[address]
        if run.address + run.size > start:
            hit.append(run)
    for r in hit:
        del runs[r.address]
        if r.address < start:
            runs[r.address] = _Run(r.address, start - r.address, r.stream, r.small, r.pool_id)
        if end < r.address + r.size:
            runs[end] = _Run(end, r.address + r.size - end, r.stream, r.small, r.pool_id)


def _run_containing(runs, starts, addr):
    i = bisect.bisect_right(starts, addr) - 1
    if i < 0:
        return None
    run = runs[i]
    return run if addr < run.address + run.size else None


def _as_snapshot_segment(run) -> dict:
    """A run as the snapshot segment rebuild_expandable lays out (live blocks, free gaps)."""
    blocks, cursor = [], run.address
    for addr, size, requested in sorted(run.live_blocks):
        if addr > cursor:
            blocks.append({"address": cursor, "size": addr - cursor, "state": "inactive"})
        blocks.append({"address": addr, "size": size, "requested_size": requested, "state": "active_allocated"})
        cursor = addr + size
    if cursor < run.address + run.size:
        blocks.append({"address": cursor, "size": run.address + run.size - cursor, "state": "inactive"})
    return {"address": run.address, "total_size": run.size, "stream": run.stream, "is_expandable": True,
            "segment_type": "small" if run.small else "large", "segment_pool_id": run.pool_id, "blocks": blocks}
