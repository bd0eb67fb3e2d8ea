"""The anchored what-if: replay the program of a recorded run under another setting.

``replay(..., verify=False)`` asks "what if" from an empty allocator with only the
``alloc``/``free`` entries.  That is not the run that happened: a trace recorded mid-run
starts with PyTorch's segments already there, ``record_stream`` kept freed blocks waiting
for other streams, and the user may have called ``torch.cuda.empty_cache()``.  This module
splits a trace into

* the **program's actions** -- what the user's code did, whatever the allocator:
  allocations and frees, the completion of the events a ``record_stream`` free waits on,
  and the user's ``empty_cache()`` calls; and
* the **allocator's decisions** -- placement, new segments, flushes on retry, OOMs --
  which a what-if re-derives under the new setting and the device's capacity.

Which is which is read off the ``--verify`` replay (``DeviceReplay.readings`` and
``user_empty_caches``), the only reading that reproduces PyTorch event for event:

* a run of ``segment_free`` that the verify replay had to cause with ``empty_cache()``
  is the user's call (nothing in the malloc that follows would have released it:
  ``_user_empty_cache_end`` in replay.py); a run of releases inside a malloc's group is the
  malloc's own retry ladder (``release_cached_blocks`` after ``alloc_block`` failed in
  ``DeviceCachingAllocator::malloc``) and is re-derived, not replayed;
* a ``free_completed`` that the malloc's ``process_events`` found ready is the program's
  event completing there; one that the retry's ``synchronize_and_free_events`` forced is
  the event completing no later than that malloc, so the what-if completes it right after.

Every replay starts from the state at the first event (``rebuild.infer_initial_state``,
the same rebuild ``--verify`` uses), restored segment by segment at PyTorch's addresses, and
new segments go where PyTorch put them whenever that range is free, so under the recorded
settings the replay makes PyTorch's decisions and its reserved curve is the recorded one.
``anchored_replay`` returns that curve (reserved after each program action) for the doctor
to compare and rank.
"""
from __future__ import annotations

import dataclasses
from collections import deque
from dataclasses import dataclass, field
from typing import Optional

from ..caching.allocator import CachingAllocator
from ..caching.config import AllocatorConfig
from ..caching.oom import OutOfMemoryError
from ..caching.restore import restore_segment
from ..device.errors import CudaError
from ..device.sim import SimDevice
from ..policies.registry import make_allocator     # every design, by name (the policy registry)
from .rebuild import infer_initial_state
from .rebuild_expandable import CannotRebuild, rebuild_expandable
from .replay_device import ManualEvent
from .replay_pools import PoolRouter

UNCAPPED = 1 << 40        # "no capacity known": a 1 TiB GPU, far above any real one
RELEASES = ("segment_free", "segment_unmap")


# ---------------------------------------------------------------- the program

@dataclass
class Action:
    kind: str             # "malloc", "request" (the oom's request), "free", "complete", "process", "empty_cache"
    pos: int              # the trace event it stands for
    addr: int = 0
    size: int = 0
    stream: int = 0
    deferred: bool = False
    segments: tuple = ()  # for a malloc: the (addr, size) PyTorch's cudaMalloc returned for it
    sample_at: int = -1   # the trace event after which its effect is complete (default: pos)


@dataclass
class Program:
    actions: list
    user_empty_caches: list       # trace positions of the user's empty_cache() calls
    ladder_flushes: list          # trace positions of mallocs that flushed the cache on retry
    ooms: list                    # trace positions of the refused requests
    start: Optional[object] = None    # the rebuilt state at the first event (rebuild.InitialState), once


