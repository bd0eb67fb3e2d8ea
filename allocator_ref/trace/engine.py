"""The replay engine: one stepper over a recorded device, in two modes, on one trace-following device.

Every tool that replays a recording goes through :class:`Engine` (``replay``, the doctor,
the what-if, the frames and the player):

* **verify** -- PyTorch's own decisions.  The engine feeds the user's calls the trace shows
  (each ``alloc`` and ``free_requested``, and the ``empty_cache()`` calls it infers) to a
  fresh caching allocator on a :class:`~allocator_ref.trace.replay_device.TraceDevice`
  that hands out PyTorch's addresses and fails exactly the device calls that failed on the
  GPU, and compares every event the allocator makes with the trace's (``run``).
* **what-if** -- the same program re-derived under another setting, policy or capacity:
  either the trace's user calls from the rebuilt start (``run`` without verify: the plain
  ``replay``), or the program's actions read off a verify replay (``run_program``: the
  anchored what-if of whatif.py), on a TraceDevice of the given capacity that puts new
  segments where PyTorch did when that range is free.

Both start from the allocator state at the first event, rebuilt once per recording
(``DeviceRecording.start_state``), and both hold a ``record_stream`` free back the same way:
its events go on a guard stream whose queue completes in the order the trace completes them
(``_guard_stream``), so a backlog of thousands of pending frees costs each event the same as
none.  ``make_device`` is the one place a replay's simulated GPU is built.
"""
from __future__ import annotations

import copy
import dataclasses
import itertools
from collections import deque
from typing import Callable, Optional

from sortedcontainers import SortedList

from ..caching.allocator import CachingAllocator
from ..caching.config import AllocatorConfig
from ..caching.oom import OutOfMemoryError
from ..caching.restore import restore_segment
from ..device.errors import CudaError
from .rebuild import infer_initial_state
from .rebuild_expandable import CannotRebuild, rebuild_expandable
from .recording import DeviceRecording
from .replay_device import TraceDevice
from .replay_pools import PoolRouter
from .replay_report import Anchored, DeviceReplay, Divergence
from .validate import SnapshotError

USER_ACTIONS = ("alloc", "free_requested")
RELEASES = ("segment_free", "segment_unmap")
GUARD_HANDLES = 2**64     # stream handles of the replay's own guard streams (_guard_stream)
REORDER_WINDOW = 64       # how far ahead _take_produced looks for an event emitted out of order
UNCAPPED = 1 << 40        # "no capacity known": a 1 TiB GPU, far above any real one
NEVER = float("inf")      # the completion point of a free the trace never completes


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


def make_allocator(policy: str, device, config: str):
    """A fresh allocator of the named design on ``device``."""
    if policy == "caching":
        return CachingAllocator(device, config)
    from .. import policies
    classes = {"direct": "DirectAllocator", "stream_ordered": "StreamOrderedAllocator", "bfc": "BFCAllocator"}
    if policy not in classes:
        raise ValueError(f"unknown policy {policy!r}: choose one of caching, {', '.join(classes)}")
    return getattr(policies, classes[policy])(device)


def make_replay_allocator(policy: str, device, config: str, factory: Optional[Callable] = None):
    """The allocator a replay drives: ``factory(device, config)``, or the named policy."""
    if factory is not None:
        return factory(device, config)
    return make_allocator(policy, device, config)


