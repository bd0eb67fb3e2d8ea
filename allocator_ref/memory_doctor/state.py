"""A snapshot with segments but no trace: the diagnosis of the state it holds.

An OOM observer's dump with history off (``torch.cuda.memory._snapshot()`` without
``_record_memory_history``) has ``segments`` and empty ``device_traces``: no requests to
replay, so nothing can be proven by replay.  What the state still says:

* where the reserved-but-unallocated bytes sit: by pool, by stream, by segment, and how
  many of them are in segments that still hold a live tensor (``release_cached_blocks``
  frees only wholly free segments, so those bytes cannot be given back);
* the largest free block (a request larger than it needs a new segment) against the
  request that failed, when the dump records it (an ``oom`` entry);
* blocks freed but waiting for other streams (``active_pending_free``: ``record_stream``);
* which setting might have helped, each marked unproven: without the requests, no replay
  can say whether it would have fitted.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from ..editions.language import language, speaking
from ..editions.messages import translator
from ..units import format_bytes
from .diagnosis import SegmentHolding, _where_memory_sits, pending_by_stream
from .remedies import MAX_SPLIT_SWEEP_MB, parse_conf
from .shortage import judge_state, material_words, pending_words, program_remedies, rule

tr = translator("doctor")


@dataclass
class StateDiagnosis:
    source: str
    device: int
    devices: list                 # every device with segments: {"device", "segments", "reserved"}
    config: str
    reserved: int
    allocated: int
    pending: int
    holdings: list = field(default_factory=list)      # SegmentHolding, most free first
    by_pool: dict = field(default_factory=dict)
    by_stream: dict = field(default_factory=dict)
    largest_free: int = 0
    stranded: int = 0             # free bytes in segments that also hold live (or pending) blocks
    releasable: int = 0           # free bytes in wholly free segments (empty_cache gives them back)
    request: Optional[int] = None     # the failed request, when the dump records it
    device_free: Optional[int] = None     # what the driver said was free at that failure, when recorded
    pending_by_stream: dict = field(default_factory=dict)   # stream -> bytes freed but waiting
    judgement: Any = None             # shortage.py's rule on the state
    hints: list = field(default_factory=list)          # (setting, why), each unproven
    usable: Optional[int] = None      # bytes the allocator could use (--device-memory less the context), if given
    trace_events: int = 0             # a trace of one event is read as a state: nothing to replay

    @property
    def unallocated(self) -> int:
        return self.reserved - self.allocated


def diagnose_state(snapshot: dict, source: str, device: Optional[int] = None,
                   usable: Optional[int] = None) -> StateDiagnosis:
    """What the segments of ``snapshot`` say; ``usable`` (bytes) is the GPU asked about, if any."""
    segments = snapshot.get("segments") or []
    per: dict = {}
    for s in segments:
        d = per.setdefault(s.get("device", 0), {"device": s.get("device", 0), "segments": 0, "reserved": 0})
        d["segments"] += 1
        d["reserved"] += s["total_size"]
    if device is None:
        device = max(per.values(), key=lambda d: d["reserved"])["device"]
    if device not in per:
        raise ValueError(tr("device {device} has no segments in this snapshot (devices with segments: {devices})",
                            device=device, devices=", ".join(str(d) for d in sorted(per))))
    mine = [s for s in segments if s.get("device", 0) == device]
    config = (snapshot.get("allocator_settings") or {}).get("PYTORCH_CUDA_ALLOC_CONF", "") or ""
    allocated = sum(b["size"] for s in mine for b in s["blocks"] if b["state"] == "active_allocated")
    pending = sum(b["size"] for s in mine for b in s["blocks"] if b["state"] == "active_pending_free")
    diag = StateDiagnosis(source, device, sorted(per.values(), key=lambda d: d["device"]), config,
                          sum(s["total_size"] for s in mine), allocated, pending)
    holder = _Holder()
    _where_memory_sits(holder, mine, {s["address"]: i for i, s in enumerate(sorted(mine, key=lambda s: s["address"]))})
    diag.holdings, diag.by_pool, diag.by_stream = holder.holdings, holder.by_pool, holder.by_stream
    diag.largest_free = max((b["size"] for s in mine for b in s["blocks"] if b["state"] == "inactive"), default=0)
    diag.releasable = sum(h.free for h in diag.holdings if h.allocated == 0 and h.pending == 0)
    diag.stranded = sum(h.free for h in diag.holdings) - diag.releasable
    oom = next((e for t in snapshot.get("device_traces") or () for e in t or () if e.get("action") == "oom"), None)
    diag.request = int(oom["size"]) if oom is not None else None
    if oom is not None and ("device_free" in oom or "addr" in oom):
        diag.device_free = int(oom.get("device_free", oom.get("addr", 0)))
    diag.pending_by_stream = pending_by_stream(mine)
    diag.usable = usable
    from ..trace.device_traces import device_events      # 'snapshot' entries are looks, not events
    diag.trace_events = max((len(device_events(snapshot, i)) for i in range(len(snapshot.get("device_traces") or ()))),
                            default=0)
    diag.judgement = judge_state(diag.reserved, diag.allocated, diag.pending_by_stream, diag.largest_free,
                                 diag.request, diag.device_free, usable)
    diag.hints = _hints(diag)
    return diag


class _Holder:
    """What ``_where_memory_sits`` fills in."""
    holdings: list
    by_pool: dict
    by_stream: dict


def max_split_for(request: Optional[int]) -> int:
    """A concrete N for ``max_split_size_mb:N``: the largest of the doctor's sweep at or below the failed
    request (so blocks of its size are never split for smaller requests), 512 when the request is unknown.
    PyTorch refuses N below 20 (``parseMaxSplitSize``)."""
    if request is None:
        return MAX_SPLIT_SWEEP_MB[0]
    mib = request / 2**20
    return next((n for n in MAX_SPLIT_SWEEP_MB if n <= mib), MAX_SPLIT_SWEEP_MB[-1])


def _hints(d: StateDiagnosis) -> list:
    """Settings worth trying, each unproven: none for a shortage (no setting serves it)."""
    if d.judgement is not None and d.judgement.shortage:
        return []
    conf = parse_conf(d.config)
    hints = []
    expandable = conf.get("expandable_segments", "").lower() == "true"
    if d.stranded and not expandable:
        hints.append(("expandable_segments:True", tr(
            "{size} is free inside segments that still hold live tensors; one growing segment per stream would let "
            "the next request reuse such gaps", size=format_bytes(d.stranded))))
    if d.stranded and "max_split_size_mb" not in conf:
        n = max_split_for(d.request)
        hints.append((f"max_split_size_mb:{n}", tr(
            "large free blocks split for smaller requests are what strands those bytes; blocks of {n} MiB or more "
            "would never be split", n=n)
            + (tr(" ({n} MiB: the largest step of the doctor's sweep at or below the failed request)", n=n)
               if d.request is not None else
               tr(" ({n} MiB: the doctor's first step; the dump does not say the failed request's size)", n=n))))
    if d.releasable:
        hints.append(("torch.cuda.empty_cache()", tr(
            "{size} sits in wholly free segments: a flush gives it back (the OOM path already does, so it matters "
            "for other processes)", size=format_bytes(d.releasable))))
    if d.pending:
        hints.append(("record_stream", tr(
            "{pending}: freed but waiting for another stream's work; synchronizing that stream sooner (or not "
            "recording it) releases it", pending=pending_words(d.pending_by_stream))))
    return hints


# What a trace would add, and how to record one (PyTorch 2.11: torch/cuda/memory.py).
def record_how() -> str:
    return tr("record a trace before the run: {record} (a ring buffer of that many events: without max_entries it "
              "grows without bound), then {dump} from an OOM observer: {observer}",
              record="torch.cuda.memory._record_memory_history(max_entries=100_000)",
              dump="torch.cuda.memory._dump_snapshot(\"oom.pickle\")",
              observer="torch._C._cuda_attach_out_of_memory_observer(lambda device, alloc, allowed, free: "
                       "torch.cuda.memory._dump_snapshot(\"oom.pickle\"))")


def needs_a_trace() -> tuple:
    return (tr("whether any setting would have fitted (each remedy is a replay of the recorded requests)"),
            tr("the request that failed and how much the driver still had free, unless the dump records them"),
            tr("the peaks of the run (a state is one moment, not the worst one)"),
            tr("the GPU's usable memory (read off flushes and OOMs in a trace)"))


def verdict_lines(d: StateDiagnosis) -> list:
    """The verdict of a state: what failed (if the dump says), the rule's reading, what waits on streams."""
    out = []
    if d.request is not None:
        fits = d.request <= d.largest_free
        out.append(tr("The request that failed asked for {request}; the largest free block was {largest}",
                      request=format_bytes(d.request), largest=format_bytes(d.largest_free))
                   + (tr(" -- large enough, so the state shown is not the one the request met.") if fits else
                      tr(", and all free bytes in the cache came to {free}.",
                         free=format_bytes(d.unallocated - d.pending))))
    else:
        out.append(tr("{unallocated} of {reserved} reserved is not allocated; the largest free block is {largest} "
                      "(a larger request needs a new segment). The dump does not record the request that failed.",
                      unallocated=format_bytes(d.unallocated), reserved=format_bytes(d.reserved),
                      largest=format_bytes(d.largest_free)))
    j = d.judgement
    if j is not None:
        out.append({"shortage": tr("A shortage: {words}.", words=j.words),
                    "fragmentation": tr("Fragmentation: {words}.", words=j.words),
                    "fits": tr("It fits: {words}.", words=j.words),
                    "no-failure": tr("No shortage is claimed: {words}.", words=j.words)}.get(
            j.kind, tr("Not decided (shortage or fragmentation): {words}.", words=j.words)))
        if j.shortage:
            out.append(tr("No allocator setting can help. What helps is outside the allocator (changes to the "
                          "program or the hardware): {remedies}.", remedies=tr("; ").join(program_remedies())))
    if d.pending:
        out.append(pending_remedy(d.pending_by_stream))
    return out


