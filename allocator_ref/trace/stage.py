"""What every replay stands on: the simulated GPU, the allocator on it, and the user's blocks.

The verifier (engine.py) and the runner (runner.py) are two loops over one recording; both
hold a :class:`Stage` rather than inherit one.  It keeps what a replay of the user's program
needs whatever the loop: the streams the trace names, the live blocks by their trace address,
the ``record_stream`` frees held back until their event completes (``guard_stream``), and the
state at the first event, put back (``start_state``, ``restore_segments``,
``request_live_blocks``).
"""
from __future__ import annotations

import dataclasses
from typing import Callable, Optional

from sortedcontainers import SortedList

from ..caching.allocator import CachingAllocator
from ..caching.config import AllocatorConfig
from ..caching.restore import restore_segment
from ..policies.registry import make_allocator     # every design, by name (the policy registry)
from .rebuild import infer_initial_state
from .replay_device import TraceDevice
from .replay_pools import PoolRouter

NEVER = float("inf")      # the completion point of a free the program never completes
UNCAPPED = 1 << 40        # "no capacity known": a 1 TiB GPU, far above any real one
GUARD_HANDLES = 2**64     # stream handles of the replay's own guard streams (guard_stream)


def make_device(profile: str, index: int = 0, *, verify: bool, usable: Optional[int] = None,
                total_memory: Optional[int] = None) -> TraceDevice:
    """The simulated GPU a replay runs on (the one place one is built).

    ``verify``: the trace decides what fails (no capacity).  Otherwise ``usable`` bytes for the
    process (the profile's CUDA context reserve comes on top), or ``total_memory`` bytes in all
    (the reserve comes off the top), or the profile's own GPU.
    """
    device = TraceDevice(profile, index=index, follows_script=verify, total_memory=total_memory)
    if usable is not None:
        device.info = dataclasses.replace(device.info, total_memory=int(usable) + device.info.context_reserve)
    return device


def make_replay_allocator(policy: str, device, config: str, factory: Optional[Callable] = None):
    """The allocator a replay drives: ``factory(device, config)``, or the named policy."""
    if factory is not None:
        return factory(device, config)
    return make_allocator(device, policy, config)