def program_of(events: list, readings: dict, user_empty_caches: list, reserved: Optional[list] = None) -> Program:
    """The user's actions in ``events``, read the way the ``--verify`` replay read them.

    ``reserved`` (memory_reserved() after each event, as recorded) lets a release the verify
    replay read as a malloc's retry be recognised as the user's ``empty_cache()`` instead
    (``user_flushes``): both release the same segments, so the trace alone cannot always tell.
    """
    actions: list = []
    empties = set(user_empty_caches) | set(user_flushes(events, reserved, user_empty_caches))
    after_malloc: list = []       # completions the next malloc's retry sync made
    group_reading, group_segments, group_released = "ready", [], False
    ladders, ooms = [], []
    n = len(events)
    users_flush = False           # the releases right after the user's empty_cache() are its own
    for i, e in enumerate(events):
        a = e["action"]
        if i in empties:
            end = i
            while end + 1 < n and events[end + 1]["action"] in RELEASES + ("free_completed",):
                end += 1
            actions.append(Action("empty_cache", i, sample_at=end))     # compared after its last release
            users_flush = True
        elif a not in RELEASES + ("free_completed",):
            users_flush = False
        if i in readings and readings[i] != "deferred":
            group_reading = readings[i]
        if a in ("segment_alloc", "segment_map"):
            group_segments.append((e["addr"], e["size"]))
        elif a in RELEASES:
            group_released = group_released or not users_flush
        elif a == "free_requested":
            nxt = events[i + 1] if i + 1 < n else None
            adjacent = nxt is not None and nxt["action"] == "free_completed" and nxt["addr"] == e["addr"]
            deferred = not adjacent or readings.get(i) == "deferred"
            actions.append(Action("free", i, e["addr"], e["size"], e["stream"], deferred=deferred))
            if adjacent and deferred:
                after_malloc.append(Action("complete", i + 1, e["addr"]))
        elif a == "free_completed":
            if i > 0 and events[i - 1]["action"] == "free_requested" and events[i - 1]["addr"] == e["addr"]:
                continue             # the free's own completion (or one moved after the next malloc)
            if group_reading == "sync":
                after_malloc.append(Action("complete", i, e["addr"]))
            else:
                actions.append(Action("complete", i, e["addr"]))
                if _standalone_completion(events, i):
                    actions.append(Action("process", i))
        elif a in ("alloc", "oom"):
            kind = "malloc" if a == "alloc" else "request"
            actions.append(Action(kind, i, e.get("addr", 0), e["size"], e["stream"],
                                  segments=tuple(group_segments)))
            if group_released and group_reading != "empty_cache":
                ladders.append(i)
            if a == "oom":
                ooms.append(i)
            actions.extend(dataclasses.replace(c, pos=i) for c in after_malloc)
            after_malloc, group_reading, group_segments, group_released = [], "ready", [], False
    actions.extend(after_malloc)
    return Program(actions, sorted(empties), ladders, ooms)


def user_flushes(events: list, reserved: Optional[list], known: list = ()) -> list:
    """Releases before a malloc that were the user's ``empty_cache()``, not the malloc's retry.

    A malloc flushes its cache only after cudaMalloc failed (``alloc_block`` then
    ``release_cached_blocks`` in ``DeviceCachingAllocator::malloc``).  So the releases right
    before a new segment were the user's call when

    * their stack names ``empty_cache`` (PyTorch records the Python frames of
      ``torch.cuda.empty_cache()`` on each ``segment_free`` when history keeps stacks), or
    * that cudaMalloc could not have failed: reserved before the releases plus the segment
      asked for is no more than what the run held at its peak, and every cudaMalloc up to
      that peak succeeded (one GPU, one capacity).
    Returns the trace positions of the first release of each such run.
    """
    peak = max(reserved) if reserved else None
    out, i, n = [], 0, len(events)
    covered = set()               # releases that already belong to a known empty_cache()
    for k in known:
        while k < n and events[k]["action"] in RELEASES + ("free_completed",):
            covered.add(k)
            k += 1
    while i < n:
        if events[i]["action"] not in RELEASES or i in covered:
            i += 1
            continue
        j = i
        while j < n and events[j]["action"] in RELEASES + ("free_completed",):
            j += 1
        grows = j < n and events[j]["action"] in ("segment_alloc", "segment_map")
        named = any(f.get("name") == "empty_cache" for f in events[i].get("frames") or ())
        fits = grows and peak is not None and i > 0 and reserved[i - 1] + events[j]["size"] <= peak
        if grows and (named or fits):
            out.append(i)
        i = j
    return out


