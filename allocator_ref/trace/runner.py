"""The runner: the one loop that replays a Program on any design and capacity.

The verifier (engine.py) checks PyTorch's recorded decisions and yields the Program (what the
user's code did: mallocs, frees, ``record_stream`` completions, ``empty_cache()``, in order:
whatif.program_of).  :class:`Runner` replays that Program from the recorded start and lets
the allocator re-derive every decision under another setting, policy or capacity: the
what-if rows, ``compare``, the doctor's remedies, and ``replay`` without ``--verify`` (the
trace's own calls as a program: whatif.calls_of).  It stands on a
:class:`~allocator_ref.trace.stage.Stage`, as the verifier does.
"""
from __future__ import annotations

import time
from collections import deque
from typing import Callable, Optional

from ..caching.oom import OutOfMemoryError
from ..device.errors import CudaError
from .rebuild_expandable import CannotRebuild, rebuild_expandable
from .replay_pools import DEFAULT as DEFAULT_POOL
from .replay_report import Anchored, DeviceReplay
from .stage import NEVER, UNCAPPED, Stage
from .validate import SnapshotError


class PastDeadline(Exception):
    """The run went on past the caller's deadline (time.monotonic())."""


class Runner:
    """Replays Programs of one device's recording on ``policy``/``config`` with ``usable`` bytes."""

    def __init__(self, recording, *, config: Optional[str] = None, policy: Optional[str] = None,
                 profile: str = "h100-80gb", factory: Optional[Callable] = None, usable: Optional[int] = None,
                 total_memory: Optional[int] = None):
        self.recording, self.events = recording, recording.events
        self.stage = Stage(recording, verify=False, config=recording.config if config is None else config,
                           policy=policy or recording.policy, profile=profile, factory=factory, usable=usable,
                           total_memory=total_memory)
        self.out: Optional[Anchored] = None
        self._frames: Optional[list] = None   # a program with stacks: the stack of the call being replayed

    def run(self, program, deadline: Optional[float] = None, until_oom: bool = False) -> Anchored:
        """Replay ``program`` from the state at the first event; what it measured, sample by sample.
        Past ``deadline`` (time.monotonic()) it raises PastDeadline.  ``until_oom``: stop at the
        first out-of-memory error (a caller that asks only whether the run fits has its answer)."""
        self.out = Anchored([], [], [])
        self._done_at = _completions(program)
        self._pool_at = _pools(program, self.stage.pools, self.events)
        # A program read off a verify replay completes its events where it says (a manual event
        # per block), and another design's deferred frees wait for theirs (Stage.free).
        self.stage.follows_trace = self.stage.holds_other_designs = not program.requests_start
        if program.predicted:
            # The history a snapshot shows, each malloc with the stack recorded for it (gatherContext
            # would take the replay's own stack).
            self.stage.allocator.record_memory_history("all")
            self.stage.allocator.device_allocator.maybe_gather_context = lambda levels: self._frames
        try:
            if not self._restore_start(program):
                return self.out
        except (ValueError, RuntimeError, CudaError) as exc:
            if program.requests_start:       # the file's own state contradicts itself: replay's words
                raise SnapshotError(f"device {self.recording.index} trace: the allocator state at its first event "
                                    f"cannot be rebuilt ({exc}); the trace contradicts itself or the "
                                    "snapshot's final segments") from None
            raise ValueError(f"the allocator state at the trace's first event cannot be rebuilt: {exc}") from None
        # The state at the first event is the first sample: a run that never grows peaks there.
        a, out = self.stage.allocator, self.out
        out.peak_reserved, out.peak_allocated = a.memory_reserved(), a.memory_allocated()
        out.fragmentation = out.peak_reserved - out.peak_allocated
        self._run_actions(program.actions, program.predicted, deadline, until_oom or program.predicted)
        self._frames = None
        c = self.stage.device.counters
        out.device_calls = self.stage.device_calls()
        out.device_call_us = float(c.api_time_us)
        out.syncs = int(c.implicit_syncs)
        out.largest_segment = getattr(self.stage.device, "largest_malloc", 0)
        stats = a.memory_stats() if hasattr(a, "memory_stats") else {}
        out.alloc_retries = int(stats.get("num_alloc_retries", 0))
        return out

    def _restore_start(self, program) -> bool:
        # The state at the first event is a fact of the recorded run, whatever the setting
        # replayed: rebuilt once, under the recorded settings, and shared (program.start).
        stage, out = self.stage, self.out
        state = program.start if program.start is not None else stage.start_state()
        out.notes += list(state.notes)
        held = sum(s.size for s in state.segments) + sum(s["total_size"] for s in state.expandable)
        out.start_live = sum(b[1] for s in state.segments for b in s.live_blocks) + sum(
            b["size"] for s in state.expandable for b in s["blocks"] if b["state"] != "inactive")
        out.start_reserved = held
        if program.requests_start:
            stage.restore_segments(state, None)
            stage.request_live_blocks(state)
            self._free_pending(state)
            return True
        usable = stage.device.info.total_memory - stage.device.info.context_reserve
        # A recorded start that this GPU cannot hold; a predicted run starts empty and finds out
        # at its first malloc, as the script would.
        if not program.predicted and usable < UNCAPPED and held > usable:
            out.start_does_not_fit = True
            return False
        plan = (lambda addr, size: stage.device.planned.appendleft((addr, size))) if stage.exact else None
        stage.restore_segments(state, plan)
        if stage.exact and state.expandable:
            # Expandable segments mapped when recording began (a run recorded mid-way), laid out as
            # the verify replay lays them out; a layout that cannot be rebuilt fails the replay.
            try:
                stage.live.update(rebuild_expandable(stage, state.expandable, self.events))
            except CannotRebuild as exc:
                raise ValueError(f"expandable segments at the first event not rebuilt: {exc}") from None
        if not stage.exact:
            # Another design cannot have PyTorch's layout: it is asked for the same live blocks,
            # and for the memory PyTorch held cached then, given straight back, so that it starts
            # holding what the run held (a pool that keeps memory keeps it; one that does not,
            # releases it: each design's own answer).
            stage.request_live_blocks(state)
            cached = held - out.start_live
            if cached > 0:
                stage.allocator.free(stage.allocator.malloc(cached, stage.device.default_stream))
        self._free_pending(state)
        return True

    def _free_pending(self, state) -> None:
        """The frees made before recording whose event had not completed: held back again."""
        for addr in state.pending_free:
            self.stage.free(addr, deferred=True, done_at=self._done_at.get(("start", addr), NEVER))

    def _malloc(self, act) -> None:
        stage = self.stage
        planned = act.segments       # where PyTorch's cudaMalloc put this malloc's segments
        if planned:
            stage.device.planned = deque(planned)
        try:
            pool_id = self._pool_at.get(act.pos, DEFAULT_POOL) if act.kind == "malloc" else DEFAULT_POOL
            stream = stage.streams.get(act.stream) or stage.stream(act.stream)
            if pool_id == DEFAULT_POOL:
                allocation = stage.allocator.malloc(act.size, stream)
            else:
                self.out.pool_requests += 1
                stage.pools.pools_seen.add(pool_id)
                with stage.pools.route(stage.allocator, pool_id):
                    allocation = stage.allocator.malloc(act.size, stream)
        except OutOfMemoryError as exc:
            if not self.out.ooms:
                self.out.first_oom = str(exc).splitlines()[0]
            self.out.ooms += 1
            self.out.oom_at.append(act.pos)
            return
        finally:
            if planned:
                stage.device.planned = deque()
        if act.kind == "malloc":
            stage.live[act.addr] = allocation
            self.out.same_address += allocation.ptr == act.addr
        # A request PyTorch refused that fits here stays live: the run stopped there.

    def _run_actions(self, actions: list, predicted: bool = False, deadline: Optional[float] = None,
                     until_oom: bool = False) -> None:
        """Every action in order, each followed by a sample of reserved and allocated (but a
        completion: its effect shows at the next process_events).  The hot loop of every
        what-if: a dozen of them run per doctor, so lookups are hoisted out of it and the
        sample (``memory_reserved()``, ``memory_allocated()``, the peaks) is written inline."""
        stage, out = self.stage, self.out
        malloc, free, complete = self._malloc, stage.free, stage.complete
        done_at = self._done_at
        a = stage.allocator
        da = getattr(a, "device_allocator", None)   # the policies have no events to process
        reserved_now, allocated_now = a.memory_reserved, a.memory_allocated
        positions, reserved_at, allocated_at = out.positions.append, out.reserved.append, out.allocated.append
        for k, act in enumerate(actions):
            if deadline is not None and time.monotonic() > deadline:
                raise PastDeadline(k)
            kind = act.kind
            if kind == "malloc" or kind == "request":
                if predicted:
                    self._frames = act.frames
                malloc(act)
                if until_oom and out.ooms:
                    return                   # the run stopped there (or the caller has its answer)
            elif kind == "free":
                if predicted:
                    self._frames = None
                free(act.addr, act.deferred, done_at.get(k, NEVER) if act.deferred else NEVER)
            elif kind == "complete":
                complete(act.addr)
                continue
            elif kind == "process":
                if da is not None:
                    da.process_events()
            elif kind == "empty_cache":
                a.empty_cache()
            pos = act.sample_at if act.sample_at >= 0 else act.pos
            reserved, allocated = reserved_now(), allocated_now()
            positions(pos)
            reserved_at(reserved)
            allocated_at(allocated)
            if reserved > out.peak_reserved:
                out.peak_reserved, out.peak_reserved_at, out.fragmentation = reserved, pos, reserved - allocated
            if allocated > out.peak_allocated:
                out.peak_allocated = allocated

    def device_replay(self, out: Anchored) -> DeviceReplay:
        """What ``replay`` reports of a run of the trace's own calls (whatif.calls_of): its peaks
        over the samples, and what this allocator did, counted the way PyTorch reports it."""
        stage, a = self.stage, self.stage.allocator
        result = DeviceReplay(self.recording.index, len(self.events), inferred=list(out.notes))
        result.allocs = sum(1 for e in self.events if e["action"] == "alloc")
        result.allocs_exact, result.pool_requests, result.ooms_raised = out.same_address, out.pool_requests, out.ooms
        result.work = len(self.events)               # every event read once, to make the program
        for reserved, allocated in zip(out.reserved, out.allocated):
            if reserved > result.peak_reserved:
                result.peak_reserved, result.fragmentation_at_peak = reserved, reserved - allocated
            result.peak_allocated = max(result.peak_allocated, allocated)
        result.peak_reserved = max(result.peak_reserved, a.max_memory_reserved())
        result.peak_allocated = max(result.peak_allocated, a.max_memory_allocated())
        result.device_calls = stage.device_calls()
        result.simulated_time_us = float(stage.device.now_us())
        result.pools = sorted(stage.pools.pools_seen)
        # Nothing is compared event by event: num_device_alloc / num_device_free (cudaMalloc and
        # cuMemMap, cudaFree and cuMemUnmap; a cudaMallocAsync backend fills neither, as in PyTorch).
        stats = a.memory_stats()
        result.segment_allocs_made = int(stats.get("num_device_alloc", 0))
        result.segment_frees_made = int(stats.get("num_device_free", 0))
        return result


