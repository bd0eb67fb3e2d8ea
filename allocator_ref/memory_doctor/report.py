"""The doctor's answer: a verdict from the replays, and the findings in plain words.

:class:`DoctorReport` holds the :class:`~allocator_ref.memory_doctor.diagnosis.Diagnosis` (what
happened, read off a verified replay) and the
:class:`~allocator_ref.memory_doctor.remedies.Remedies` (what each change would have done,
each replayed).  Its verdict is computed from those numbers only:

* the replay does not reproduce PyTorch -> no advice (the numbers would not be PyTorch's);
* no target memory (no OOM, no ``--device-memory``) -> the run fit where it ran; the
  remedy that lowers peak reserved the most is shown, not prescribed;
* the recorded settings fit the target -> nothing to change;
* some remedy fits -> the smallest such change, as the exact ``PYTORCH_CUDA_ALLOC_CONF`` line;
* none fits -> only less live memory helps, and by how much at least.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from ..viz.sizes import format_bytes
from .diagnosis import Diagnosis, reproduced_line
from .capacity import Capacity, capacity_words
from .remedies import ASYNC_COSTS, ASYNC_PREDICTION, Remedies, Trial
from .shortage import MATERIAL_WORDS, PROGRAM_REMEDIES, RULE, judge_request, pending_words



@dataclass
class Verdict:
    kind: str                 # "unverified", "no-target", "fits", "remedy", "less-memory" (or "not-asked")
    text: str                 # one paragraph, plain words
    line: Optional[str]       # the exact PYTORCH_CUDA_ALLOC_CONF line to set, when there is one
    trial: Optional[Trial]    # the replay that proves it
    reduce_by: int = 0        # bytes of live memory to cut (kind == "less-memory")


@dataclass
class DoctorReport:
    diagnosis: Diagnosis
    remedies: Optional[Remedies]
    verdict: Verdict
    seconds: float = 0.0
    capacity: Optional[Capacity] = None     # what the run told about its GPU (capacity.py)

    # ------------------------------------------------------------ the verdict
    @staticmethod
    def decide(diag: Diagnosis, remedies: Optional[Remedies]) -> Verdict:
        if diag.verified and remedies is None:
            return Verdict("not-asked", "Remedies were not replayed (remedies=False): the findings below are the "
                           "whole answer.", None, None)
        if not diag.verified or remedies is None:
            div = diag.verify_summary.get("first_divergence")
            where = f" (first difference at trace event {div['index']})" if div else ""
            return Verdict("unverified", "The reference allocator does not reproduce PyTorch's decisions on this "
                           f"trace{where}, so its what-ifs would not be PyTorch's: no advice is given. "
                           "Run `python -m allocator_ref replay SNAPSHOT --verify` for the details.", None, None)
        if not remedies.reproduced and remedies.reproduction.skipped:
            return Verdict("whatif-unverified", f"The \"as recorded\" what-if replay could not run "
                           f"({remedies.reproduction.skipped}), so no setting is ranked.", None, remedies.reproduction)
        if not remedies.reproduced:
            at, theirs, ours = remedies.reproduction.mismatch
            return Verdict("whatif-unverified", "The \"as recorded\" what-if replay does not reproduce the run: "
                           f"after trace event {at:,} PyTorch had {format_bytes(theirs)} reserved, the replay "
                           f"{format_bytes(ours)} ({_signed(ours - theirs)}). Its what-ifs would start from a run "
                           "that did not happen, so no setting is ranked.", None, remedies.reproduction)
        recorded = remedies.recorded
        if remedies.start_does_not_fit:
            return Verdict("start-does-not-fit", f"Does not fit before the first event: "
                           f"{format_bytes(remedies.start_held)} held ({format_bytes(remedies.start_live)} of it live "
                           f"tensors) when recording began, against {format_bytes(remedies.target)} usable. No setting "
                           "changes what was already held; the part of the run before the recording decides it "
                           "(record from the start of the run to ask about it).", None, None)
        judged = diag.judgement
        if judged is not None and judged.shortage:
            return _shortage_verdict(diag, remedies, judged)
        if remedies.target is None:
            return _no_target_verdict(remedies)
        if recorded.fits:
            text = (f"As recorded, the run fits in {format_bytes(remedies.target)} (replayed: peak reserved "
                    f"{format_bytes(recorded.peak_reserved)}, no out-of-memory)")
            better = remedies.fewer_retries
            if not recorded.alloc_retries:
                return Verdict("fits", text + ": nothing to change.", None, recorded)
            text += (f", but only by flushing its cache {_times(recorded.alloc_retries)} on retry "
                     f"(num_alloc_retries: each frees every cached segment it can and synchronizes the device; "
                     f"{recorded.device_calls:,} device calls, {recorded.device_call_ms:,.1f} ms of them, simulated).")
            if better is None:
                return Verdict("fits", text + " No single setting tried fits with fewer flushes.", None, recorded)
            return Verdict("fewer-retries", text + f" `{better.line}` fits {_flushing(better.alloc_retries)} "
                           f"(peak reserved {format_bytes(better.peak_reserved)}, {better.device_calls:,} device "
                           f"calls){_prediction(better)}{_tradeoff(better, recorded)}.", better.line, better)
        chosen = remedies.recommended
        if chosen is not None:
            return Verdict("remedy", f"Set `{chosen.line}`. Replayed on the same program it fits in "
                           f"{format_bytes(remedies.target)}: peak reserved {format_bytes(chosen.peak_reserved)} "
                           f"(as recorded: {format_bytes(recorded.peak_reserved)}, with {recorded.ooms} "
                           f"out-of-memory error{'s' if recorded.ooms != 1 else ''}), fragmentation at that peak "
                           f"{format_bytes(chosen.fragmentation)}, {chosen.device_calls:,} device calls (as "
                           f"recorded: {recorded.device_calls:,}), flushing its cache on retry {_times(chosen.alloc_retries)}. "
                           f"It is the smallest change that fits{_prediction(chosen)}{_tradeoff(chosen, recorded)}.",
                           chosen.line, chosen)
        need = diag.live_need
        short = max(0, need - remedies.target)
        extra = remedies.extra_needed or short
        why = (f"The live tensors alone need {format_bytes(need)} at their peak"
               + (" (counting the request that failed)" if diag.oom else "")
               + (f", {format_bytes(short)} more than the device has." if short else
                  f", which is within the device, but no setting tried packs them into it."))
        return Verdict("less-memory", f"No allocator setting fits: every replay runs out of memory in "
                       f"{format_bytes(remedies.target)}. {why} Only less live memory helps (a smaller batch or "
                       "sequence, activation checkpointing, dropping references sooner), or a bigger GPU: replays "
                       f"of the recorded settings fit once they have {format_bytes(extra)} more, so cut about that "
                       f"much{f' (and at least {format_bytes(short)})' if short else ''}.",
                       None, None, reduce_by=extra)

    # ------------------------------------------------------------ words
    def text(self) -> str:
        return "\n".join(self.lines()) + "\n"

    def lines(self) -> list[str]:
        d, r, v = self.diagnosis, self.remedies, self.verdict
        j = d.verify_summary
        raw = len((d.snapshot.get("device_traces") or [[]] * (d.device + 1))[d.device] or ())
        extra = raw - len(d.frames)
        counted = f"{len(d.frames):,} events" + (f" of the trace's {raw:,} entries ({extra:,} 'snapshot' markers or "
                                                 "other entries that change nothing, left out)" if extra > 0 else "")
        out = [f"Memory doctor: {d.source}, device {d.device} "
               f"({counted}; simulated replays of PyTorch's recorded decisions)", ""]
        out.append(reproduced_line(j, d.verified))
        if d.profile_note:
            out.append(f"Simulated GPU: {d.profile_note}")
        out += ["", "VERDICT", "  " + v.text]
        if v.line:
            out += ["", "  " + v.line]
        out += ["", "PEAKS"]
        out.append(f"  live tensors (memory_allocated) peaked at {format_bytes(d.peak_allocated)} "
                   f"(event {d.peak_allocated_at:,})")
        out.append(f"  reserved (memory_reserved) peaked at {format_bytes(d.peak_reserved)} (event {d.peak_reserved_at:,}); "
                   f"at that moment {format_bytes(d.allocated_at_peak)} was allocated and "
                   f"{format_bytes(d.unallocated_at_peak)} reserved but unallocated")
        if r is not None:
            if r.target is not None:
                out.append(f"  the device: {format_bytes(r.target)} usable by the allocator ({r.target_from})")
            else:
                out.append(f"  the device: {r.target_from}")
            if self.capacity is not None and self.capacity.known and r.target_from != capacity_line(self.capacity):
                out.append(f"  the recorded GPU: {capacity_line(self.capacity)}")
            out.append(f"  at the first event {format_bytes(r.start_held)} was already held in segments "
                       f"({format_bytes(r.start_live)} of it live tensors)" if r.start_held else
                       "  the trace starts from an empty allocator")
            base = r.reproduction
            program = d.program
            if program is not None and program.user_empty_caches:
                n = len(program.user_empty_caches)
                out.append(f"  the program called torch.cuda.empty_cache() {_times(n)} (releases that no malloc needed: "
                           "cudaMalloc could not have failed there, or the stack names empty_cache); replayed as calls")
            if base.alloc_retries:
                # PyTorch counts a retry in alloc_block(is_retry=True), so a request that still fails after its
                # flush counts too: say so, or "2" reads against the capacity line's "1 flush ... and 1 OOM".
                # Said only where the sum holds (an OOM inside a capture has no flush rung to count).
                failed = base.ooms
                served = (len(set(program.ladder_flushes) - set(program.ooms)) if program is not None
                          else None)
                counted = (f" (counting the {failed:,} request{'s' if failed != 1 else ''} that still ran out of "
                           f"memory after {'its' if failed == 1 else 'their'} flush)"
                           if failed and served is not None and served + failed == base.alloc_retries else "")
                out.append(f"  flushes on retry (num_alloc_retries): {base.alloc_retries:,}{counted}, each a release "
                           "of every cached segment it can plus a device-wide synchronize")
        if d.judgement is not None:
            out += ["", "SHORTAGE OR FRAGMENTATION", f"  {d.judgement.kind}: {d.judgement.words}",
                    f"  the rule: {RULE}", f"  materiality: {MATERIAL_WORDS}"]
        out += ["", "WHERE THE RESERVED-BUT-UNALLOCATED MEMORY SITS AT THE PEAK"]
        out.append(f"  by pool: large {format_bytes(d.by_pool.get('large', 0))}, small "
                   f"{format_bytes(d.by_pool.get('small', 0))}")
        for h in d.holdings[:5]:
            out.append(f"  seg {h.number} ({h.pool} pool, stream {h.stream}, {format_bytes(h.size)}, "
                       f"{h.blocks} block{'s' if h.blocks != 1 else ''}): {format_bytes(h.free)} free"
                       + (f", largest free block {format_bytes(h.largest_free)}" if h.blocks > 1 else ", wholly free")
                       + (f", {format_bytes(h.pending)} pending on stream {h.stream} (freed, waiting for another "
                          "stream's work)" if h.pending else "")
                       + f"; {format_bytes(h.allocated)} allocated")
        if len(d.holdings) > 5:
            rest = sum(h.free + h.pending for h in d.holdings[5:])
            out.append(f"  ... and {len(d.holdings) - 5} more segments holding {format_bytes(rest)}")
        if "expandable_segments:true" in d.config.replace(" ", "").lower():
            out.append("  this run uses expandable segments: memory is mapped page by page (20 MiB pages in the large "
                       "pool, 2 MiB in the small one), so reserved-but-unallocated "
                       "bytes are mostly the unused parts of partly used pages (and whole free pages not yet unmapped), "
                       "not stranded blocks")
        out += ["", "LARGEST LIVE ALLOCATIONS AT THE PEAK"]
        for a in d.largest:
            where = " <- ".join(a.where) if a.where else "(no Python frames recorded)"
            out.append(f"  {format_bytes(a.size)} at {a.address:#x} (stream {a.stream}): {where}")
        out += ["", "STREAMS"]
        pending = {stream: per["pending"] for stream, per in d.by_stream.items() if per.get("pending")}
        out.append(f"  {len(d.by_stream)} stream{'s' if len(d.by_stream) != 1 else ''} own segments at the peak; "
                   + (f"{pending_words(pending)}: freed but held for other streams' work (record_stream events not "
                      "yet complete)" if pending else "no freed block waits for another stream's work there"))
        if d.pending_max:
            out.append(f"  over the whole run, at most {format_bytes(d.pending_max)} was held that way "
                       f"(event {d.pending_max_at:,}): memory record_stream kept from being reused")
        else:
            out.append("  over the whole run, no freed block ever waited for another stream")
        if len(d.by_stream) > 1:
            for stream, per in sorted(d.by_stream.items(), key=lambda kv: -kv[1]["free"])[:6]:
                whole = sum(h.free for h in d.holdings if h.stream == stream and h.allocated == 0 and not h.pending)
                out.append(f"  stream {stream}: {per['segments']} segments, {format_bytes(per['free'])} cached free "
                           f"(usable only by requests on that stream), {format_bytes(per['allocated'])} allocated"
                           + (f", {format_bytes(per['pending'])} pending on stream {stream} (freed, waiting for "
                              "another stream's work)" if per.get("pending") else "")
                           + (f"; {format_bytes(whole)} of it in wholly free segments, which torch.cuda.empty_cache() "
                              "(or a flush on retry) would give back" if whole else
                              "; none of it in wholly free segments, so only freeing that stream's tensors releases it"
                              if per["free"] else ""))
        if d.oom is not None:
            title = "THE OUT-OF-MEMORY ERROR, LINE BY LINE"
            if d.oom_count > 1:
                title += f" (the first of {d.oom_count} in the trace)"
            out += ["", title] + ["  " + line for line in oom_lines(d)]
        if r is not None:
            out += ["", f"REMEDIES, EACH REPLAYED FROM THE STATE AT THE FIRST EVENT ({r.replays} replays"
                    + (f", target {format_bytes(r.target)})" if r.target is not None else ", uncapped)")]
            base = r.reproduction
            if r.start_held:
                out.append(f"  a setting replayed here applies from the first recorded event on: the "
                           f"{format_bytes(r.start_held)} of segments held then are kept as PyTorch had them")
            if base.skipped:
                out.append(f"  the \"as recorded\" replay could not run ({base.skipped}); nothing below is ranked")
            elif base.mismatch is None:
                out.append(f"  the \"as recorded\" replay reproduces the recorded reserved curve at every program "
                           f"action (peak {format_bytes(base.peak_reserved)}, as recorded)")
            else:
                at, theirs, ours = base.mismatch
                out.append(f"  the \"as recorded\" replay does NOT reproduce the run: after trace event {at:,} "
                           f"{format_bytes(theirs)} was reserved, the replay has {format_bytes(ours)} "
                           f"({_signed(ours - theirs)}); nothing below is ranked")
            out.append(f"  {'change':34} {'peak reserved':>14} {'frag @ peak':>12} {'device calls':>13} "
                       f"{'retries':>8}  fits")
            for t in r.trials:
                name = {"recorded": "(as recorded)", "recorded-on-target": "(recorded settings, target)"}.get(
                    t.kind, t.change)
                if t.skipped:
                    out.append(f"  {name:34} skipped: {t.skipped}")
                    continue
                fits = "-" if t.fits is None else ("yes" if t.fits else f"NO ({t.ooms} OOM)")
                out.append(f"  {name:34} {format_bytes(t.peak_reserved):>14} {format_bytes(t.fragmentation):>12} "
                           f"{t.device_calls:>13,} {t.alloc_retries:>8,}  {fits}"
                           + ("  (model prediction)" if t.prediction else ""))
            if any(t.prediction and not t.skipped for t in r.trials):
                out.append(f"  backend:cudaMallocAsync is {ASYNC_PREDICTION}; it ranks after any knob with the same "
                           f"result; the switch costs: {'; '.join(ASYNC_COSTS)}")
        if len(d.devices) > 1:
            others = ", ".join(f"device {x['device']} ({x['events']:,} events)" for x in d.devices if x["device"] != d.device)
            out += ["", f"Other devices in the snapshot: {others}; ask with --device N (device=N)."]
        return out

    # ------------------------------------------------------------ machine-readable
    def to_json(self) -> dict:
        d, r, v = self.diagnosis, self.remedies, self.verdict
        return {
            "source": d.source, "device": d.device, "events": len(d.frames), "verified": d.verified,
            "allocs": d.verify_summary["allocs"], "allocs_exact": d.verify_summary["allocs_exact"],
            "verdict": v.kind, "verdict_text": v.text, "recommended_line": v.line,
            "reduce_live_memory_by": v.reduce_by,
            "extra_memory_needed": None if r is None else r.extra_needed,
            "oom_count": d.oom_count,
            "judgement": None if d.judgement is None else d.judgement.to_json(),
            "simulated_gpu": d.profile, "simulated_gpu_note": d.profile_note or None,
            "peak_allocated": d.peak_allocated, "peak_reserved": d.peak_reserved,
            "unallocated_at_peak": d.unallocated_at_peak, "pending_free_at_peak": d.pending_at_peak,
            "pending_free_max": d.pending_max, "pending_free_max_at": d.pending_max_at,
            "by_pool": d.by_pool,
            "by_stream": {str(k): v2 for k, v2 in d.by_stream.items()},
            "segments_holding": [h.__dict__ for h in d.holdings[:20]],
            "largest_live": [a.__dict__ for a in d.largest],
            "oom": None if d.oom is None else dict(d.oom.__dict__, explained=oom_lines(d),
                                                   pending={str(k): b for k, b in d.oom.pending.items()},
                                                   live=[a.__dict__ for a in d.oom.live],
                                                   live_places=_places_json(d.oom.live_places)),
            "live_places_at_peak": _places_json(d.live_places),
            "target": None if r is None else r.target, "target_from": None if r is None else r.target_from,
            "replays": 0 if r is None else r.replays,
            "remedies": [] if r is None else [t.to_json() for t in r.trials],
            "reproduced": None if r is None else r.reproduced,
            "recorded_mismatch": None if r is None or r.reproduced else list(r.reproduction.mismatch),
            "num_alloc_retries": None if r is None else r.reproduction.alloc_retries,
            "start_held": None if r is None else r.start_held, "start_live": None if r is None else r.start_live,
            "capacity": None if self.capacity is None else self.capacity.to_json(),
            "devices": d.devices,
            "seconds": self.seconds,
        }

    # ------------------------------------------------------------ pictures
    def html(self, path=None) -> str:
        """The self-contained HTML report (written to ``path`` when given)."""
        from .html_report import render_html
        page = render_html(self)
        if path is not None:
            from pathlib import Path
            Path(path).write_text(page, encoding="utf-8")
        return page

    def player(self, **kwargs):
        """The whole trace in the block-map player (a notebook widget)."""
        from ..viz.player import TracePlayer
        kwargs.setdefault("title", f"{self.diagnosis.source}, device {self.diagnosis.device}")
        return TracePlayer(self.diagnosis.frames, **kwargs)

    def __str__(self) -> str:
        return self.text()

    def _repr_html_(self) -> str:
        return "<pre>" + _escape(self.text()) + "</pre>"


def _no_target_verdict(remedies: Remedies) -> Verdict:
    """No GPU to fit in: nothing to fix; a setting is shown only when its gain is material."""
    recorded = remedies.recorded
    head = ("The run did not run out of memory and did not flush its cache on retry, so nothing tells the GPU's "
            "size and there is nothing to fix; pass --device-memory GiB to ask whether it fits a smaller GPU.")
    best = remedies.best_material
    if best is not None:
        saving = recorded.peak_reserved - best.peak_reserved
        return Verdict("no-target", head + f" The replays show `{best.line}` would lower peak reserved to "
                       f"{format_bytes(best.peak_reserved)} ({format_bytes(saving)} less, "
                       f"{100 * saving / recorded.peak_reserved:.1f}%; {_rests_on(best)}){_prediction(best)}. "
                       f"It is offered because {MATERIAL_WORDS}.", None, best)
    lowest = remedies.lowest
    saving = recorded.peak_reserved - lowest.peak_reserved
    if recorded.peak_at < 0 and recorded.start_held and saving <= 0:
        tail = (f" None of the remedies lowers peak reserved: the peak is the {format_bytes(recorded.start_held)} "
                "already held in segments when recording began, which no setting replayed from the first event can "
                "give back.")
    elif saving > 0:
        tail = (f" No setting is worth making: the largest saving replayed, `{lowest.change}`, is "
                f"{format_bytes(saving)} ({100 * saving / recorded.peak_reserved:.1f}% of peak reserved), and "
                f"{MATERIAL_WORDS}.")
    else:
        tail = " None of the remedies lowers peak reserved."
    return Verdict("no-target", head + tail, None, None)


def _shortage_verdict(diag: Diagnosis, remedies: Remedies, judged) -> Verdict:
    """A shortage: no allocator setting, how much live memory must go, where it lives, what helps."""
    cut = judged.cut
    if remedies.extra_needed:
        cut = max(cut, remedies.extra_needed)
    fits = [t for t in remedies.knobs if t.fits]
    replayed = ("" if remedies.target is None else
                f" The replays agree: no setting tried fits in {format_bytes(remedies.target)}."
                if not fits else
                f" (One replay fits anyway, `{fits[0].change}`: it counts live memory differently at that moment; "
                "the rule above is the decision.)")
    if remedies.extra_needed:
        replayed += (f" Replays of the recorded settings fit once the GPU has {format_bytes(remedies.extra_needed)} "
                     "more, the fragmentation of the rest of the run counted.")
    live = diag.oom.live_places if diag.oom is not None and diag.oom.live_places else diag.live_places
    places = ", ".join(f"{format_bytes(b)} in the {pool} pool on stream {stream}"
                       for (pool, stream), b in sorted(live.items(), key=lambda kv: -kv[1])[:3])
    largest = diag.oom.live if diag.oom is not None and diag.oom.live else diag.largest
    biggest = "; ".join(f"{format_bytes(a.size)}" + (f" from {a.where[0]}" if a.where else "")
                        for a in largest[:3])
    text = (f"This is a shortage, not fragmentation: {judged.words}.{replayed} Plan to cut about "
            f"{format_bytes(cut)} of live memory. Where the live memory is: {places or 'not in the trace'}"
            + (f"; the largest live tensors: {biggest} (all of them under LARGEST LIVE ALLOCATIONS)" if biggest else "")
            + ". What helps is outside the allocator (changes to the program or the hardware, not settings): "
            + "; ".join(PROGRAM_REMEDIES) + ".")
    return Verdict("shortage", text, None, None, reduce_by=cut)


def _rests_on(t: Trial) -> str:
    """What a proposed setting's figure rests on."""
    return "replayed on the recorded requests" + (", on a model of the driver's pool" if t.prediction else "")


