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
  ``_user_empty_cache_end`` in engine.py); a run of releases inside a malloc's group is the
  malloc's own retry ladder (``release_cached_blocks`` after ``alloc_block`` failed in
  ``DeviceCachingAllocator::malloc``) and is re-derived, not replayed;
* a ``free_completed`` that the malloc's ``process_events`` found ready is the program's
  event completing there; one that the retry's ``synchronize_and_free_events`` forced is
  the event completing no later than that malloc, so the what-if completes it right after.

Every replay starts from the state at the first event (``rebuild.infer_initial_state``,
the same rebuild ``--verify`` uses), restored segment by segment at PyTorch's addresses, and
new segments go where PyTorch put them whenever that range is free, so under the recorded
settings the replay makes PyTorch's decisions and its reserved curve is the recorded one.
The replay is the runner's (runner.py ``Runner.run``, on the same TraceDevice as every
replay); ``anchored_replay`` returns that curve (reserved after each program action) for the doctor
to compare and rank.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Optional

from ..events import FAILED_CALL, NEW_MEMORY, RELEASES, USER_CALLS
from .runner import Runner
from .stage import UNCAPPED
from .recording import DeviceRecording, device_recording
from .replay_report import Anchored    # noqa: F401  (what an anchored replay measured; imported from here)



# ---------------------------------------------------------------- the program

@dataclass(slots=True)     # the runner reads these fields a dozen times per action in every what-if
class Action:
    kind: str             # "malloc", "request" (the oom's request), "free", "complete", "process", "empty_cache"
    pos: int              # the trace event it stands for
    addr: int = 0
    size: int = 0
    stream: int = 0
    deferred: bool = False
    segments: tuple = ()  # for a malloc: the (addr, size) PyTorch's cudaMalloc returned for it
    sample_at: int = -1   # the trace event after which its effect is complete (default: pos)
    frames: Optional[list] = None   # for a malloc: the stack that made it (a ``predicted`` program)


@dataclass
class Program:
    actions: list
    user_empty_caches: list       # trace positions of the user's empty_cache() calls
    ladder_flushes: list          # trace positions of mallocs that flushed the cache on retry
    ooms: list                    # trace positions of the refused requests
    start: Optional[object] = None    # the rebuilt state at the first event (rebuild.InitialState), once
    completion_at: Optional[dict] = None   # where each deferred free completes (engine._completions), once
    pool_at: Optional[dict] = None         # the private pool of each malloc routed to one (runner._pools), once
    recording: Optional[DeviceRecording] = None   # the device's recording the program was read off
    # Nothing read off a verify replay (calls_of): each design is asked for the live blocks at
    # the first event, and a free pending then completes by its guard stream's own work.
    requests_start: bool = False
    # A predicted program (predict/forecast.py): from an empty GPU, the allocator records its
    # history with each malloc's own stack, and the run stops at its first out-of-memory error.
    predicted: bool = False


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
        if a in NEW_MEMORY:
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


def calls_of(recording: DeviceRecording) -> Program:
    """The trace's own calls as a program, nothing read off a verify replay: every ``alloc`` and
    ``free_requested`` in order, each free at once (``replay`` without ``--verify``)."""
    actions = [Action("malloc", i, e["addr"], e["size"], e["stream"]) if e["action"] == "alloc" else
               Action("free", i, e["addr"], e["size"], e["stream"])
               for i, e in enumerate(recording.events) if e["action"] in USER_CALLS]
    # A free pending at the first event completes where the trace first completes its block.
    first = recording.lookup.first_completion
    return Program(actions, [], [], [], completion_at={("start", addr): k for addr, k in first.items()},
                   recording=recording, requests_start=True)


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
        grows = j < n and events[j]["action"] in NEW_MEMORY
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
    while j < len(events) and events[j]["action"] not in USER_CALLS + (FAILED_CALL,):
        j += 1
    return j == len(events) or events[j]["action"] == "free_requested"


# ---------------------------------------------------------------- the replay

def anchored_replay(events: list, finals: list, program: Program, *, config: str = "",
                    policy: Optional[str] = None, usable: Optional[int] = None, profile: str = "h100-80gb",
                    index: int = 0, allocator_factory=None, recording: Optional[DeviceRecording] = None,
                    until_oom: bool = False) -> Anchored:
    """Replay ``program`` (from ``program_of``) from the state at the trace's first event.

    The runner (runner.py), on a GPU of ``usable``
    bytes (uncapped when None).  ``recording`` is the device's recording when the caller
    holds one (``events`` and ``finals`` are then its own).  ``until_oom``: stop at the first
    out-of-memory error (Runner.run).
    """
    if recording is None:
        held = program.recording      # the device's recording, when the program was read off one
        recording = held if held is not None and held.events is events and held.index == index else \
            device_recording(events, finals, config, index)
    runner = Runner(recording, config=config, policy=policy, profile=profile, factory=allocator_factory,
                    usable=UNCAPPED if usable is None else usable)
    return runner.run(program, until_oom=until_oom)


def first_mismatch(recorded: list, run: Anchored) -> Optional[tuple]:
    """(trace event, recorded reserved, replayed reserved) where the curves first differ, or None.

    ``recorded`` is memory_reserved() after each trace event (the verify replay's frames).
    """
    for pos, value in zip(run.positions, run.reserved):
        if recorded[pos] != value:
            return pos, recorded[pos], value
    return None
