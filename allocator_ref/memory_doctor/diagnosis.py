"""What happened in a recorded run: the facts the doctor reads off a verified replay.

Everything here comes from replaying the snapshot on the reference allocator at PyTorch's
own addresses (``replay(..., verify=True)``): its totals after each event and the block map where
it is needed (``replay_facts``).  From them:

* the peak of live tensors (``memory_allocated``) and of reserved memory
  (``memory_reserved``), and the state at the reserved peak;
* where the reserved-but-unallocated bytes sit at that peak: which segments, how they
  are split, which pool and stream;
* the largest live allocations at the peak, with the Python frames PyTorch recorded
  for them (the trace's ``alloc`` entries carry the stack);
* the out-of-memory error, if the trace has one: the request, what the driver had
  free, and what PyTorch's message said about allocated and reserved memory
  (``DeviceCachingAllocator::malloc`` builds it);
* memory held for other streams: blocks freed but waiting on ``record_stream``
  events (``active_pending_free``), and each stream's own cache of free blocks.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from ..device.sizing import profile_for_snapshot
from ..editions.messages import translator
from ..trace.recording import load_recording
from ..units import percent_of
from .replay_facts import CALL_ACTIONS, replay_facts
from .device_words import CUDA, DeviceWords

SMALL_SEGMENT = 2 * 2**20
ROUND = 512      # kMinBlockSize: every request is rounded up to a multiple of 512 bytes (round_size)
tr = translator("doctor")


@dataclass
class SegmentHolding:
    """One segment with free bytes at the peak: the place the fragmentation is."""
    number: int                  # "seg N" in the block map
    address: int
    size: int
    pool: str                    # "small" or "large"
    stream: int
    blocks: int
    allocated: int               # bytes in allocated blocks
    free: int                    # bytes in free (cached) blocks
    pending: int                 # bytes freed but waiting for another stream
    largest_free: int


@dataclass
class LiveAllocation:
    address: int
    size: int                    # the block's size
    requested: int
    stream: int
    where: list                  # "file.py:line in function", innermost first


@dataclass
class OomFacts:
    event_index: int             # in the device's trace
    request: int                 # bytes asked for
    device_free: int             # what cudaMemGetInfo said was free
    allocated: int               # memory_allocated() at that moment
    reserved: int                # memory_reserved() at that moment
    usable: int                  # reserved + device_free: what this process could hold
    where: list
    pending: dict = field(default_factory=dict)    # stream -> bytes freed but waiting for it, at the error
    live: list = field(default_factory=list)       # LiveAllocation, largest first, at the error
    live_places: dict = field(default_factory=dict)   # (pool, stream) -> live bytes at the error


@dataclass
class Diagnosis:
    source: str
    snapshot: dict
    device: int
    devices: list                # every device with events: (index, events, peak reserved)
    config: str                  # PYTORCH_CUDA_ALLOC_CONF as recorded
    verified: bool
    verify_summary: dict
    events_replayed: int         # the events the verify replay reported (the facts below index them)
    allocated: list              # memory_allocated() after each event
    reserved: list               # memory_reserved() after each event
    peak_allocated: int
    peak_allocated_at: int
    peak_reserved: int
    peak_reserved_at: int
    holdings: list = field(default_factory=list)       # SegmentHolding, most free first
    by_pool: dict = field(default_factory=dict)        # pool -> free bytes at the peak
    by_stream: dict = field(default_factory=dict)      # stream -> {"free": , "pending": , "allocated": }
    largest: list = field(default_factory=list)        # LiveAllocation, largest first
    oom: Optional[OomFacts] = None       # the first out-of-memory error of the trace
    oom_count: int = 0
    pending_max: int = 0                 # most bytes ever freed but waiting for other streams
    pending_max_at: int = -1
    readings: dict = field(default_factory=dict)         # how the verify replay read the program
    user_empty_caches: list = field(default_factory=list)   # (DeviceReplay.readings / user_empty_caches)
    program: Any = None                  # the program's actions (trace/whatif.py), once whatif_run read them
    profile: str = "h100-80gb"           # the simulated GPU every replay runs on (device/sizing.py)
    profile_note: str = ""               # one line when it was sized up for this snapshot
    live_places: dict = field(default_factory=dict)    # (pool, stream) -> live bytes at the reserved peak
    judgement: Any = None                # shortage or fragmentation (shortage.py), once the doctor judged it
    start_reserved: int = 0              # memory_reserved() when recording began (the rebuilt start state)
    start_allocated: int = 0             # memory_allocated() then
    peak_at_start: bool = False          # the reserved peak is the start state, before event 0
    recording: Any = None                # the Recording it was read from (trace/recording.py), loaded once
    first_event: int = 0                 # the trace event the facts start at
    frames: Any = None                   # the drawing side's frames (report.frames_of); no fact reads them

    @property
    def unallocated_at_peak(self) -> int:
        return self.peak_reserved - self.allocated_at_peak

    @property
    def allocated_at_peak(self) -> int:
        if self.peak_at_start:
            return self.start_allocated
        return self.allocated[self.peak_reserved_at] if self.allocated else 0

    @property
    def reserved_at_live_peak(self) -> int:
        """memory_reserved() where the live tensors peaked (the start state's, when they peaked there)."""
        if self.peak_allocated_at < 0:
            return self.start_reserved
        return self.reserved[self.peak_allocated_at] if self.reserved else 0

    @property
    def live_need(self) -> int:
        """Bytes live at once at the worst moment, counting the request that failed."""
        need = self.peak_allocated
        if self.oom is not None:
            request = -(-self.oom.request // ROUND) * ROUND
            need = max(need, self.oom.allocated + request)
        return need

    @property
    def pending_at_peak(self) -> int:
        return sum(v["pending"] for v in self.by_stream.values())


def whatif_run(diag: "Diagnosis", profile: str = "h100-80gb"):
    """What the anchored what-ifs replay: this device's trace, its program, the recorded curve."""
    from ..trace.whatif import program_of
    from .remedies import Run
    recording = diag.recording if diag.recording is not None else load_recording(diag.snapshot, diag.source)
    dev = recording.device(diag.device)
    # The events the verify replay walked (the frames and readings index them): the file's own
    # entries, 'snapshot' entries set aside.
    events, finals = dev.events, dev.segments
    diag.program = program_of(events, diag.readings, diag.user_empty_caches, diag.reserved)
    diag.program.start = dev.start_state()       # rebuilt once, the same the verify replay used
    diag.program.recording = dev
    return Run(events, finals, diag.program, diag.reserved,
               diag.device, profile)


def device_snapshot(snapshot: dict, device: int) -> dict:
    """The snapshot restricted to one device (its trace and segments), for per-device replays."""
    traces = snapshot.get("device_traces", [])
    only = [[] for _ in traces]
    only[device] = traces[device]
    return dict(snapshot, device_traces=only,
                segments=[s for s in snapshot.get("segments", []) if s.get("device", 0) == device])


def _focus_device(traces: list) -> int:
    """The device the doctor looks at (``traces``: each device's events): the one that ran out of
    memory, else the busiest."""
    for i, events in enumerate(traces):
        if any(e.get("action") == "oom" for e in events):
            return i
    busiest = max(range(len(traces)), key=lambda i: len(traces[i]), default=None)
    if busiest is None or not traces[busiest]:
        raise ValueError(tr("the snapshot has no trace events: record it with "
                            "torch.cuda.memory._record_memory_history() before the run, then dump it"))
    return busiest


def python_frames(frames: Optional[list], keep: int = 3) -> list:
    """The innermost Python frames of a recorded stack, as 'file.py:line in function'.

    PyTorch records C++ and Python frames together; the ones a user recognises are the
    ``.py`` files, and their own code before the library's.
    """
    return [tr("{file}:{line} in {function}", file=f["filename"].rsplit("/", 1)[-1], line=f.get("line", 0),
               function=f.get("name", "?")) for f in chosen_frames(frames, keep)]


def chosen_frames(frames: Optional[list], keep: int = 3) -> list:
    """The recorded frames ``python_frames`` words: the ``.py`` ones, the user's own before the library's."""
    py = [f for f in frames or () if str(f.get("filename", "")).endswith(".py")]
    own = [f for f in py if "site-packages" not in f["filename"] and "/torch/" not in f["filename"]]
    return (own or py)[:keep]


def diagnose(snapshot: Any, device: Optional[int] = None, profile: str = "h100-80gb",
             device_memory: Optional[int] = None) -> Diagnosis:
    """Replay ``snapshot`` (a Recording, or a path, bytes, a dict...) at PyTorch's addresses
    and read the facts off it.

    The replay runs on ``profile``, sized up when the trace held more than it, or when
    ``device_memory`` (bytes, the GPU asked about) is larger than it (device/sizing.py).
    """
    recording = load_recording(snapshot)          # checked once; a Recording comes back as it is
    source, snapshot = recording.source, recording.snapshot
    # 'snapshot' entries are looks, not events (trace/device_traces.py): a device with only those has none.
    traces = [recording.device(i).events for i in range(len(snapshot.get("device_traces", [])))]  # parsed once
    if device is None:
        device = _focus_device(traces)
    if not 0 <= device < len(traces) or not traces[device]:
        raise ValueError(tr("device {device} has no trace events in this snapshot", device=device))
    profile, profile_note = profile_for_snapshot(device_snapshot(snapshot, device), device, profile, traces[device],
                                                 device_memory)
    # One replay at PyTorch's addresses (the replay engine): its counters after each event are
    # the totals, and finishing it (the final-state comparison) is the verification.
    facts = replay_facts(recording, device, profile)
    verify, allocated, reserved, actions = facts["verify"], facts["allocated"], facts["reserved"], facts["actions"]
    first_event = facts["first_event"]
    summary = verify.to_json()
    totals = allocated
    # The peak is read where a user call finished (a malloc's segment_alloc comes a moment
    # before its alloc: in between, the new segment would count as unallocated).
    calls = [i for i, a in enumerate(actions) if a in CALL_ACTIONS] or list(range(len(totals)))
    peak_reserved_at = max(calls, key=reserved.__getitem__)
    peak_allocated_at = max(calls, key=allocated.__getitem__)
    devices = []
    for i, events in enumerate(traces):
        if events:
            devices.append({"device": i, "events": len(events)})
    config = recording.config          # the recorded PYTORCH_CUDA_ALLOC_CONF (or torch_npu's, npu_detect.py)
    diag = Diagnosis(source=source, snapshot=snapshot, device=device, devices=devices, config=config,
                     verified=verify.perfect, verify_summary=summary, events_replayed=facts["events"],
                     allocated=allocated, reserved=reserved,
                     peak_allocated=allocated[peak_allocated_at], peak_allocated_at=peak_allocated_at,
                     peak_reserved=reserved[peak_reserved_at], peak_reserved_at=peak_reserved_at,
                     profile=profile, profile_note=profile_note, recording=recording, first_event=first_event)
    mine = next((r for r in verify.devices if r.device == device), None)
    if mine is not None:
        diag.readings, diag.user_empty_caches = dict(mine.readings), list(mine.user_empty_caches)
    events = traces[device]
    start = start_segments(recording.device(device).start_state())
    diag.start_reserved = sum(seg["total_size"] for seg in start)
    diag.start_allocated = sum(b["size"] for seg in start for b in seg["blocks"] if b["state"] == "active_allocated")
    segment_ids = facts["segment_ids"]()
    if diag.start_reserved > diag.peak_reserved:
        # The most ever reserved is what was held when recording began (an empty_cache or a release
        # follows): the peak is read there, where it happened, not at the highest event after it.
        diag.peak_at_start, diag.peak_reserved = True, diag.start_reserved
        at_peak = start
        _where_memory_sits(diag, start, {seg["address"]: i for i, seg in enumerate(start)})
        diag.largest = _largest_live(start, events, -1)
    else:
        at_peak = facts["state_at"](peak_reserved_at)
        _where_memory_sits(diag, at_peak, segment_ids)
        diag.largest = _largest_live(at_peak, events, first_event + peak_reserved_at)
    if diag.start_allocated > diag.peak_allocated:
        diag.peak_allocated, diag.peak_allocated_at = diag.start_allocated, -1      # -1: before event 0
    diag.live_places = live_places(at_peak)
    diag.oom = _oom_facts(events, first_event, allocated, reserved)
    if diag.oom is not None:
        at = min(max(diag.oom.event_index - first_event, 0), len(reserved) - 1)
        state = facts["state_at"](at)      # the replay engine's state there, not a frames replay
        diag.oom.pending = pending_by_stream(state)
        diag.oom.live = _largest_live(state, events, diag.oom.event_index)
        diag.oom.live_places = live_places(state)
    diag.oom_count = sum(1 for e in events if e.get("action") == "oom")
    # Freed blocks still waiting for another stream's work (record_stream) are active but not allocated.
    pending = facts["pending"]
    if pending and max(pending) > 0:
        diag.pending_max_at = max(range(len(pending)), key=pending.__getitem__)
        diag.pending_max = pending[diag.pending_max_at]
    return diag


def _where_memory_sits(diag: Diagnosis, segments: list, ids: dict) -> None:
    by_pool = {"small": 0, "large": 0}
    by_stream: dict = {}
    holdings = []
    for seg in segments:
        pool = seg.get("segment_type") or ("small" if seg["total_size"] == SMALL_SEGMENT else "large")
        sizes = {"active_allocated": 0, "active_pending_free": 0, "inactive": 0}
        largest_free = 0
        for block in seg["blocks"]:
            sizes[block["state"]] = sizes.get(block["state"], 0) + block["size"]
            if block["state"] == "inactive":
                largest_free = max(largest_free, block["size"])
        stream = seg.get("stream", 0)
        per = by_stream.setdefault(stream, {"free": 0, "pending": 0, "allocated": 0, "segments": 0})
        per["free"] += sizes["inactive"]
        per["pending"] += sizes["active_pending_free"]
        per["allocated"] += sizes["active_allocated"]
        per["segments"] += 1
        by_pool[pool] = by_pool.get(pool, 0) + sizes["inactive"] + sizes["active_pending_free"]
        if sizes["inactive"] or sizes["active_pending_free"]:
            holdings.append(SegmentHolding(ids.get(seg["address"], -1), seg["address"], seg["total_size"], pool,
                                           stream, len(seg["blocks"]), sizes["active_allocated"],
                                           sizes["inactive"], sizes["active_pending_free"], largest_free))
    holdings.sort(key=lambda h: -(h.free + h.pending))
    diag.holdings, diag.by_pool, diag.by_stream = holdings, by_pool, by_stream


def start_segments(state) -> list:
    """The rebuilt state at the first event (trace/rebuild.py's InitialState) as snapshot segments:
    each segment's live blocks, and the bytes between them as free blocks."""
    out = []
    for seg in state.segments:
        blocks, at = [], seg.address
        for address, size, requested in sorted(seg.live_blocks):
            if address > at:
                blocks.append({"address": at, "size": address - at, "state": "inactive"})
            blocks.append({"address": address, "size": size, "requested_size": requested,
                           "state": "active_allocated"})
            at = address + size
        if at < seg.address + seg.size:
            blocks.append({"address": at, "size": seg.address + seg.size - at, "state": "inactive"})
        out.append({"address": seg.address, "total_size": seg.size, "stream": seg.stream,
                    "segment_type": "small" if seg.small else "large", "blocks": blocks})
    return out + list(state.expandable)


def pending_by_stream(segments: list) -> dict:
    """Bytes freed but waiting for other streams' work (``active_pending_free``), by the segment's stream."""
    out: dict = {}
    for seg in segments:
        for block in seg["blocks"]:
            if block["state"] == "active_pending_free":
                out[seg.get("stream", 0)] = out.get(seg.get("stream", 0), 0) + block["size"]
    return out


def live_places(segments: list) -> dict:
    """Live bytes by (pool, stream): where the memory a shortage must cut lives."""
    out: dict = {}
    for seg in segments:
        pool = seg.get("segment_type") or ("small" if seg["total_size"] == SMALL_SEGMENT else "large")
        live = sum(b["size"] for b in seg["blocks"] if b["state"] == "active_allocated")
        if live:
            key = (pool, seg.get("stream", 0))
            out[key] = out.get(key, 0) + live
    return out


def _largest_live(segments: list, events: list, upto: int, keep: int = 5) -> list:
    """The largest allocated blocks at event ``upto``, with where in Python they were allocated."""
    blocks = [(b, s.get("stream", 0)) for s in segments for b in s["blocks"] if b["state"] == "active_allocated"]
    blocks.sort(key=lambda bs: -bs[0]["size"])
    wanted = {b["address"]: None for b, _ in blocks[:keep]}
    for e in events[:upto + 1]:         # the latest alloc at each address is the live one
        if e.get("action") == "alloc" and e.get("addr") in wanted:
            wanted[e["addr"]] = e
    out = []
    for block, stream in blocks[:keep]:
        alloc = wanted[block["address"]]
        out.append(LiveAllocation(block["address"], block["size"], block.get("requested_size", 0), stream,
                                  python_frames(alloc.get("frames") if alloc else None)))
    return out


def _oom_facts(events: list, first_event: int, allocated: list, reserved: list) -> Optional[OomFacts]:
    index = next((i for i, e in enumerate(events) if e.get("action") == "oom"), None)
    if index is None:
        return None
    e = events[index]
    at = index - first_event
    at = min(max(at, 0), len(reserved) - 1)
    free = int(e.get("device_free", e.get("addr", 0)))
    return OomFacts(event_index=index, request=int(e.get("size", 0)), device_free=free,
                    allocated=allocated[at], reserved=reserved[at], usable=reserved[at] + free,
                    where=python_frames(e.get("frames")))


def reproduced_line(summary: dict, verified: bool, words: DeviceWords = CUDA, course: bool = False) -> str:
    """The verification in one line; a trace with no allocation to compare says so (never "0/0").

    ``course``: the run is the course's own (provenance.py), so its addresses are the recorded ones,
    not PyTorch's: a sentence of its own in the catalogue, never the PyTorch one rewritten."""
    answer = tr("yes") if verified else tr("NO")
    equal = summary.get("final_state_equal")
    equal = tr("True") if equal is True else tr("False") if equal is False else equal
    if not summary.get("allocs"):
        return tr("Reproduced: {answer} -- the trace has no allocation to compare address by address; final state "
                  "equal: {equal}", answer=answer, equal=equal)
    pct = percent_of(summary["allocs_exact"], summary["allocs"])
    if course:
        return tr("Reproduced: {answer} -- {exact}/{allocs} allocations at the recorded address ({pct}%), final "
                  "state equal: {equal}", answer=answer, exact=f"{summary['allocs_exact']:,}",
                  allocs=f"{summary['allocs']:,}", pct=pct, equal=equal)
    return tr("Reproduced: {answer} -- {exact}/{allocs} allocations at {library}'s address ({pct}%), final state "
              "equal: {equal}", answer=answer, exact=f"{summary['allocs_exact']:,}", allocs=f"{summary['allocs']:,}",
              pct=pct, equal=equal, library=words.library)
