"""The verifier: the loop that checks PyTorch's recorded decisions, event by event.

``replay --verify``, the doctor, the frames and the player go through :class:`Engine`.  It
feeds the user's calls the trace shows (each ``alloc`` and ``free_requested``, and the
``empty_cache()`` calls it infers) to a fresh caching allocator on a
:class:`~allocator_ref.trace.replay_device.TraceDevice` that hands out PyTorch's addresses and
fails exactly the device calls that failed on the GPU, and compares every event the allocator
makes with the trace's (``run``).  How it read each ambiguous stretch (``result.readings``,
``user_empty_caches``) is the Program it yields (whatif.program_of): what the user's code
did, which the runner (runner.py) replays on any design and capacity.

It starts from the allocator state at the first event, rebuilt once per recording
(``DeviceRecording.start_state``), and holds a ``record_stream`` free back the way every
replay does (``Stage.guard_stream``, stage.py: the device, the allocator, the streams and the
live blocks it stands on).  Two files: the stepper (here) and the reading of ambiguous groups
(engine_readings.py).
"""
from __future__ import annotations

import itertools
from collections import deque
from typing import Callable, Optional

from ..caching.oom import OutOfMemoryError
from ..device.errors import CudaError
from ..events import NEW_MEMORY, RELEASES
from .rebuild_expandable import CannotRebuild, rebuild_expandable
from .engine_readings import ReadingInference, _NoBar
from .recording import DeviceRecording
from .replay_report import DeviceReplay, Divergence
from .stage import NEVER, Stage
from .validate import SnapshotError
from ..editions.messages import translator

tr = translator("doctor")     # the inference lines replay prints, in the reader's language

REORDER_WINDOW = 64       # how far ahead _take_produced looks for an event emitted out of order