class Stage:
    """One device's replay stage: ``device``, ``allocator``, ``pools``, ``streams``, ``live``.

    ``follows_trace``: frees held back by ``record_stream`` complete where the replay says
    (a manual event per block: the verifier and the runner), not by the guard stream's own
    empty work (a plain what-if of the trace's calls).
    """

    def __init__(self, recording, *, verify: bool, config: str, policy: str, profile: str,
                 factory: Optional[Callable] = None, usable: Optional[int] = None,
                 total_memory: Optional[int] = None):
        self.recording, self.config = recording, config
        self.device = make_device(profile, recording.index, verify=verify, usable=usable, total_memory=total_memory)
        self.allocator = make_replay_allocator(policy, self.device, config, factory)
        self.exact = isinstance(self.allocator, CachingAllocator)   # can take PyTorch's layout as it was
        self.pools = PoolRouter(recording.events, recording.segments)   # MemPool / CUDA graph pools
        self.live: dict = {}          # trace address -> our Allocation
        self.held: dict = {}          # another design's deferred frees, until their event completes
        self.streams: dict = {0: self.device.default_stream}
        self.follows_trace = verify
        self.holds_other_designs = False   # the runner: another design's deferred frees wait in ``held``
        self._guards: list = []       # the guard streams (guard_stream)
        self._guard_tails = SortedList()   # (completion point of its last queued free, guard number)

    def stream(self, handle: int):
        stream = self.streams.get(handle)
        if stream is None:
            stream = self.streams[handle] = self.device.create_stream(handle=handle)
        return stream

    def guard_stream(self, done_at: float):
        """A side stream to hold back one deferred free that completes at ``done_at``.

        PyTorch waits on an event per stream that used the block, and events on one stream
        complete in order (``process_events`` stops at a stream's first event not ready).
        The trace does not say which streams those were; it says where each free completed.
        So a free joins a guard stream whose last queued free completes no later than it
        does (the latest such one): its completion then happens exactly where the trace
        says, never stuck behind another block's event.  Frees that complete in the order
        they were made share one guard, so ``process_events`` looks at a few queues, not one
        per pending free (one each made a backlog of 16,000 frees quadratic).
        """
        tails = self._guard_tails
        k = tails.bisect_right((done_at, NEVER)) - 1
        if k >= 0:
            number = tails.pop(k)[1]
        else:
            number = len(self._guards)
            # Above every cudaStream_t a trace can name (the loader keeps those below 2**64), so
            # a stream the trace meets later never finds its handle taken.
            self._guards.append(self.device.create_stream(handle=GUARD_HANDLES + number))
        tails.add((done_at, number))
        return self._guards[number]

    def free(self, addr: int, deferred: bool, done_at: float = NEVER) -> bool:
        """Free what the trace calls ``addr``; False when nothing of ours lives there.

        ``deferred``: a ``record_stream`` free, held back until its event completes at
        ``done_at`` (a trace position, or a program action) -- by the replay (a manual event:
        ``follows_trace``), or by the guard stream's own (empty) work in a plain what-if.
        """
        allocation = self.live.pop(addr, None)
        if allocation is None:
            return False
        if deferred and self.holds_other_designs and not self.exact:
            # Another design orders the free after the other stream's work its own way (the
            # driver's pool: cudaFreeAsync on a stream that waits for it): the memory is free
            # for reuse once that work is done, where the program's event completes.
            self.held[addr] = allocation
            return True
        if deferred:
            self.allocator.record_stream(allocation, self.guard_stream(done_at))
            if self.follows_trace:
                self.device.freeing_addr = addr
        try:
            self.allocator.free(allocation)
        finally:
            self.device.freeing_addr = None
        return True

    def complete(self, addr: int) -> None:
        """The event a deferred free of ``addr`` waits on completes (its memory is reusable at the
        next ``process_events``); another design's held free is given back now."""
        held = self.held.pop(addr, None)
        if held is not None:
            self.allocator.free(held)
        for event in self.device.events_by_addr.pop(addr, []):
            event.ready = True

    # ------------------------------------------------------------ the state at the first event
    def start_state(self):
        """The state at the first event: the recording's own (rebuilt once, shared by every
        replay of it) when this allocator reads the recorded settings, else rebuilt under
        this allocator's.  A copy of the notes: each replay adds its own."""
        rec = self.recording
        config = getattr(self.allocator, "config", None)
        if config is not None and self.config == rec.config:
            state = rec.start_state()
        else:
            state = infer_initial_state(rec.events, rec.segments, config or AllocatorConfig())
        return dataclasses.replace(state, notes=list(state.notes))

    def restore_segments(self, state, plan: Optional[Callable]) -> None:
        """The cudaMalloc segments at the first event, at PyTorch's addresses and with their live
        blocks (``restore_segment``); ``plan(address, size)`` tells the device where each goes.
        Without ``plan`` (a design that cannot take PyTorch's layout) only their streams are made,
        in the same order."""
        for seg in state.segments:
            stream = self.stream(seg.stream)
            if plan is None:
                continue
            plan(seg.address, seg.size)
            self.live.update(restore_segment(self.allocator, seg.address, seg.size, stream,
                                             seg.live_blocks, small=seg.small,
                                             pool_id=self.pools.pool_of({"addr": seg.address})))

    def request_live_blocks(self, state) -> None:
        """Another design cannot have PyTorch's layout: ask it for the same live blocks instead,
        those of cudaMalloc segments and of expandable ones, each on its stream."""
        for seg in state.segments:
            for addr, _size, requested in seg.live_blocks:
                self.live[addr] = self.allocator.malloc(requested, self.stream(seg.stream))
        for seg in state.expandable:
            for b in seg["blocks"]:
                if b["state"] != "inactive":
                    self.live[b["address"]] = self.allocator.malloc(b["requested_size"], self.stream(seg["stream"]))

    def device_calls(self) -> int:
        c = self.device.counters
        return c.malloc_calls + c.free_calls + c.vmm_calls + c.malloc_async_calls + c.free_async_calls