def _standalone_completion(events: list, i: int) -> bool:
    """Is this the last of a run of completions that no malloc follows (the verify replay
    completes those with ``process_events`` on their own: ``_complete_leading_frees``)?"""
    j = i + 1
    if j < len(events) and events[j]["action"] == "free_completed":
        return False
    while j < len(events) and events[j]["action"] not in ("alloc", "oom", "free_requested"):
        j += 1
    return j == len(events) or events[j]["action"] == "free_requested"


# ---------------------------------------------------------------- the device

class WhatIfDevice(SimDevice):
    """A simulated GPU of a given usable capacity that puts segments where PyTorch did when it can."""

    def __init__(self, profile: str, index: int, usable: Optional[int]) -> None:
        super().__init__(profile, index=index)
        self.usable = usable
        total = (usable if usable is not None else UNCAPPED) + self.info.context_reserve
        self.info = dataclasses.replace(self.info, total_memory=int(total))
        self.planned: deque = deque()           # (addr, size) PyTorch's cudaMalloc returned next
        self.planned_segments: deque = deque()  # (addr, size, "segment_map"): where rebuild_expandable reserves
        self.freeing_addr: Optional[int] = None
        self.events_by_addr: dict = {}
        self.set_address_hint(self._pytorch_address)

    def _pytorch_address(self, kind: str, size: int) -> Optional[int]:
        if kind != "malloc":
            # An expandable segment mapped before the first event is reserved where PyTorch's began
            # (rebuild_expandable.py plans it); any other reservation goes where the device puts it.
            planned = next((a for a, _s, action in self.planned_segments if action == "segment_map"), None)
            return planned if planned is not None and not self._space.overlapping(planned, size) else None
        for k, (addr, planned_size) in enumerate(self.planned):
            if planned_size == size and not self._space.overlapping(addr, size):
                del self.planned[k]
                return addr
        return None

    def create_event(self, timing: bool = True):
        if self.freeing_addr is None:
            return super().create_event(timing)
        event = ManualEvent()
        self.events_by_addr.setdefault(self.freeing_addr, []).append(event)
        return event


# ---------------------------------------------------------------- the replay

@dataclass
class Anchored:
    """What one anchored replay measured."""
    positions: list               # trace event of each sample
    reserved: list                # memory_reserved() after that program action
    allocated: list
    peak_reserved: int = 0
    peak_reserved_at: int = -1    # trace event
    fragmentation: int = 0        # reserved - allocated at that peak
    peak_allocated: int = 0
    start_reserved: int = 0
    start_live: int = 0
    ooms: int = 0
    oom_at: list = field(default_factory=list)       # trace events whose request failed here
    alloc_retries: int = 0        # num_alloc_retries: each a full flush and a device-wide sync
    device_calls: int = 0
    device_call_us: float = 0.0   # simulated time in cudaMalloc/cudaFree/VMM calls
    syncs: int = 0                # device-wide syncs (cudaFree's implicit one, the flush's own)
    start_does_not_fit: bool = False
    notes: list = field(default_factory=list)


def anchored_replay(events: list, finals: list, program: Program, *, config: str = "",
                    policy: str = "caching", usable: Optional[int] = None, profile: str = "h100-80gb",
                    index: int = 0, allocator_factory=None) -> Anchored:
    """Replay ``program`` (from ``program_of``) from the state at the trace's first event."""
    return _Replayer(events, finals, config, policy, usable, profile, index, allocator_factory).run(program)