def _places_json(places: dict) -> list:
    return [{"pool": pool, "stream": stream, "live": b} for (pool, stream), b in places.items()]


def capacity_line(cap: Capacity) -> str:
    return capacity_words(cap)


def _signed(n: int) -> str:
    return ("+" if n >= 0 else "-") + format_bytes(abs(n))


def _flushing(n: int) -> str:
    return "without a single flush" if n == 0 else f"flushing {_times(n)}"


def _times(n: int) -> str:
    return "no time" if n == 0 else ("once" if n == 1 else f"{n:,} times")


def _prediction(t: Trial) -> str:
    if t.cap_note:
        return f" ({t.cap_note})"
    if not t.prediction:
        return ""
    return f" -- {t.prediction}; the switch costs: {'; '.join(t.costs)}"


# Why a remedy that fits may still fragment more or call the device more than the recorded run.
_WHY = {"expandable": "expandable segments map and unmap memory page by page (cuMemMap/cuMemUnmap; 20 MiB pages "
                      "in the large pool, 2 MiB in the small one: ExpandableSegment's segment size), so they make "
                      "more device calls, and free bytes inside a mapped page count as reserved",
        "max_split": "blocks above the limit are never split, so they are cached whole and released first "
                     "when memory runs short (release_available_cached_blocks), which costs cudaFree/cudaMalloc calls",
        "roundup": "rounding requests up to a power-of-two step leaves the rounded-off bytes unallocated in each block",
        "gc": "the garbage collector releases cached blocks early (cudaFree), so later requests cudaMalloc again",
        "async": "the driver's pool is modelled with its own chunking, so its calls and leftovers are the model's"}