def _pools(program, router, events: list) -> dict:
    """The private pool of each malloc of ``program`` routed to one (trace position -> pool id;
    the default pools are left out).  Read once with the router (replay_pools.pool_of) and kept
    on the program: every what-if of it routes the same requests the same way."""
    found = getattr(program, "pool_at", None)
    if found is not None:
        return found
    found = {}
    for act in program.actions:
        if act.kind == "malloc":
            pool_id = router.pool_of(events[act.pos])
            if pool_id != DEFAULT_POOL:
                found[act.pos] = pool_id
    program.pool_at = found
    return found


def _completions(program) -> dict:
    """Where each deferred free of ``program`` completes: action index -> index of the first
    ``complete`` action for its address after it (("start", addr) for the frees pending at the
    first event).  One backward pass, kept on the program: every what-if of it shares it."""
    found = getattr(program, "completion_at", None)
    if found is not None:
        return found
    found, next_complete = {}, {}
    for k in range(len(program.actions) - 1, -1, -1):
        act = program.actions[k]
        if act.kind == "complete":
            next_complete[act.addr] = k
        elif act.kind == "free" and act.deferred:
            found[k] = next_complete.get(act.addr, NEVER)
    for addr, k in next_complete.items():
        found[("start", addr)] = k
    program.completion_at = found
    return found
