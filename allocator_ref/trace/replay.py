"""Replay a real PyTorch memory trace on the reference allocator, and ask "what if".

``replay(snapshot, verify=True)`` feeds the user's requests from a snapshot's
``device_traces`` (every ``alloc`` and ``free_requested``) to a fresh
``CachingAllocator`` on a simulated device, and compares every decision the
reference allocator makes with what PyTorch recorded:

* in ``verify`` mode the simulated device hands out the addresses PyTorch's
  cudaMalloc returned (the trace's ``segment_alloc``/``segment_map``
  events), and fails exactly the device calls that failed on the GPU (the
  trace's ``oom`` and retry releases), so the two runs can be compared
  address for address;
* a trace that starts mid-run gets its starting state rebuilt first
  (``rebuild.py``);
* cross-stream frees (``free_requested`` ... later ``free_completed``) are
  replayed with ``record_stream`` and events that complete exactly where the
  trace says they did.

Without ``verify`` the same requests run under any configuration or policy,
and the result says what the run would have needed: peak reserved, peak
allocated, fragmentation, device calls, simulated time, and OOMs on a device
of a given size.
"""
from __future__ import annotations

import copy
import dataclasses
import itertools
from collections import deque
from typing import Any, Callable, Optional

from ..caching.allocator import CachingAllocator
from ..caching.config import AllocatorConfig
from ..caching.oom import OutOfMemoryError
from ..caching.restore import restore_segment
from ..device.errors import CudaError
from ..policies.registry import make_allocator     # every design, by name (the policy registry)
from .device_traces import devices_of, device_segments, raw_trace, replayable_events, replayable_positions
from .rebuild import infer_initial_state
from .rebuild_expandable import CannotRebuild, rebuild_expandable
from .replay_device import ManyStreamsDevice, ReplayDevice
from .replay_pools import PoolRouter
from .replay_report import DeviceReplay, Divergence, ReplayResult
from .snapshot import load_snapshot
from .trace_index import TraceIndex
from .validate import SnapshotError, validate_snapshot

USER_ACTIONS = ("alloc", "free_requested")
RELEASES = ("segment_free", "segment_unmap")
GUARD_HANDLES = 2**64     # stream handles of the replay's own guard streams (_guard_stream)
REORDER_WINDOW = 64       # how far ahead _take_produced looks for an event emitted out of order


def _config_text(snapshot: dict) -> str:
    settings = snapshot.get("allocator_settings") or {}
    return settings.get("PYTORCH_CUDA_ALLOC_CONF", "") or ""


def replay(snapshot: Any, allocator_factory: Optional[Callable] = None, *, config: Optional[str] = None,
           policy: str = "caching", verify: bool = False, profile: str = "h100-80gb",
           device_memory: Optional[int] = None, progress: Optional[bool] = None) -> ReplayResult:
    """Replay every device trace of ``snapshot`` (a dict, or a path to a pickle).

    ``config`` defaults to the snapshot's own ``PYTORCH_CUDA_ALLOC_CONF``;
    ``allocator_factory(device, config)`` builds something else than the policy named;
    ``device_memory`` (bytes) replays on a simulated GPU of that size: requests that do
    not fit raise the allocator's OutOfMemoryError, are counted in ``ooms_raised`` and
    skipped, so the report says whether the run would have fitted.
    """
    source = "<dict>"
    if not isinstance(snapshot, dict):
        source = str(snapshot)
        snapshot = load_snapshot(snapshot)
    else:
        snapshot = _checked(snapshot)
    same_config = config is None
    config = _config_text(snapshot) if config is None else config
    if same_config and policy == "caching" and allocator_factory is None:
        try:
            AllocatorConfig.parse(config)
        except ValueError as exc:        # the file's own setting: say so, in the loader's words
            raise SnapshotError(f"{source}: allocator_settings['PYTORCH_CUDA_ALLOC_CONF'] = "
                                f"{config[:80]!r} cannot be used: {exc}") from None
    if verify and device_memory is not None:
        raise ValueError("--verify replays on the GPU the trace was recorded on; drop --device-memory")
    if verify and (policy != "caching" or allocator_factory is not None or not same_config):
        raise ValueError("--verify compares against PyTorch's own decisions: it needs the caching "
                         "policy and the snapshot's own config")
    devices = []
    # Every device with trace events or segments (device_traces may be shorter than the
    # devices the segments name); ``snapshot`` entries are left out (device_traces.py).
    for index in devices_of(snapshot):
        raw = raw_trace(snapshot, index)
        events = replayable_events(raw)
        if not events and not verify:
            continue                     # a what-if has no requests to replay on this device
        try:
            replayer = _DeviceReplayer(index=index, events=events, finals=device_segments(snapshot, index),
                                       config=config, policy=policy, verify=verify, profile=profile,
                                       factory=allocator_factory, progress=progress,
                                       device_memory=device_memory, positions=replayable_positions(raw))
            result = replayer.run()
        except SnapshotError as exc:
            raise SnapshotError(f"{source}: {exc}") from None
        result.snapshot_entries = len(raw) - len(events)
        devices.append(result)
    return ReplayResult(source, policy, config, verify, devices)


def _checked(snapshot: dict) -> dict:
    """A snapshot built in memory gets the same field checks as one loaded from a file."""
    try:
        return validate_snapshot(snapshot)
    except SnapshotError as exc:
        raise SnapshotError(f"<dict>: {exc}") from None