def _tradeoff(t: Trial, recorded: Trial) -> str:
    worse = []
    if t.fragmentation > recorded.fragmentation:
        worse.append(f"more fragmentation at its peak ({format_bytes(t.fragmentation)} vs "
                     f"{format_bytes(recorded.fragmentation)})")
    if t.device_calls > recorded.device_calls:
        worse.append(f"more device calls ({t.device_calls:,} vs {recorded.device_calls:,})")
    if not worse:
        return ""
    return f". It has {' and '.join(worse)}: {_WHY.get(t.kind, 'the change trades them for a lower peak')}"


def _escape(text: str) -> str:
    from html import escape
    return escape(text)


def oom_lines(diag: Diagnosis) -> list[str]:
    """PyTorch's OOM message, clause by clause, with what each number means for this run."""
    o = diag.oom
    gap = o.reserved - o.allocated
    lines = [
        f"\"Tried to allocate {format_bytes(o.request)}\": the request that failed (trace event {o.event_index:,})"
        + (f", made at {' <- '.join(o.where)}" if o.where else "") + ".",
        f"\"... of which {format_bytes(o.device_free)} is free\": what cudaMemGetInfo reported after the allocator "
        "had already released every cached segment it could (the last rung of the retry ladder).",
        f"\"{format_bytes(o.allocated)} is allocated by PyTorch\": live tensors at that moment.",
        f"\"{format_bytes(gap)} is reserved by PyTorch but unallocated\": free blocks stuck in segments that still "
        "hold live tensors, so they could not be given back.",
    ]
    judged = judge_request(o.request, o.allocated, o.reserved, o.device_free, o.pending)
    if o.pending:
        lines.append(f"Of those unallocated bytes, {pending_words(o.pending)}: freed by the program but waiting for "
                     "another stream's work (record_stream), so not free yet.")
    lines.append(("A shortage" if judged.shortage else "Fragmentation") + f": {judged.words}"
                 + ("." if judged.shortage else "; see the remedies."))
    return lines
