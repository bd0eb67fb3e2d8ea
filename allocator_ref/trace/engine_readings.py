"""How the verify replay reads an ambiguous stretch of the trace: part of the replay engine.

A malloc's group of events, or a free followed by a completion, can sometimes be read more
than one way (the trace does not say which ``process_events`` or which sync completed a
deferred free, nor whether the user called ``empty_cache()`` first).  The engine tries each
reading on a copy of itself and keeps the first that reproduces the trace exactly; the
copies' total cost is capped so no trace makes the replay quadratic.  These are the
``Engine``'s methods for that (engine.py), kept apart so the stepper reads on its own.
"""
from __future__ import annotations

import copy
from typing import Callable

from ..device.errors import CudaError
from ..events import FAILED_CALL, NEW_MEMORY, RELEASES
from .stage import NEVER
from ..editions.messages import translator

tr = translator("doctor")     # the note replay prints, in the reader's language



class ReadingInference:
    """The Engine's reading of ambiguous groups (a mixin: every attribute is the Engine's)."""

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
        def try_reading(clone: "ReadingInference") -> None:
            clone._replay_malloc(pos, j, reading)
            clone._run_until(j + 1)
        return self._trial(try_reading)

    def _trial(self, attempt: Callable[["ReadingInference"], None]) -> bool:
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

    def _clone(self) -> "ReadingInference":
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
        note = tr("trial budget spent: later ambiguous groups took the default reading")
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
        def try_free(clone: "ReadingInference") -> None:
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
        if k == n or events[k]["action"] not in NEW_MEMORY + (FAILED_CALL,):
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


class _NoBar:
    """A progress bar that shows nothing (trials and quiet replays)."""

    def update(self, n: int) -> None:
        pass

    def close(self) -> None:
        pass