class Engine:
    """Replays one device of a recording (see the module doc); ``verify`` picks the mode."""

    def __init__(self, recording: DeviceRecording, *, verify: bool, config: Optional[str] = None,
                 policy: str = "caching", profile: str = "h100-80gb", factory: Optional[Callable] = None,
                 progress: Optional[bool] = None, usable: Optional[int] = None,
                 total_memory: Optional[int] = None):
        self.recording = recording
        self.index, self.events, self.finals = recording.index, recording.events, recording.segments
        self.positions = recording.positions    # index in the raw trace of each event (None: the same)
        self.config = recording.config if config is None else config
        self.verify, self.policy = verify, policy
        self.device = make_device(profile, self.index, verify=verify, usable=usable, total_memory=total_memory)
        self.allocator = make_replay_allocator(policy, self.device, self.config, factory)
        self.exact = isinstance(self.allocator, CachingAllocator)   # can take PyTorch's layout as it was
        events = self.events
        self.result = DeviceReplay(self.index, len(events), state_only=not events)
        self.pools = PoolRouter(events, self.finals)      # MemPool / CUDA graph pools (replay_pools.py)
        self.live: dict = {}          # trace address -> our Allocation
        self.held: dict = {}          # another design's deferred frees, until their event completes
        self.streams: dict = {0: self.device.default_stream}
        self.produced: deque = deque()
        self.progress = progress if progress is not None else len(events) > 5000
        if verify:
            self.allocator.trace.add_listener(self._on_event)
        self._guards: list = []       # the guard streams (_guard_stream)
        self._guard_tails = SortedList()   # (completion point of its last queued free, guard number)
        self._in_trial = False
        self.pos = 0
        self._bar = _NoBar()
        # Every "what comes next" question is answered from tables built once (linear replay).
        self.lookup = recording.lookup
        self._replayed_malloc = -1           # the last alloc/oom event replayed: never twice
        # Trials copy the allocator; their total cost is capped so that no trace makes the
        # replay quadratic (past the cap the default reading is taken, and a note says so).
        self._trial_budget = 20 * len(events) + 10_000
        self.anchored = False                # run_program: the program's actions, not the trace's calls
        self.out: Optional[Anchored] = None  # what run_program measured

    # ------------------------------------------------------------ plumbing
    def _on_event(self, entry) -> None:
        if entry.action == "snapshot":
            return
        if self.device.script is not None:
            self.device.script_pos += 1
        self.produced.append(entry)

    def _stream(self, handle: int):
        stream = self.streams.get(handle)
        if stream is None:
            stream = self.streams[handle] = self.device.create_stream(handle=handle)
        return stream

    def _guard_stream(self, done_at: float):
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

    def _diverge(self, pos: int, got) -> None:
        if self.result.first_divergence is not None:
            return
        expected = self.events[pos] if pos < len(self.events) else {"action": "end of trace"}
        addr = expected.get("addr", 0)
        segs = [s for s in self.allocator.segments() if s["address"] <= addr < s["address"] + s["total_size"]] \
            if hasattr(self.allocator, "segments") else []
        # The index is the event's place in the file's trace ('snapshot' entries counted).
        where = self.positions[pos] if self.positions and pos < len(self.positions) else pos
        self.result.first_divergence = Divergence(
            index=where, expected=_brief(expected), got=_brief(got.to_dict()) if got is not None else None,
            context=[_brief(e) for e in self.events[max(0, pos - 3):pos + 3]],
            state=[{"address": s["address"], "total_size": s["total_size"],
                    "blocks": [(b["address"], b["size"], b["state"]) for b in s["blocks"]]} for s in segs])

    # ------------------------------------------------------------ setup
    def _start_state(self):
        """The state at the first event: the recording's own (rebuilt once, shared by every
        replay of it) when this allocator reads the recorded settings, else rebuilt under
        this allocator's.  A copy of the notes: each replay adds its own."""
        config = getattr(self.allocator, "config", None)
        if config is not None and self.config == self.recording.config:
            state = self.recording.start_state()
        else:
            state = infer_initial_state(self.events, self.finals, config or AllocatorConfig())
        return dataclasses.replace(state, notes=list(state.notes))

    def _restore_start(self) -> None:
        state = self._start_state()
        if not self.events and (state.segments or state.expandable):
            # No trace: nothing "existed before recording"; say what was rebuilt instead.
            segments = state.segments + state.expandable
            live = sum(len(seg.live_blocks) for seg in state.segments) + sum(
                1 for seg in state.expandable for b in seg["blocks"] if b["state"] != "inactive")
            state.notes[:] = [f"state only: {len(segments)} segment(s) with {live} live block(s) "
                              f"({len(state.pending_free)} freed and still pending) rebuilt from the segments"]
        self.result.inferred = list(state.notes)
        if state.empty:
            self.produced.clear()
            return
        exact = self.verify and self.exact
        for seg in state.segments:
            stream = self._stream(seg.stream)
            if exact:
                self.device.planned_segments.appendleft((seg.address, seg.size, "segment_alloc"))
                self.live.update(restore_segment(self.allocator, seg.address, seg.size, stream,
                                                 seg.live_blocks, small=seg.small,
                                                 pool_id=self.pools.pool_of({"addr": seg.address})))
        if exact:
            self._restore_expandable(state)
        else:
            # Another design cannot have PyTorch's layout: ask it for the same live blocks instead.
            for seg in state.segments:
                for addr, size, requested in seg.live_blocks:
                    self.live[addr] = self.allocator.malloc(requested, self._stream(seg.stream))
            for seg in state.expandable:
                for b in seg["blocks"]:
                    if b["state"] != "inactive":
                        self.live[b["address"]] = self.allocator.malloc(b["requested_size"],
                                                                        self._stream(seg["stream"]))
        for addr in state.pending_free:
            if addr in self.live:
                self._free(addr, deferred=True, done_at=self.lookup.first_completion.get(addr, NEVER))
        self.produced.clear()

    def _restore_expandable(self, state) -> None:
        """The expandable segments mapped at the first event, laid out as inferred (rebuild_expandable.py)."""
        if not state.expandable:
            return
        try:
            self.live.update(rebuild_expandable(self, state.expandable, self.events))
        except (CannotRebuild, ValueError, RuntimeError, AssertionError) as exc:   # CudaError included
            # The data shows a layout no allocator could have: the comparison reports it.
            state.notes.append(f"expandable segments not rebuilt: {exc}")
        else:
            state.notes.append(f"{len(state.expandable)} expandable segment(s) mapped at the start rebuilt "
                               "(one reservation per stream and pool, from its lowest mapped address)")
        self.result.inferred = list(state.notes)

    # ------------------------------------------------------------ actions
    def _malloc(self, pos: int) -> None:
        e = self.events[pos]
        failed_on_gpu = e["action"] == "oom"      # the request itself is only in the oom event
        if not failed_on_gpu:
            self.result.allocs += 1
        try:
            pool_id = self.pools.pool_of(e)
            if pool_id != (0, 0) and not failed_on_gpu:
                self.result.pool_requests += 1
            with self.pools.route(self.allocator, pool_id):
                allocation = self.allocator.malloc(e["size"], self._stream(e["stream"]))
        except OutOfMemoryError:
            self.result.ooms_raised += 1
            return
        except CudaError as exc:
            if not self.verify:
                raise
            # Only after an earlier divergence can a replayed device call be refused
            # (e.g. a mapping where ours already has one): report it, do not crash.
            self._diverge(pos, None)
            self.result.final_state_diff = f"device call failed during the replay: {exc}"
            self.produced.clear()
            self.pos = pos + 1
            return
        finally:
            if self.verify:
                self.device.script = None
        if failed_on_gpu:                          # PyTorch raised here and we did not
            self._diverge(pos, None)
            self.allocator.free(allocation)
            return
        if allocation.ptr == e["addr"]:
            self.result.allocs_exact += 1
        self.live[e["addr"]] = allocation

    def _free(self, addr: int, deferred: bool, done_at: float = NEVER) -> bool:
        """Free what the trace calls ``addr``; False when nothing of ours lives there.

        ``deferred``: a ``record_stream`` free, held back until its event completes at
        ``done_at`` (verify: a trace position; what-if: a program action) -- by the replay
        (a manual event, verify and the anchored what-if), or by the guard stream's own
        (empty) work in a plain what-if.
        """
        allocation = self.live.pop(addr, None)
        if allocation is None:
            return False
        if deferred and self.anchored and not self.exact:
            # Another design orders the free after the other stream's work its own way (the
            # driver's pool: cudaFreeAsync on a stream that waits for it): the memory is free
            # for reuse once that work is done, where the program's event completes.
            self.held[addr] = allocation
            return True
        if deferred:
            self.allocator.record_stream(allocation, self._guard_stream(done_at))
            if self.verify or self.anchored:
                self.device.freeing_addr = addr
        try:
            self.allocator.free(allocation)
        finally:
            self.device.freeing_addr = None
        return True

    def _next_malloc(self, pos: int) -> int:
        """Index of the event that ends the malloc starting at ``pos``: its ``alloc``, or its ``oom``."""
        j = self.lookup.next_user[pos] if pos < len(self.events) else len(self.events)
        if j == len(self.events) or self.events[j]["action"] == "free_requested":
            return -1
        return j

    def _prepare_malloc(self, pos: int, complete_frees: bool = True) -> int:
        """Plan the device for the malloc whose effects start at ``pos``; returns its alloc/oom index."""
        j = self._next_malloc(pos)
        if j < 0:
            return -1
        group = self.events[pos:j + 1]
        self.result.work += len(group)
        self.device.planned_segments = deque(
            (g["addr"], g["size"], g["action"]) for g in group if g["action"] in ("segment_alloc", "segment_map"))
        self.device.script, self.device.script_pos = self.events, pos
        if not complete_frees:
            # The malloc reached release_cached_blocks, whose synchronize_and_free_events
            # completes every pending free: leave them pending until then.
            return j
        for g in group:
            if g["action"] == "free_completed":      # process_events at the start of the malloc
                for event in self.device.events_by_addr.pop(g["addr"], []):
                    event.ready = True
        return j

    # ------------------------------------------------------------ the loop
    def run(self) -> DeviceReplay:
        try:
            self._restore_start()
        except (ValueError, RuntimeError) as exc:      # CudaError included
            raise SnapshotError(f"device {self.index} trace: the allocator state at its first event "
                                f"cannot be rebuilt ({exc}); the trace contradicts itself or the "
                                "snapshot's final segments") from None
        self.pos = 0
        self._bar = _progress_bar(len(self.events), self.progress, f"replay device {self.index}")
        self._run_until(len(self.events))
        self._bar.close()
        self._finish()
        return self.result

    def _run_until(self, stop: int) -> None:
        stalled = 0
        while self.pos < stop:
            before = self.pos
            self._step()
            self.result.work += 1
            stalled = stalled + 1 if self.pos == before and not self.produced else 0
            if stalled > 1:
                # Twice nothing advanced and nothing waits to be compared (e.g. a malloc that
                # made no event): the step would repeat forever.  Report it and move on.
                # (One such step is normal: the user's empty_cache() before a malloc.)
                self._diverge(before, None)
                self.pos, stalled = before + 1, 0
            self._bar.update(self.pos - before)

    def _step(self) -> None:
        """Advance through the trace by one comparison or one user call: the three cases."""
        e = self.events[self.pos]
        if self.verify and self.produced:
            self._step_compare(e)            # an event our allocator produced, against the trace's
        elif e["action"] == "free_requested":
            self._step_user_free(e)          # the user's free
        elif not self.verify:
            if e["action"] == "alloc":       # without verify, only the user's mallocs are replayed
                self._malloc(self.pos)
                self._sample()
            self.pos += 1
        else:
            self._step_user_call(e)          # the user's malloc or empty_cache, inferred

    def _step_compare(self, e: dict) -> None:
        self._compare(self.pos, self._take_produced(e))
        self.pos += 1

    def _step_user_free(self, e: dict) -> None:
        events, n, pos = self.events, len(self.events), self.pos
        deferred = not (pos + 1 < n and events[pos + 1]["action"] == "free_completed"
                        and events[pos + 1]["addr"] == e["addr"])
        if not deferred and self.verify and self._completion_unclear(pos):
            deferred = not self._free_reproduces(pos, deferred=False)
        if deferred and self.verify and not self._in_trial and pos + 1 < n \
                and events[pos + 1]["action"] == "free_completed":
            self.result.readings[pos] = "deferred"     # completed by the next malloc's sync (whatif.py)
        known = self._free(e["addr"], deferred=deferred and self.verify,
                           done_at=self.lookup.completion_at.get(pos, NEVER))
        self._sample()
        if self.verify and not known:
            # A free of something the trace never allocated and the rebuild did not find:
            # nothing of ours to free, so nothing will be produced to compare with.
            self._diverge(pos, None)
            self.pos += 1 if deferred else 2
        elif not self.verify:
            self.pos += 1

    def _step_user_call(self, e: dict) -> None:
        """Verify mode, nothing of ours waiting to be compared: the events from here on were
        caused by the user's next call.  Which one?"""
        pos = self.pos
        end = self._user_empty_cache_end(pos)
        if end >= 0:                         # torch.cuda.empty_cache() (or a release without a malloc)
            if not self._in_trial:
                self.result.user_empty_caches.append(pos)    # a program action (whatif.py)
            try:
                self.allocator.empty_cache()
            except CudaError as exc:         # only possible after an earlier divergence
                self._diverge(pos, None)
                self.result.final_state_diff = f"device call failed during the replay: {exc}"
                self.produced.clear()
                self.pos = end
                return
            if not self.produced:
                self._diverge(pos, None)
                self.pos = end
            return
        j = self._next_malloc(pos)
        if 0 <= j <= self._replayed_malloc:
            # After a divergence the events before this malloc were not all made by our
            # replay of it; replaying it again would allocate twice.  Skip to after it.
            self._diverge(pos, None)
            self.pos = j + 1
            return
        if j >= 0:                           # the effects of a malloc, then its alloc (or oom)
            self._replay_malloc(pos, j, self._choose_reading(pos, j))
            return
        if self._complete_leading_frees(pos):
            return                           # deferred frees completing with no malloc after them
        if e["action"] not in ("oom", "snapshot"):
            self._diverge(pos, None)
        # Nothing we can cause: skip it (a whole run of completions nobody waited for at once).
        self.pos = self.lookup.completed_end[pos] if e["action"] == "free_completed" else pos + 1

    # A malloc's group of events can be read more than one way when deferred frees complete
    # in it: by the malloc's own process_events (they were ready), or by the
    # synchronize_and_free_events of its retry path, or by an empty_cache() the user called
    # just before.  The trace cannot tell; the replay tries each reading on a copy of itself
    # and keeps the first that reproduces the group exactly.
    READINGS = ("sync", "ready", "empty_cache")

    def _choose_reading(self, pos: int, j: int) -> str:
        group = self.events[pos:j + 1]
        actions = {g["action"] for g in group}
        pending = any(g["action"] == "free_completed" and g["addr"] in self.device.events_by_addr
                      for g in group)
        default = "sync" if actions & set(RELEASES) else "ready"
        # Completions that the malloc's process_events or a sync may have made ...
        completions_unclear = pending and bool(actions & (set(RELEASES) | {"oom"}))
        # ... or unmaps then a map: a malloc whose first try reserved a new segment before
        # failing, or the user's empty_cache() freeing the address range the map then reuses.
        reservation_unclear = {"segment_unmap", "segment_map"} <= actions
        if self._in_trial or not (completions_unclear or reservation_unclear) or not self._can_try():
            return default
        for reading in (default,) + tuple(r for r in self.READINGS if r != default):
            if self._reading_reproduces(pos, j, reading):
                return reading
        return default

    def _reading_reproduces(self, pos: int, j: int, reading: str) -> bool:
        def try_reading(clone: "Engine") -> None:
            clone._replay_malloc(pos, j, reading)
            clone._run_until(j + 1)
        return self._trial(try_reading)

    def _trial(self, attempt: Callable[["Engine"], None]) -> bool:
        """Run ``attempt`` on a copy of this replayer: did it reproduce the trace exactly?"""
        clone = self._clone()
        clone._in_trial = True
        clone.result.first_divergence = None
        try:
            attempt(clone)
        except CudaError:
            return False                     # this reading asks the device for the impossible
        # Every event the attempt made must be one the trace shows, and nothing left over.
        return clone.result.first_divergence is None and not clone.produced

    def _clone(self) -> "Engine":
        """A copy to try a reading on; the trace and its tables are shared, not copied."""
        da = getattr(self.allocator, "device_allocator", None)      # None for the policies
        self._trial_budget -= 1 + (len(da.active_blocks) if da is not None else 0) + len(self.live)
        self.result.work += 1 + len(self.live)
        return copy.deepcopy(self, {id(self.events): self.events, id(self.finals): self.finals,
                                    id(self._bar): _NoBar(), id(self.lookup): self.lookup,
                                    id(self.recording): self.recording})

    def _can_try(self) -> bool:
        if self._trial_budget > 0:
            return True
        note = "trial budget spent: later ambiguous groups took the default reading"
        if note not in self.result.inferred:
            self.result.inferred.append(note)
        return False

    def _completion_unclear(self, pos: int) -> bool:
        """Was the free at ``pos`` completed at once, or by a failing malloc's sync right after?

        ``free_requested`` then ``free_completed`` usually means no other stream used the
        block.  But when the next malloc goes on to release cached memory (or fails), its
        synchronize_and_free_events may have completed a deferred free just there.
        """
        if self._in_trial or not self._can_try():
            return False
        j = self._next_malloc(pos + 2)
        if j < 0:
            return False
        if self.events[j]["stream"] != self.events[pos]["stream"]:
            # The freed block cannot serve a malloc on another stream (get_free_block looks
            # only at the malloc's stream), so both readings make the same events: no trial.
            # (A trial copies the whole state; on a trace with 10,000 streams it cost seconds.)
            return False
        return any(g["action"] in RELEASES + ("oom",) for g in self.events[pos + 2:j + 1])

    def _free_reproduces(self, pos: int, deferred: bool) -> bool:
        def try_free(clone: "Engine") -> None:
            clone._free(self.events[pos]["addr"], deferred=deferred,
                        done_at=self.lookup.completion_at.get(pos, NEVER))
            clone._run_until(self._next_malloc(pos + 2) + 1)
        return self._trial(try_free)

    def _replay_malloc(self, pos: int, j: int, reading: str) -> None:
        if not self._in_trial:               # how the group was read, for the what-if (whatif.py)
            if reading == "empty_cache":
                self.result.user_empty_caches.append(pos)
            else:
                self.result.readings[pos] = reading
        if reading == "empty_cache":
            self.allocator.empty_cache()     # the malloc itself follows in the next step
            return
        self._replayed_malloc = j
        self._prepare_malloc(pos, complete_frees=(reading == "ready"))
        self._malloc(j)

    def _complete_leading_frees(self, pos: int) -> bool:
        """Complete the deferred frees the trace shows from ``pos``; True if any was produced.

        Frees that complete right before a release of cached segments were completed by that
        release's ``synchronize_and_free_events`` (an ``empty_cache``, or a malloc's retry
        path), not by ``process_events``: those are left for the release to complete.
        """
        j = self.lookup.completed_end[pos] if self.events[pos]["action"] == "free_completed" else pos
        self.result.work += j - pos
        if j < len(self.events) and self.events[j]["action"] in RELEASES:
            return False
        ready = False
        for e in self.events[pos:j]:
            for event in self.device.events_by_addr.pop(e["addr"], []):
                event.ready = ready = True
        if ready:
            self.allocator.device_allocator.process_events()
        return bool(self.produced)

    def _user_empty_cache_end(self, pos: int) -> int:
        """If the events from ``pos`` hold a user's ``empty_cache()``, the index just after it, else -1.

        A malloc releases cached memory only on its way to a new segment (GC, release of
        oversize blocks, or the full release before the retry), so its releases are always
        followed by a ``segment_alloc``/``segment_map`` or by its ``oom``.  A run of releases
        followed by anything else was the user emptying the cache.
        """
        events, n, index = self.events, len(self.events), self.lookup
        stop = index.next_user[pos]          # the user's next call: the releases must come first
        j = index.next_release[pos]
        if j >= stop:
            return -1
        k = index.release_end[j]
        if k == n or events[k]["action"] not in ("segment_alloc", "segment_map", "oom"):
            return k
        # Releases then new memory: a malloc's own retry path -- unless the cache could have
        # served that malloc before the release, in which case the malloc never reached a
        # release: the user emptied the cache first.  (It is the same malloc for every run of
        # releases before the user's next call, so one check answers for all of them.)
        m = self._next_malloc(k)
        if m >= 0 and self._cache_would_serve(self.events[m]):
            return k
        bare = index.bare_release_end[k]     # a later run of releases not followed by new memory
        return bare if 0 <= bare <= stop else -1

    def _cache_would_serve(self, e: dict) -> bool:
        check = getattr(self.allocator, "can_serve_from_cache", None)
        return bool(check and check(e["size"], self._stream(e["stream"])))

    def _take_produced(self, expected: dict):
        """The next event we produced, or the one matching ``expected`` a little further on.

        Events that the allocator emits while walking unordered containers (the streams'
        event queues) can come out in a different order than PyTorch's hash maps gave.
        """
        first = self.produced[0]
        if not _same_event(expected, first):
            # Look a bounded way ahead: a reordering is local, and an unbounded search would
            # make a long run of unmatched events quadratic.
            for i, entry in enumerate(itertools.islice(self.produced, 1, REORDER_WINDOW), start=1):
                if _same_event(expected, entry):
                    self.result.work += i
                    del self.produced[i]
                    return entry
            self.result.work += min(len(self.produced), REORDER_WINDOW)
        return self.produced.popleft()

    def _compare(self, pos: int, got) -> None:
        e = self.events[pos]
        action = e["action"]
        if action == "segment_alloc" or action == "segment_map":
            self.result.segment_allocs_expected += 1
        elif action in RELEASES:
            self.result.segment_frees_expected += 1
        elif action == "oom":
            self.result.ooms_expected += 1
        if got.action in ("segment_alloc", "segment_map"):
            self.result.segment_allocs_made += 1
        elif got.action in RELEASES:
            self.result.segment_frees_made += 1
        if not _same_event(e, got):
            self._diverge(pos, got)
        if action == "alloc" or got.action == "alloc":
            self._sample()

    def _sample(self) -> None:
        a = self.allocator
        reserved, allocated = a.memory_reserved(), a.memory_allocated()
        if reserved > self.result.peak_reserved:
            self.result.peak_reserved = reserved
            self.result.fragmentation_at_peak = reserved - allocated
        self.result.peak_allocated = max(self.result.peak_allocated, allocated)

    def _finish(self) -> None:
        c = self.device.counters
        self.result.device_calls = c.malloc_calls + c.free_calls + c.vmm_calls + \
            c.malloc_async_calls + c.free_async_calls
        self.result.simulated_time_us = float(self.device.now_us())
        self.result.peak_reserved = max(self.result.peak_reserved, self.allocator.max_memory_reserved())
        self.result.peak_allocated = max(self.result.peak_allocated, self.allocator.max_memory_allocated())
        if self.result.state_only:
            # No run to take peaks over: the snapshot's own moment (the rebuild's placeholders
            # for free blocks would otherwise count as allocated).
            reserved, allocated = self.allocator.memory_reserved(), self.allocator.memory_allocated()
            self.result.peak_reserved, self.result.peak_allocated = reserved, allocated
            self.result.fragmentation_at_peak = reserved - allocated
        self.result.pools = sorted(self.pools.pools_seen)
        if not self.verify:
            # What-if: nothing is compared event by event, so count what this allocator did the
            # way PyTorch reports it (num_device_alloc / num_device_free: cudaMalloc and cuMemMap,
            # cudaFree and cuMemUnmap; a cudaMallocAsync backend fills neither, as in PyTorch).
            stats = self.allocator.memory_stats()
            self.result.segment_allocs_made = int(stats.get("num_device_alloc", 0))
            self.result.segment_frees_made = int(stats.get("num_device_free", 0))
        if self.verify:
            # Requested sizes are compared where the file has them (PyTorch 2.0's blocks do not).
            requested = all("requested_size" in b for s in self.finals for b in s["blocks"]
                            if b["state"] != "inactive")
            totals = tuple(k for k in SEGMENT_TOTALS if all(k in s for s in self.finals))
            ours = _layout(self.allocator.segments(record=False), requested, totals)
            theirs = _layout(self.finals, requested, totals)
            self.result.segments_compared = len(self.finals)
            self.result.final_state_equal = ours == theirs
            if ours != theirs:
                self.result.final_state_diff = _diff(ours, theirs)



    # ------------------------------------------------------------ what-if: the program's actions
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
        held = sum(s.size for s in state.segments)
        out.start_live = sum(b[1] for s in state.segments for b in s.live_blocks)
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
        if not self.exact:
            # Another design cannot have PyTorch's layout: it is asked for the same live blocks,
            # and for the memory PyTorch held cached then, given straight back, so that it starts
            # holding what the run held (a pool that keeps memory keeps it; one that does not,
            # releases it: each design's own answer).
            for seg in state.segments:
                for addr, _size, requested in seg.live_blocks:
                    self.live[addr] = self.allocator.malloc(requested, self._stream(seg.stream))
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