class _Replayer:
    def __init__(self, events, finals, config, policy, usable, profile, index, factory) -> None:
        self.events, self.finals = events, finals
        self.device = WhatIfDevice(profile, index, usable)
        self.allocator = factory(self.device, config) if factory else make_allocator(self.device, policy, config)
        self.exact = isinstance(self.allocator, CachingAllocator)
        self.pools = PoolRouter(events, finals)
        self.streams: dict = {0: self.device.default_stream}
        self.live: dict = {}
        self.held: dict = {}          # another design's deferred frees, until their event completes
        self.guards: list = []
        self.out = Anchored([], [], [])

    def _stream(self, handle: int):
        stream = self.streams.get(handle)
        if stream is None:
            stream = self.streams[handle] = self.device.create_stream(handle=handle)
        return stream

    def _guard_stream(self):
        # One queue per pending free, as in replay.py: events on one stream complete in order,
        # and the trace does not say which stream a free waited on.
        da = getattr(self.allocator, "device_allocator", None)      # None for the policies
        busy = da.cuda_events if da is not None else {}
        for stream in self.guards:
            if stream.handle not in busy:
                return stream
        stream = self.device.create_stream(handle=max(self.streams) + 0x1000 + len(self.guards))
        self.guards.append(stream)
        return stream

    # ------------------------------------------------------------ start
    def _restore(self, program: Program) -> bool:
        # The state at the first event is a fact of the recorded run, whatever the setting
        # replayed: rebuilt once, under the recorded settings (start_state), and shared.
        state = program.start
        if state is None:
            config = getattr(self.allocator, "config", None) or AllocatorConfig()
            state = infer_initial_state(self.events, self.finals, config)
        self.out.notes += list(state.notes)
        held = sum(s.size for s in state.segments) + sum(s["total_size"] for s in state.expandable)
        self.out.start_live = sum(b[1] for s in state.segments for b in s.live_blocks) + sum(
            b["size"] for s in state.expandable for b in s["blocks"] if b["state"] != "inactive")
        self.out.start_reserved = held
        if self.device.usable is not None and held > self.device.usable:
            self.out.start_does_not_fit = True
            return False
        for seg in state.segments:
            stream = self._stream(seg.stream)
            if self.exact:
                self.device.planned.appendleft((seg.address, seg.size))
                self.live.update(restore_segment(self.allocator, seg.address, seg.size, stream,
                                                 seg.live_blocks, small=seg.small,
                                                 pool_id=self.pools.pool_of({"addr": seg.address})))
        if self.exact and state.expandable:
            # Expandable segments mapped when recording began (a run recorded mid-way), laid out as
            # the verify replay lays them out; a layout that cannot be rebuilt fails the replay.
            try:
                self.live.update(rebuild_expandable(self, state.expandable, self.events))
            except CannotRebuild as exc:
                raise ValueError(f"expandable segments at the first event not rebuilt: {exc}") from None
        if not self.exact:
            # Another design cannot have PyTorch's layout: it is asked for the same live blocks,
            # and for the memory PyTorch held cached then, given straight back, so that it starts
            # holding what the run held (a pool that keeps memory keeps it; one that does not,
            # releases it: each design's own answer).
            for seg in state.segments:
                for addr, _size, requested in seg.live_blocks:
                    self.live[addr] = self.allocator.malloc(requested, self._stream(seg.stream))
            for seg in state.expandable:
                for b in seg["blocks"]:
                    if b["state"] != "inactive":
                        self.live[b["address"]] = self.allocator.malloc(b["requested_size"],
                                                                        self._stream(seg["stream"]))
            cached = held - self.out.start_live
            if cached > 0:
                self.allocator.free(self.allocator.malloc(cached, self.device.default_stream))
        for addr in state.pending_free:
            self._free(addr, deferred=True)
        return True

    # ------------------------------------------------------------ actions
    def _malloc(self, act: Action) -> None:
        self.device.planned = deque(act.segments)
        e = self.events[act.pos]
        try:
            pool_id = self.pools.pool_of(e) if act.kind == "malloc" else (0, 0)
            with self.pools.route(self.allocator, pool_id):
                allocation = self.allocator.malloc(act.size, self._stream(act.stream))
        except OutOfMemoryError:
            self.out.ooms += 1
            self.out.oom_at.append(act.pos)
            return
        finally:
            self.device.planned = deque()
        if act.kind == "malloc":
            self.live[act.addr] = allocation
        # A request PyTorch refused that fits here stays live: the run stopped there.

    def _free(self, addr: int, deferred: bool) -> None:
        allocation = self.live.pop(addr, None)
        if allocation is None:        # its malloc ran out of memory in this replay
            return
        if deferred and not self.exact:
            # Another design orders the free after the other stream's work its own way (the
            # driver's pool: cudaFreeAsync on a stream that waits for it): the memory is free
            # for reuse once that work is done, where the program's event completes.
            self.held[addr] = allocation
            return
        if deferred:
            self.allocator.record_stream(allocation, self._guard_stream())
            self.device.freeing_addr = addr
        try:
            self.allocator.free(allocation)
        finally:
            self.device.freeing_addr = None

    def _complete(self, addr: int) -> None:
        held = self.held.pop(addr, None)
        if held is not None:
            self.allocator.free(held)
        for event in self.device.events_by_addr.pop(addr, []):
            event.ready = True

    def _do(self, act: Action) -> None:
        kind = act.kind
        if kind in ("malloc", "request"):
            self._malloc(act)
        elif kind == "free":
            self._free(act.addr, act.deferred)
        elif kind == "complete":
            self._complete(act.addr)
            return
        elif kind == "process":
            da = getattr(self.allocator, "device_allocator", None)  # the policies have no events to process
            if da is not None:
                da.process_events()
        elif kind == "empty_cache":
            self.allocator.empty_cache()
        self._sample(act.sample_at if act.sample_at >= 0 else act.pos)

    def _sample(self, pos: int) -> None:
        a = self.allocator
        reserved, allocated = a.memory_reserved(), a.memory_allocated()
        out = self.out
        out.positions.append(pos)
        out.reserved.append(reserved)
        out.allocated.append(allocated)
        if reserved > out.peak_reserved:
            out.peak_reserved, out.peak_reserved_at, out.fragmentation = reserved, pos, reserved - allocated
        if allocated > out.peak_allocated:
            out.peak_allocated = allocated

    def run(self, program: Program) -> Anchored:
        try:
            if not self._restore(program):
                return self.out
        except (ValueError, RuntimeError, CudaError) as exc:
            raise ValueError(f"the allocator state at the trace's first event cannot be rebuilt: {exc}") from None
        # The state at the first event is the first sample: a run that never grows peaks there.
        a = self.allocator
        self.out.peak_reserved, self.out.peak_allocated = a.memory_reserved(), a.memory_allocated()
        self.out.fragmentation = self.out.peak_reserved - self.out.peak_allocated
        for act in program.actions:
            self._do(act)
        c = self.device.counters
        self.out.device_calls = c.malloc_calls + c.free_calls + c.vmm_calls + c.malloc_async_calls + c.free_async_calls
        self.out.device_call_us = float(c.api_time_us)
        self.out.syncs = int(c.implicit_syncs)
        stats = self.allocator.memory_stats() if hasattr(self.allocator, "memory_stats") else {}
        self.out.alloc_retries = int(stats.get("num_alloc_retries", 0))
        return self.out


def start_state(events: list, finals: list, config: str):
    """The allocator state at the trace's first event, under the recorded ``config`` (rebuild.py)."""
    return infer_initial_state(events, finals, AllocatorConfig.parse(config) if config else AllocatorConfig())


def first_mismatch(recorded: list, run: Anchored) -> Optional[tuple]:
    """(trace event, recorded reserved, replayed reserved) where the curves first differ, or None.

    ``recorded`` is memory_reserved() after each trace event (the verify replay's frames).
    """
    for pos, value in zip(run.positions, run.reserved):
        if recorded[pos] != value:
            return pos, recorded[pos], value
    return None