def pending_remedy(pending: dict) -> str:
    """Memory freed but waiting on other streams, with its remedy.

    A block freed after ``record_stream`` goes back to the cache only once the other stream's
    event completes: ``process_events`` at the next malloc, or ``synchronize_and_free_events``
    when a failing malloc flushes (PyTorch 2.11, c10/cuda/CUDACachingAllocator.cpp,
    ``DeviceCachingAllocator::release_cached_blocks``)."""
    return tr("{pending} (the segment's stream; the dump does not name the stream it waits for): freed by the "
              "program but still waiting for another stream's work (record_stream), so no request could reuse it "
              "at this moment. It comes back once that stream's work completes, or when a "
              "failing request flushes the cache (which first waits for every pending event). To need less of it: "
              "make the main stream wait for the side stream (wait_stream or an event) before the next large "
              "allocation, or free the tensor after the side-stream phase instead of calling record_stream.",
              pending=pending_words(pending))


def state_lines(d: StateDiagnosis) -> list:
    from .report import _pool
    head = (tr("Memory doctor: {source}, device {device} (a trace of a single event: nothing to replay, so it is read "
               "as a state and nothing below is proven)", source=d.source, device=d.device)
            if d.trace_events else
            tr("Memory doctor: {source}, device {device} (a state-only snapshot: segments but no trace events, so "
               "nothing is replayed and nothing below is proven)", source=d.source, device=d.device))
    out = [head, "", tr("VERDICT")] + ["  " + line for line in verdict_lines(d)]
    j = d.judgement
    out += ["", tr("SHORTAGE OR FRAGMENTATION"), tr("  the rule: {rule}", rule=rule()),
            tr("  materiality: {words}", words=material_words()),
            tr("  with no trace and no failed request in the dump, the rule claims no shortage: a state is one moment, "
               "and a full cache is what a healthy run looks like too; with --device-memory the live bytes are "
               "weighed against the GPU")]
    out += ["", tr("WHAT THIS DUMP CANNOT TELL (it has no trace)")]
    out += [f"  {x}" for x in needs_a_trace()]
    out.append(tr("  to know them, {how}", how=record_how()))
    out += ["", tr("WHERE THE RESERVED-BUT-UNALLOCATED MEMORY SITS")]
    out.append(tr("  by pool: large {large}, small {small}", large=format_bytes(d.by_pool.get("large", 0)),
                  small=format_bytes(d.by_pool.get("small", 0))))
    out.append(tr("  in segments that still hold live tensors: {stranded}; in wholly free segments: {releasable}; "
                  "freed but waiting for other streams: {pending}", stranded=format_bytes(d.stranded),
                  releasable=format_bytes(d.releasable), pending=format_bytes(d.pending)))
    for stream, per in sorted(d.by_stream.items(), key=lambda kv: -kv[1]["free"]):
        out.append(tr("  stream {stream}: {segments} segments, {free} cached free, {allocated} allocated",
                      stream=stream, segments=per["segments"], free=format_bytes(per["free"]),
                      allocated=format_bytes(per["allocated"]))
                   + (tr(", {size} pending on stream {stream} (freed, waiting for another stream's work)",
                         size=format_bytes(per["pending"]), stream=stream) if per.get("pending") else ""))
    for h in d.holdings[:5]:
        out.append(tr("  seg {number} ({pool} pool, stream {stream}, {size}): {free} free, largest free block "
                      "{largest}; {allocated} allocated", number=h.number, pool=_pool(h.pool), stream=h.stream,
                      size=format_bytes(h.size), free=format_bytes(h.free), largest=format_bytes(h.largest_free),
                      allocated=format_bytes(h.allocated))
                   + (tr("; {size} pending on stream {stream}", size=format_bytes(h.pending), stream=h.stream)
                      if h.pending else ""))
    out += ["", tr("SETTINGS THAT MIGHT HAVE HELPED (unproven without a trace)")]
    out += [f"  {setting}: {why}" for setting, why in d.hints] or [
        tr("  none: a shortage is not the allocator's to fix") if j is not None and j.shortage else
        tr("  none stands out in this state")]
    if len(d.devices) > 1:
        others = tr(", ").join(tr("device {device} ({n} segments)", device=x["device"], n=x["segments"])
                               for x in d.devices if x["device"] != d.device)
        out += ["", tr("Other devices in the snapshot: {others}; ask with --device N.", others=others)]
    return out


