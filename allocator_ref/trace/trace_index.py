"""Where the next user call, release run or completion run starts, for every trace position.

The replay asks, at each step, "what does the trace show from here until the user's
next call?".  Scanning forward to answer made it quadratic on a run of events that
are not user calls (16,000 ``snapshot`` events took 37 s).  These tables are built
once, backwards, in one pass, so every such question costs O(1) and a replay is
linear in the trace.  ``completion_at`` also says where each free completes, which is
how the replay queues a backlog of ``record_stream`` frees (stage.py ``Stage.guard_stream``).
"""
from __future__ import annotations

from ..events import FAILED_CALL, NEW_MEMORY, RELEASES, USER_CALLS

CALLS = USER_CALLS + (FAILED_CALL,)                   # an oom is a malloc that failed
# A release run is a malloc's retry when new memory or the failure follows it, else the user's.
ENDS_A_RETRY = NEW_MEMORY + (FAILED_CALL,)


class TraceIndex:
    """Lookup tables over one device's trace (``n`` = number of events)."""

    def __init__(self, events: list) -> None:
        n = len(events)
        actions = [e["action"] for e in events]
        self.n = n
        self.next_user = [n] * (n + 1)        # first index >= i that is a user call (or n)
        self.next_release = [n] * (n + 1)     # first index >= i that releases memory (or n)
        self.release_end = [n] * (n + 1)      # inside a run of releases: where the run ends
        self.bare_release_end = [-1] * (n + 1)  # end of the first release run at/after i that
        #                                        is not followed by new memory (-1: none)
        self.completed_end = [n] * (n + 1)    # inside a run of free_completed: where it ends
        self.completion_at: dict = {}         # free_requested index -> its free_completed (n: none)
        next_completed: dict = {}             # address -> the nearest free_completed after i
        for i in range(n - 1, -1, -1):
            action = actions[i]
            if action == "free_completed":
                next_completed[events[i]["addr"]] = i
            elif action == "free_requested":
                self.completion_at[i] = next_completed.get(events[i]["addr"], n)
            self.next_user[i] = i if action in CALLS else self.next_user[i + 1]
            if action in RELEASES:
                self.next_release[i] = i
                end = self.release_end[i + 1] if i + 1 < n and actions[i + 1] in RELEASES else i + 1
                self.release_end[i] = end
                bare = end == n or actions[end] not in ENDS_A_RETRY
                self.bare_release_end[i] = end if bare else self.bare_release_end[end]
            else:
                self.next_release[i] = self.next_release[i + 1]
                self.bare_release_end[i] = self.bare_release_end[i + 1]
            if action == "free_completed":
                self.completed_end[i] = self.completed_end[i + 1] if i + 1 < n and \
                    actions[i + 1] == "free_completed" else i + 1
        # A free made before recording completes at the first free_completed of its address.
        self.first_completion = next_completed