def _same_event(expected: dict, got) -> bool:
    """Same action, address and size (an ``oom`` compares only its action: device_free differs)."""
    if got.action != expected["action"]:
        return False
    return got.action == "oom" or (got.addr == expected.get("addr") and got.size == expected["size"])


# Per segment, compared when every segment of the file has them (older files lack some).
SEGMENT_TOTALS = ("segment_type", "allocated_size", "active_size", "requested_size")


def _layout(segments: list[dict], requested: bool = True, totals: tuple = ()) -> list:
    """What must be equal at the end: every segment and block, down to its state and request.

    A free block keeps the request of its last user in PyTorch's snapshot (a leftover,
    not state), so requested sizes are compared for active blocks only.  A segment's
    totals (``totals``: those the file has) must agree with its blocks as ours do.
    """
    return sorted((s["address"], s["total_size"], s["stream"], bool(s.get("is_expandable")),
                   tuple((b["address"], b["size"], b["state"],
                          b.get("requested_size") if requested and b["state"] != "inactive" else None)
                         for b in s["blocks"]),
                   tuple(s.get("segment_pool_id") or (0, 0)),
                   tuple(s[k] for k in totals)) for s in segments)


def _diff(ours: list, theirs: list) -> str:
    a, b = {s[0]: s for s in ours}, {s[0]: s for s in theirs}
    lines = []
    for addr in sorted(set(a) | set(b)):
        if a.get(addr) != b.get(addr):
            lines.append(f"segment {addr:#x}: ours={_short(a.get(addr))} pytorch={_short(b.get(addr))}")
        if len(lines) >= 5:
            break
    return "\n".join(lines)


def _short(seg) -> str:
    if seg is None:
        return "absent"
    return f"{seg[1]} B, blocks {[(hex(x[0]), x[1], x[2], x[3]) for x in seg[4]][:6]}"


def _brief(e: dict) -> dict:
    return {k: v for k, v in e.items() if k in ("action", "addr", "size", "stream", "device_free")}


class _NoBar:
    def update(self, n: int) -> None:
        pass

    def close(self) -> None:
        pass


def _progress_bar(total: int, enabled: bool, desc: str):
    if not enabled:
        return _NoBar()
    from tqdm.auto import tqdm
    return tqdm(total=total, desc=desc, unit="ev", leave=False, mininterval=0.5)


