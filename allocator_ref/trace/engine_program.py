"""The what-if mode's steps: the program's actions replayed from the recorded start.

``Engine.run_program`` (the anchored what-if, whatif.py) replays what the user's code did --
mallocs, frees, ``record_stream`` completions, ``empty_cache()`` -- and lets the allocator
re-derive every decision under another setting, policy or capacity.  These are the
``Engine``'s methods for it (engine.py), kept apart so each mode reads on its own.
"""
from __future__ import annotations

from collections import deque

from ..caching.oom import OutOfMemoryError
from ..caching.restore import restore_segment
from ..device.errors import CudaError
from .rebuild_expandable import CannotRebuild, rebuild_expandable
from .replay_report import Anchored

NEVER = float("inf")      # the completion point of a free the program never completes
UNCAPPED = 1 << 40        # "no capacity known": a 1 TiB GPU, far above any real one


class ProgramSteps:
    """The Engine's what-if steps (a mixin: every attribute is the Engine's)."""

    def run_program(self, program) -> Anchored:
        """Replay ``program`` (whatif.program_of: what the user's code did) from the state at
        the first event; what it measured, sample by sample (the anchored what-if)."""
        self.anchored = True
        self.out = Anchored([], [], [])
        self._done_at = _completions(program)
        try:
            if not self._restore_program_start(program):
                return self.out
        except (ValueError, RuntimeError, CudaError) as exc:
            raise ValueError(f"the allocator state at the trace's first event cannot be rebuilt: {exc}") from None
        # The state at the first event is the first sample: a run that never grows peaks there.
        a, out = self.allocator, self.out
        out.peak_reserved, out.peak_allocated = a.memory_reserved(), a.memory_allocated()
        out.fragmentation = out.peak_reserved - out.peak_allocated
        self._run_actions(program.actions)
        c = self.device.counters
        out.device_calls = c.malloc_calls + c.free_calls + c.vmm_calls + c.malloc_async_calls + c.free_async_calls
        out.device_call_us = float(c.api_time_us)
        out.syncs = int(c.implicit_syncs)
        stats = a.memory_stats() if hasattr(a, "memory_stats") else {}
        out.alloc_retries = int(stats.get("num_alloc_retries", 0))
        return out

    def _restore_program_start(self, program) -> bool:
        # The state at the first event is a fact of the recorded run, whatever the setting
        # replayed: rebuilt once, under the recorded settings, and shared (program.start).
        state = program.start if program.start is not None else self._start_state()
        out = self.out
        out.notes += list(state.notes)
        held = sum(s.size for s in state.segments) + sum(s["total_size"] for s in state.expandable)
        out.start_live = sum(b[1] for s in state.segments for b in s.live_blocks) + sum(
            b["size"] for s in state.expandable for b in s["blocks"] if b["state"] != "inactive")
        out.start_reserved = held
        usable = self.device.info.total_memory - self.device.info.context_reserve
        if usable < UNCAPPED and held > usable:
            out.start_does_not_fit = True
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
            self._request_live_blocks(state)
            cached = held - out.start_live
            if cached > 0:
                self.allocator.free(self.allocator.malloc(cached, self.device.default_stream))
        for addr in state.pending_free:
            self._free(addr, deferred=True, done_at=self._done_at.get(("start", addr), NEVER))
        return True

    def _malloc_action(self, act) -> None:
        planned = act.segments       # where PyTorch's cudaMalloc put this malloc's segments
        if planned:
            self.device.planned = deque(planned)
        try:
            pool_id = self.pools.pool_of(self.events[act.pos]) if act.kind == "malloc" else (0, 0)
            if pool_id == (0, 0):
                allocation = self.allocator.malloc(act.size, self._stream(act.stream))
            else:
                with self.pools.route(self.allocator, pool_id):
                    allocation = self.allocator.malloc(act.size, self._stream(act.stream))
        except OutOfMemoryError:
            self.out.ooms += 1
            self.out.oom_at.append(act.pos)
            return
        finally:
            if planned:
                self.device.planned = deque()
        if act.kind == "malloc":
            self.live[act.addr] = allocation
        # A request PyTorch refused that fits here stays live: the run stopped there.

    def _complete(self, addr: int) -> None:
        held = self.held.pop(addr, None)
        if held is not None:
            self.allocator.free(held)
        for event in self.device.events_by_addr.pop(addr, []):
            event.ready = True

    def _run_actions(self, actions: list) -> None:
        """Every action in order, each followed by a sample of reserved and allocated (but a
        completion: its effect shows at the next process_events).  The hot loop of every
        what-if: a dozen of them run per doctor, so lookups are hoisted out of it."""
        malloc, free, complete, sample = self._malloc_action, self._free, self._complete, self._record_sample
        done_at = self._done_at
        da = getattr(self.allocator, "device_allocator", None)   # the policies have no events to process
        for k, act in enumerate(actions):
            kind = act.kind
            if kind == "malloc" or kind == "request":
                malloc(act)
            elif kind == "free":
                free(act.addr, act.deferred, done_at.get(k, NEVER) if act.deferred else NEVER)
            elif kind == "complete":
                complete(act.addr)
                continue
            elif kind == "process":
                if da is not None:
                    da.process_events()
            elif kind == "empty_cache":
                self.allocator.empty_cache()
            sample(act.sample_at if act.sample_at >= 0 else act.pos)

    def _record_sample(self, pos: int) -> None:
        a, out = self.allocator, self.out
        reserved, allocated = a.memory_reserved(), a.memory_allocated()
        out.positions.append(pos)
        out.reserved.append(reserved)
        out.allocated.append(allocated)
        if reserved > out.peak_reserved:
            out.peak_reserved, out.peak_reserved_at, out.fragmentation = reserved, pos, reserved - allocated
        if allocated > out.peak_allocated:
            out.peak_allocated = allocated


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