class Engine(ReadingInference):
    """Verifies one device of a recording against PyTorch's decisions (see the module doc)."""

    def __init__(self, recording: DeviceRecording, *, config: Optional[str] = None,
                 policy: Optional[str] = None, profile: str = "h100-80gb", factory: Optional[Callable] = None,
                 progress: Optional[bool] = None):
        self.recording = recording
        self.index, self.events, self.finals = recording.index, recording.events, recording.segments
        self.positions = recording.positions    # index in the raw trace of each event (None: the same)
        self.config = recording.config if config is None else config
        self.policy = policy or recording.policy   # none: the design that recorded it
        # The device, the allocator, the streams and the user's live blocks (stage.py).
        self.stage = Stage(recording, verify=True, config=self.config, policy=self.policy, profile=profile,
                           factory=factory)
        # The stage's parts by the names the steps use (the same objects: a trial's deepcopy keeps them one).
        stage = self.stage
        self.device, self.allocator, self.exact = stage.device, stage.allocator, stage.exact
        self.pools, self.live = stage.pools, stage.live
        events = self.events
        self.result = DeviceReplay(self.index, len(events), state_only=not events)
        self.produced: deque = deque()
        self.progress = progress if progress is not None else len(events) > 5000
        self.allocator.trace.add_listener(self._on_event)
        self._in_trial = False
        self.pos = 0
        self._bar = _NoBar()
        # Every "what comes next" question is answered from tables built once (linear replay).
        self.lookup = recording.lookup
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
        return self.stage.stream(handle)

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
        state = self.stage.start_state()
        if not self.events and (state.segments or state.expandable):
            # No trace: nothing "existed before recording"; say what was rebuilt instead.
            segments = state.segments + state.expandable
            live = sum(len(seg.live_blocks) for seg in state.segments) + sum(
                1 for seg in state.expandable for b in seg["blocks"] if b["state"] != "inactive")
            state.notes[:] = [tr("state only: {segments} segment(s) with {live} live block(s) ({pending} freed "
                                 "and still pending) rebuilt from the segments", segments=len(segments),
                                 live=live, pending=len(state.pending_free))]
        self.result.inferred = list(state.notes)
        if state.empty:
            self.produced.clear()
            return
        exact = self.exact
        plan = (lambda addr, size: self.device.planned_segments.appendleft((addr, size, "segment_alloc"))) \
            if exact else None
        self.stage.restore_segments(state, plan)
        if exact:
            self._restore_expandable(state)
        else:
            self.stage.request_live_blocks(state)
        for addr in state.pending_free:
            if addr in self.live:
                self._free(addr, deferred=True, done_at=self.lookup.first_completion.get(addr, NEVER))
        self.produced.clear()

    def _restore_expandable(self, state) -> None:
        """The expandable segments mapped at the first event, laid out as inferred (rebuild_expandable.py)."""
        if not state.expandable:
            return
        try:
            self.live.update(rebuild_expandable(self.stage, state.expandable, self.events))
        except (CannotRebuild, ValueError, RuntimeError, AssertionError) as exc:   # CudaError included
            # The data shows a layout no allocator could have: the comparison reports it.
            state.notes.append(tr("expandable segments not rebuilt: {why}", why=exc))
        else:
            state.notes.append(tr("{n} expandable segment(s) mapped at the start rebuilt (one reservation per "
                                  "stream and pool, from its lowest mapped address)", n=len(state.expandable)))
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
            # Only after an earlier divergence can a replayed device call be refused
            # (e.g. a mapping where ours already has one): report it, do not crash.
            self._diverge(pos, None)
            self.result.final_state_diff = f"device call failed during the replay: {exc}"
            self.produced.clear()
            self.pos = pos + 1
            return
        finally:
            self.device.script = None
        if failed_on_gpu:                          # PyTorch raised here and we did not
            self._diverge(pos, None)
            self.allocator.free(allocation)
            return
        if allocation.ptr == e["addr"]:
            self.result.allocs_exact += 1
        self.live[e["addr"]] = allocation

    def _free(self, addr: int, deferred: bool, done_at: float = NEVER) -> bool:
        """Free what the trace calls ``addr`` (Stage.free); False when nothing of ours lives there."""
        return self.stage.free(addr, deferred, done_at)

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
            (g["addr"], g["size"], g["action"]) for g in group if g["action"] in NEW_MEMORY)
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
        if self.produced:
            self._step_compare(e)            # an event our allocator produced, against the trace's
        elif e["action"] == "free_requested":
            self._step_user_free(e)          # the user's free
        else:
            self._step_user_call(e)          # the user's malloc or empty_cache, inferred

    def _step_compare(self, e: dict) -> None:
        self._compare(self.pos, self._take_produced(e))
        self.pos += 1

    def _step_user_free(self, e: dict) -> None:
        events, n, pos = self.events, len(self.events), self.pos
        deferred = not (pos + 1 < n and events[pos + 1]["action"] == "free_completed"
                        and events[pos + 1]["addr"] == e["addr"])
        if not deferred and self._completion_unclear(pos):
            deferred = not self._free_reproduces(pos, deferred=False)
        if deferred and not self._in_trial and pos + 1 < n \
                and events[pos + 1]["action"] == "free_completed":
            self.result.readings[pos] = "deferred"     # completed by the next malloc's sync (whatif.py)
        known = self._free(e["addr"], deferred=deferred,
                           done_at=self.lookup.completion_at.get(pos, NEVER))
        self._sample()
        if not known:
            # A free of something the trace never allocated and the rebuild did not find:
            # nothing of ours to free, so nothing will be produced to compare with.
            self._diverge(pos, None)
            self.pos += 1 if deferred else 2

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
        if action in NEW_MEMORY:
            self.result.segment_allocs_expected += 1
        elif action in RELEASES:
            self.result.segment_frees_expected += 1
        elif action == "oom":
            self.result.ooms_expected += 1
        if got.action in NEW_MEMORY:
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
        self.result.device_calls = self.stage.device_calls()
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


def _progress_bar(total: int, enabled: bool, desc: str):
    if not enabled:
        return _NoBar()
    from tqdm.auto import tqdm
    return tqdm(total=total, desc=desc, unit="ev", leave=False, mininterval=0.5)