class _DeviceReplayer:
    """Replays one device's trace."""

    def __init__(self, *, index: int, events: list, finals: list, config: str, policy: str = "caching",
                 verify: bool, profile: str, factory: Optional[Callable] = None,
                 progress: Optional[bool] = None, device_memory: Optional[int] = None,
                 positions: Optional[list] = None):
        self.index, self.events, self.finals = index, events, finals
        self.positions = positions    # index in the raw trace of each event (None: the same)
        self.verify, self.policy = verify, policy
        self.device = ReplayDevice(profile, index=index) if verify else ManyStreamsDevice(profile, index=index)
        if device_memory is not None:
            # A GPU of this size (the profile's context reserve still comes off the top).
            self.device.info = dataclasses.replace(self.device.info, total_memory=int(device_memory))
        self.allocator = factory(self.device, config) if factory else make_allocator(self.device, policy, config)
        self.result = DeviceReplay(index, len(events), state_only=not events)
        self.pools = PoolRouter(events, finals)      # MemPool / CUDA graph pools (replay_pools.py)
        self.live: dict = {}          # trace address -> our Allocation
        self.streams: dict = {0: self.device.default_stream}
        self.produced: deque = deque()
        self.progress = progress if progress is not None else len(events) > 5000
        if verify:
            self.allocator.trace.add_listener(self._on_event)
        self._guards: list = []
        self._in_trial = False
        self.pos = 0
        self._bar = _NoBar()
        # Every "what comes next" question is answered from tables built once (linear replay).
        self.lookup = TraceIndex(events)
        self._replayed_malloc = -1           # the last alloc/oom event replayed: never twice
        # Trials copy the allocator; their total cost is capped so that no trace makes the
        # replay quadratic (past the cap the default reading is taken, and a note says so).
        self._trial_budget = 20 * len(events) + 10_000

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

    def _guard_stream(self):
        """A side stream whose event queue is empty, to hold back one deferred free.

        PyTorch waits on an event per stream that used the block, and events on one stream
        complete in order.  The trace does not say which streams those were, so each
        deferred free gets a queue of its own: its completion then happens exactly where the
        trace's ``free_completed`` says, never stuck behind another block's event.
        """
        da = getattr(self.allocator, "device_allocator", None)      # None for the policies
        busy = da.cuda_events if da is not None else {}
        for stream in self._guards:
            if stream.handle not in busy:
                return stream
        # Above every cudaStream_t a trace can name (the loader keeps those below 2**64), so a
        # stream the trace meets later never finds its handle taken.
        handle = GUARD_HANDLES + len(self._guards)
        stream = self.device.create_stream(handle=handle)
        self._guards.append(stream)
        return stream

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
    def _restore_start(self) -> None:
        config = getattr(self.allocator, "config", None) or AllocatorConfig()
        state = infer_initial_state(self.events, self.finals, config)
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
        exact = self.verify and isinstance(self.allocator, CachingAllocator)
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
                self._free(addr, deferred=True)
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

    def _free(self, addr: int, deferred: bool) -> bool:
        """Free what the trace calls ``addr``; False when nothing of ours lives there."""
        allocation = self.live.pop(addr, None)
        if allocation is None:
            return False
        if deferred:
            self.allocator.record_stream(allocation, self._guard_stream())
            self.device.freeing_addr = addr
        try:
            self.allocator.free(allocation)
        finally:
            if deferred:
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
        known = self._free(e["addr"], deferred=deferred and self.verify)
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
        def try_reading(clone: "_DeviceReplayer") -> None:
            clone._replay_malloc(pos, j, reading)
            clone._run_until(j + 1)
        return self._trial(try_reading)

    def _trial(self, attempt: Callable[["_DeviceReplayer"], None]) -> bool:
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

    def _clone(self) -> "_DeviceReplayer":
        """A copy to try a reading on; the trace and its tables are shared, not copied."""
        da = getattr(self.allocator, "device_allocator", None)      # None for the policies
        self._trial_budget -= 1 + (len(da.active_blocks) if da is not None else 0) + len(self.live)
        self.result.work += 1 + len(self.live)
        return copy.deepcopy(self, {id(self.events): self.events, id(self.finals): self.finals,
                                    id(self._bar): _NoBar(), id(self.lookup): self.lookup})

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
        def try_free(clone: "_DeviceReplayer") -> None:
            clone._free(self.events[pos]["addr"], deferred=deferred)
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


class TraceStepper:
    """Walk a real trace on the reference allocator, stopping where you like.

        stepper = TraceStepper("run.pickle")       # verify mode: PyTorch's addresses
        stepper.run_until(5000)                     # the allocator as it was at event 5000
        stepper.allocator.snapshot()

    Pictures use it to animate a window of a long trace without redrawing all of it.
    """

    def __init__(self, snapshot: Any, device: Optional[int] = None, profile: str = "h100-80gb") -> None:
        data = _checked(snapshot) if isinstance(snapshot, dict) else load_snapshot(snapshot)
        if device is None:
            device = next((d for d in devices_of(data) if replayable_events(raw_trace(data, d))), None)
        raw = raw_trace(data, device) if isinstance(device, int) else []
        events = replayable_events(raw)            # snapshot entries changed nothing: left out
        if not events:
            raise ValueError(f"the snapshot has no trace events for device {device!r}")
        self._replayer = _DeviceReplayer(index=device, events=events, finals=device_segments(data, device),
                                         config=_config_text(data), verify=True, profile=profile,
                                         progress=False, positions=replayable_positions(raw))
        self._replayer._restore_start()
        self.events = events

    @property
    def allocator(self) -> CachingAllocator:
        return self._replayer.allocator

    @property
    def position(self) -> int:
        """Index of the next trace event not yet replayed."""
        return self._replayer.pos

    @property
    def next_event(self) -> int:
        """Index of the first trace event the allocator has not made yet."""
        return self._replayer.pos + len(self._replayer.produced)

    @property
    def divergence(self) -> Optional[Divergence]:
        return self._replayer.result.first_divergence

    def run_until(self, index: int) -> None:
        self._replayer._run_until(min(index, len(self.events)))