def state_json(d: StateDiagnosis) -> dict:
    return {"source": d.source, "device": d.device, "state_only": True, "verdict": "state-only",
            "verdict_text": " ".join(verdict_lines(d)), "trace_events": d.trace_events, "usable": d.usable,
            "pending_by_stream": {str(k): v for k, v in d.pending_by_stream.items()},
            "reserved": d.reserved, "allocated": d.allocated, "unallocated": d.unallocated, "pending_free": d.pending,
            "largest_free_block": d.largest_free, "stranded": d.stranded, "releasable": d.releasable,
            "failed_request": d.request, "by_pool": d.by_pool,
            "judgement": None if d.judgement is None else d.judgement.to_json(),
            "needs_a_trace": list(needs_a_trace()), "how_to_record": record_how(), "by_stream": {str(k): v for k, v in d.by_stream.items()},
            "segments_holding": [h.__dict__ for h in d.holdings[:20]],
            "hints": [{"setting": s, "why": w, "proven": False} for s, w in d.hints], "devices": d.devices,
            "remedies": []}


@dataclass
class StateReport:
    """The doctor's answer for a state-only snapshot (same text/json/str interface as DoctorReport)."""
    diagnosis: StateDiagnosis
    seconds: float = 0.0
    remedies: None = None
    capacity: None = None
    language: str = field(default_factory=language)     # the words of the whole report (report.py)

    @property
    def verdict(self):
        from .report import Verdict
        with speaking(self.language):      # the same sentences as the text's VERDICT and the JSON's verdict_text
            return Verdict("state-only", " ".join(verdict_lines(self.diagnosis)), None, None)

    def text(self) -> str:
        return "\n".join(self.lines()) + "\n"

    def lines(self) -> list:
        with speaking(self.language):
            return state_lines(self.diagnosis)

    def to_json(self) -> dict:
        with speaking(self.language):
            return dict(state_json(self.diagnosis), seconds=self.seconds)

    def __str__(self) -> str:
        return self.text()

    def html(self, path=None) -> str:
        from .html_report import text_page        # lazily: it draws with matplotlib
        with speaking(self.language):
            title = tr("memory doctor")
        return text_page(title, self.text(), self.language, path)


__all__ = ["StateDiagnosis", "StateReport", "diagnose_state", "SegmentHolding"]
