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

The words are in the reader's language (``editions/language.py``: ``--lang zh``, a Chinese edition
folder, a Chinese locale); a report keeps the language it was made in, so its verdict, made with
it, and its text never mix two.
"""
from __future__ import annotations

import functools
import unicodedata
from dataclasses import dataclass, field
from typing import Optional

from ..editions.language import language, speaking
from ..editions.messages import translator
from ..units import format_bytes
from ..provenance import course_made
from .diagnosis import Diagnosis, reproduced_line
from .capacity import Capacity, capacity_words
from .device_words import CUDA, NPU, DeviceWords, words_for, words_of
from .remedies import FRACTION_HEADROOM, Remedies, Trial, async_costs, async_prediction
from .shortage import judge_request, material_threshold, material_words, pending_words, program_remedies, rule

tr = translator("doctor")



def _in_own_language(method):
    """Run a report's method in the language the report was made in (its ``language``)."""
    @functools.wraps(method)
    def wrapped(self, *args, **kwargs):
        with speaking(getattr(self, "language", None) or language()):
            return method(self, *args, **kwargs)
    return wrapped


@dataclass
class Verdict:
    kind: str                 # "unverified", "no-target", "fits", "remedy", "less-memory" (or "not-asked")
    text: str                 # one paragraph, plain words, in the reader's language
    line: Optional[str]       # the exact PYTORCH_CUDA_ALLOC_CONF line to set, when there is one
    trial: Optional[Trial]    # the replay that proves it
    reduce_by: int = 0        # bytes of live memory to cut ("shortage", "less-memory"): at least, for the whole run
    more_memory: int = 0      # bytes more GPU the recorded settings need to run to the end (replayed); GPU, not live


@dataclass
class DoctorReport:
    diagnosis: Diagnosis
    remedies: Optional[Remedies]
    verdict: Verdict
    seconds: float = 0.0
    capacity: Optional[Capacity] = None     # what the run told about its GPU (capacity.py)
    language: str = field(default_factory=language)     # 'en' or 'zh': the words of the whole report

    # ------------------------------------------------------------ the verdict
    @staticmethod
    def decide(diag: Diagnosis, remedies: Optional[Remedies]) -> Verdict:
        if diag.verified and remedies is None:
            return Verdict("not-asked", tr("Remedies were not replayed (remedies=False): the findings below are the "
                                           "whole answer."), None, None)
        if not diag.verified or remedies is None:
            div = diag.verify_summary.get("first_divergence")
            where = tr(" (first difference at trace event {index})", index=div["index"]) if div else ""
            return Verdict("unverified", tr("The reference allocator does not reproduce PyTorch's decisions on this "
                                            "trace{where}, so its what-ifs would not be PyTorch's: no advice is given. "
                                            "Run `python -m allocator_ref replay SNAPSHOT --verify` for the details.",
                                            where=where), None, None)
        if not remedies.reproduced and remedies.reproduction.skipped:
            return Verdict("whatif-unverified", tr("The \"as recorded\" what-if replay could not run ({why}), so no "
                                                   "setting is ranked.", why=remedies.reproduction.skipped),
                           None, remedies.reproduction)
        if not remedies.reproduced:
            at, theirs, ours = remedies.reproduction.mismatch
            return Verdict("whatif-unverified", tr(
                "The \"as recorded\" what-if replay does not reproduce the run: after trace event {at} PyTorch had "
                "{theirs} reserved, the replay {ours} ({diff}). Its what-ifs would start from a run that did not "
                "happen, so no setting is ranked.", at=f"{at:,}", theirs=format_bytes(theirs),
                ours=format_bytes(ours), diff=_signed(ours - theirs)), None, remedies.reproduction)
        recorded = remedies.recorded
        if remedies.start_does_not_fit:
            return Verdict("start-does-not-fit", tr(
                "Does not fit before the first event: {held} held ({live} of it live tensors) when recording began, "
                "against {usable} usable. No setting changes what was already held; the part of the run before the "
                "recording decides it (record from the start of the run to ask about it).",
                held=format_bytes(remedies.start_held), live=format_bytes(remedies.start_live),
                usable=format_bytes(remedies.target)), None, None)
        judged = diag.judgement
        if judged is not None and judged.shortage:
            return _shortage_verdict(diag, remedies, judged)
        if remedies.target is None:
            verdict = _no_target_verdict(remedies)
            verdict.text += _mapped_but_free(diag)
            return verdict
        if recorded.fits:
            # The headroom is said where the run fit without a flush; one that flushed had none to speak of.
            text = (tr("As recorded, the run fits in {target} (replayed: peak reserved {peak}, no out-of-memory)",
                       target=format_bytes(remedies.target), peak=format_bytes(recorded.peak_reserved))
                    if recorded.alloc_retries else
                    tr("As recorded, the run fits in {target} with {headroom} to spare (replayed: peak reserved "
                       "{peak}, no out-of-memory)", target=format_bytes(remedies.target),
                       headroom=format_bytes(remedies.target - recorded.peak_reserved),
                       peak=format_bytes(recorded.peak_reserved)))
            better = remedies.fewer_retries
            if not recorded.alloc_retries:
                return Verdict("fits", text + tr(": nothing to change."), None, recorded)
            text += tr(", but only by flushing its cache {times} on retry (num_alloc_retries: each frees every "
                       "cached segment it can and synchronizes the device; {calls} device calls, {ms} ms of them, "
                       "simulated).", times=_times(recorded.alloc_retries), calls=f"{recorded.device_calls:,}",
                       ms=f"{recorded.device_call_ms:,.1f}")
            if better is None:
                return Verdict("fits", text + tr(" No single setting tried fits with fewer flushes."), None, recorded)
            return Verdict("fewer-retries", text + tr(
                " `{line}` fits {flushing} (peak reserved {peak}, {calls} device calls){prediction}{tradeoff}.",
                line=better.line, flushing=_flushing(better.alloc_retries), peak=format_bytes(better.peak_reserved),
                calls=f"{better.device_calls:,}", prediction=_prediction(better),
                tradeoff=_tradeoff(better, recorded)) + _caveats(diag, better), better.line, better)
        chosen = remedies.recommended
        if chosen is not None:
            errors = (tr("with {n} out-of-memory error", n=recorded.ooms) if recorded.ooms == 1 else
                      tr("with {n} out-of-memory errors", n=recorded.ooms))
            return Verdict("remedy", tr(
                "Set `{line}`. Replayed on the same program it fits in {target}: peak reserved {peak} (as recorded: "
                "{recorded_peak}, {errors}), fragmentation at that peak {frag}, {calls} device calls (as recorded: "
                "{recorded_calls}), flushing its cache on retry {times}. It is the smallest change that "
                "fits{prediction}{tradeoff}.", line=chosen.line, target=format_bytes(remedies.target),
                peak=format_bytes(chosen.peak_reserved), recorded_peak=format_bytes(recorded.peak_reserved),
                errors=errors, frag=format_bytes(chosen.fragmentation), calls=f"{chosen.device_calls:,}",
                recorded_calls=f"{recorded.device_calls:,}", times=_times(chosen.alloc_retries),
                prediction=_prediction(chosen), tradeoff=_tradeoff(chosen, recorded)) + _caveats(diag, chosen),
                chosen.line, chosen)
        need = diag.live_need
        short = max(0, need - remedies.target)
        extra = remedies.extra_needed or short
        counting = tr(" (counting the request that failed)") if diag.oom else ""
        why = (tr("The live tensors alone need {need} at their peak{counting}, {short} more than the device has.",
                  need=format_bytes(need), counting=counting, short=format_bytes(short)) if short else
               tr("The live tensors alone need {need} at their peak{counting}, which is within the device, but no "
                  "setting tried packs them into it.", need=format_bytes(need), counting=counting))
        # Two figures, each named: live memory to cut (at least), and GPU memory to add (replayed,
        # fragmentation included).  The second is not live memory: said as one, it read as "cut
        # 747 MiB of the 240 MiB live" (issue 56).
        cut = (tr(" Cut at least {short} of live memory.", short=format_bytes(short)) if short else "")
        return Verdict("less-memory", tr(
            "No allocator setting fits: every replay runs out of memory in {target}. {why} Only less live memory "
            "helps (a smaller batch or sequence, activation checkpointing, dropping references sooner), or a bigger "
            "GPU: replays of the recorded settings fit on a GPU with {extra} more (GPU memory to add, the "
            "fragmentation of the run counted; not live memory to cut).{cut}", target=format_bytes(remedies.target),
            why=why, extra=format_bytes(extra), cut=cut), None, None, reduce_by=short, more_memory=extra)

    # ------------------------------------------------------------ words
    @_in_own_language
    def text(self) -> str:
        return "\n".join(self.lines()) + "\n"

    @_in_own_language
    def lines(self) -> list[str]:
        d, r, v = self.diagnosis, self.remedies, self.verdict
        j = d.verify_summary
        raw = len((d.snapshot.get("device_traces") or [[]] * (d.device + 1))[d.device] or ())
        extra = raw - d.events_replayed
        counted = (tr("{n} events of the trace's {raw} entries ({extra} 'snapshot' markers or other entries that "
                      "change nothing, left out)", n=f"{d.events_replayed:,}", raw=f"{raw:,}", extra=f"{extra:,}")
                   if extra > 0 else tr("{n} events", n=f"{d.events_replayed:,}"))
        w = words_of(d)                     # GPU or NPU, PyTorch or torch_npu: the design it replayed on
        course = course_made(d.snapshot)    # the course recorded it, not PyTorch (provenance.py)
        if course:
            head = tr("Memory doctor: {source}, device {device} ({counted}; simulated replays of the recorded "
                      "decisions of the course's simulated run, not a run of {library})",
                      source=d.source, device=d.device, counted=counted, library=w.library)
        else:
            head = tr("Memory doctor: {source}, device {device} ({counted}; simulated replays of {library}'s "
                      "recorded decisions)", source=d.source, device=d.device, counted=counted, library=w.library)
        out = [head, "", reproduced_line(j, d.verified, w, course)]
        if r is not None:           # the what-ifs' own check, the JSON's "reproduced": said here too
            out.append(whatif_line(r))
        if d.profile_note:
            out.append(tr("Simulated {device}: {note}", note=d.profile_note, device=w.device))
        out += ["", tr("VERDICT"), "  " + v.text]
        if v.line:
            out += ["", "  " + v.line]
        out += ["", tr("PEAKS")]
        if not d.verified:          # the replay's figures, not the run's: say so before the first of them
            out.append(_unproven(d.verify_summary))
        start = tr("when recording began, before event 0")
        out.append(tr("  live tensors (memory_allocated) peaked at {peak} ({at})", peak=format_bytes(d.peak_allocated),
                      at=start if d.peak_allocated_at < 0 else tr("event {at}", at=f"{d.peak_allocated_at:,}")))
        out.append(tr("  at the live peak {reserved} was reserved, {unallocated} of it unallocated (the fragmentation "
                      "that counts: the reserved peak may be a moment of cached memory, not of need)",
                      reserved=format_bytes(d.reserved_at_live_peak),
                      unallocated=format_bytes(d.reserved_at_live_peak - d.peak_allocated)))
        out.append(tr("  reserved (memory_reserved) peaked at {peak} ({at}); at that moment {allocated} was "
                      "allocated and {unallocated} reserved but unallocated", peak=format_bytes(d.peak_reserved),
                      at=start if d.peak_at_start else tr("event {at}", at=f"{d.peak_reserved_at:,}"),
                      allocated=format_bytes(d.allocated_at_peak), unallocated=format_bytes(d.unallocated_at_peak)))
        if r is not None:
            if r.target is not None:
                out.append(tr("  the device: {usable} usable by the allocator ({where})",
                              usable=format_bytes(r.target), where=r.target_from))
            else:
                out.append(tr("  the device: {where}", where=r.target_from))
            if self.capacity is not None and self.capacity.known and r.target_from != capacity_line(self.capacity, w):
                out.append(tr("  the recorded {device}: {capacity}", capacity=capacity_line(self.capacity, w),
                              device=w.device))
            out.append(tr("  at the first event {held} was already held in segments ({live} of it live tensors)",
                          held=format_bytes(r.start_held), live=format_bytes(r.start_live)) if r.start_held else
                       tr("  the trace starts from an empty allocator"))
            base = r.reproduction
            program = d.program
            if program is not None and program.user_empty_caches:
                n = len(program.user_empty_caches)
                out.append(tr("  the program called {module}.empty_cache() {times} (releases that no malloc "
                              "needed: {malloc} could not have failed there, or the stack names empty_cache); "
                              "replayed as calls", times=_times(n), module=w.module, malloc=w.malloc))
            if base.alloc_retries:
                # PyTorch counts a retry in alloc_block(is_retry=True), so a request that still fails after its
                # flush counts too: say so, or "2" reads against the capacity line's "1 flush ... and 1 OOM".
                # Said only where the sum holds (an OOM inside a capture has no flush rung to count).
                failed = base.ooms
                served = (len(set(program.ladder_flushes) - set(program.ooms)) if program is not None
                          else None)
                counted = ""
                if failed and served is not None and served + failed == base.alloc_retries:
                    counted = (tr(" (counting the {n} request that still ran out of memory after its flush)",
                                  n=f"{failed:,}") if failed == 1 else
                               tr(" (counting the {n} requests that still ran out of memory after their flush)",
                                  n=f"{failed:,}"))
                out.append(tr("  flushes on retry (num_alloc_retries): {n}{counted}, each a release of every cached "
                              "segment it can plus a device-wide synchronize", n=f"{base.alloc_retries:,}",
                              counted=counted))
        if d.judgement is not None:
            out += ["", tr("SHORTAGE OR FRAGMENTATION"),
                    tr("  {kind}: {words}", kind=_judgement_kind(d.judgement.kind), words=d.judgement.words),
                    tr("  the rule: {rule}", rule=rule(w)), tr("  materiality: {words}", words=material_words())]
        out += ["", tr("WHERE THE RESERVED-BUT-UNALLOCATED MEMORY SITS AT THE PEAK")]
        out.append(tr("  by pool: large {large}, small {small}", large=format_bytes(d.by_pool.get("large", 0)),
                      small=format_bytes(d.by_pool.get("small", 0))))
        for h in d.holdings[:5]:
            blocks = tr("{n} block", n=h.blocks) if h.blocks == 1 else tr("{n} blocks", n=h.blocks)
            line = tr("  seg {number} ({pool} pool, stream {stream}, {size}, {blocks}): {free} free",
                      number=h.number, pool=_pool(h.pool), stream=h.stream, size=format_bytes(h.size),
                      blocks=blocks, free=format_bytes(h.free))
            line += (tr(", largest free block {size}", size=format_bytes(h.largest_free)) if h.blocks > 1
                     else tr(", wholly free"))
            if h.pending:
                line += tr(", {size} pending on stream {stream} (freed, waiting for another stream's work)",
                           size=format_bytes(h.pending), stream=h.stream)
            out.append(line + tr("; {size} allocated", size=format_bytes(h.allocated)))
        if len(d.holdings) > 5:
            rest = sum(h.free + h.pending for h in d.holdings[5:])
            out.append(tr("  ... and {n} more segments holding {size}", n=len(d.holdings) - 5,
                          size=format_bytes(rest)))
        if "expandable_segments:true" in d.config.replace(" ", "").lower():
            out.append(tr("  this run uses expandable segments: memory is mapped page by page (20 MiB pages in the "
                          "large pool, 2 MiB in the small one), so reserved-but-unallocated bytes are mostly the "
                          "unused parts of partly used pages (and whole free pages not yet unmapped), not stranded "
                          "blocks"))
        out += ["", tr("LARGEST LIVE ALLOCATIONS AT THE PEAK")]
        for a in d.largest:
            where = " <- ".join(a.where) if a.where else tr("(no Python frames recorded)")
            out.append(tr("  {size} at {address} (stream {stream}): {where}", size=format_bytes(a.size),
                          address=f"{a.address:#x}", stream=a.stream, where=where))
        out += ["", tr("STREAMS")]
        pending = {stream: per["pending"] for stream, per in d.by_stream.items() if per.get("pending")}
        n = len(d.by_stream)
        owners = tr("  {n} stream owns segments at the peak; ", n=n) if n == 1 else \
            tr("  {n} streams own segments at the peak; ", n=n)
        out.append(owners + (tr("{pending}: freed but held for other streams' work (record_stream events not yet "
                                "complete)", pending=pending_words(pending)) if pending else
                             tr("no freed block waits for another stream's work there")))
        if d.pending_max:
            out.append(tr("  over the whole run, at most {size} was held that way (event {at}): memory record_stream "
                          "kept from being reused", size=format_bytes(d.pending_max), at=f"{d.pending_max_at:,}"))
        else:
            out.append(tr("  over the whole run, no freed block ever waited for another stream"))
        if len(d.by_stream) > 1:
            for stream, per in sorted(d.by_stream.items(), key=lambda kv: -kv[1]["free"])[:6]:
                whole = sum(h.free for h in d.holdings if h.stream == stream and h.allocated == 0 and not h.pending)
                line = tr("  stream {stream}: {segments} segments, {free} cached free (usable only by requests on "
                          "that stream), {allocated} allocated", stream=stream, segments=per["segments"],
                          free=format_bytes(per["free"]), allocated=format_bytes(per["allocated"]))
                if per.get("pending"):
                    line += tr(", {size} pending on stream {stream} (freed, waiting for another stream's work)",
                               size=format_bytes(per["pending"]), stream=stream)
                if whole:
                    line += tr("; {size} of it in wholly free segments, which {module}.empty_cache() (or a flush "
                               "on retry) would give back", size=format_bytes(whole), module=w.module)
                elif per["free"]:
                    line += tr("; none of it in wholly free segments, so only freeing that stream's tensors "
                               "releases it")
                out.append(line)
        if d.oom is not None:
            title = (tr("THE OUT-OF-MEMORY ERROR, LINE BY LINE (the first of {n} in the trace)", n=d.oom_count)
                     if d.oom_count > 1 else tr("THE OUT-OF-MEMORY ERROR, LINE BY LINE"))
            out += ["", title] + ["  " + line for line in oom_lines(d)]
        if r is not None:
            out += ["", tr("REMEDIES, EACH REPLAYED FROM THE STATE AT THE FIRST EVENT ({n} replays, target {target})",
                           n=r.replays, target=format_bytes(r.target)) if r.target is not None else
                    tr("REMEDIES, EACH REPLAYED FROM THE STATE AT THE FIRST EVENT ({n} replays, uncapped)",
                       n=r.replays)]
            base = r.reproduction
            if r.start_held:
                out.append(tr("  a setting replayed here applies from the first recorded event on: the {held} of "
                              "segments held then are kept as PyTorch had them", held=format_bytes(r.start_held)))
            if base.skipped:
                out.append(tr("  the \"as recorded\" replay could not run ({why}); nothing below is ranked",
                              why=base.skipped))
            elif base.mismatch is None:
                out.append(tr("  the \"as recorded\" replay reproduces the recorded reserved curve at every program "
                              "action (peak {peak}, as recorded)", peak=format_bytes(base.peak_reserved)))
            else:
                at, theirs, ours = base.mismatch
                out.append(tr("  the \"as recorded\" replay does NOT reproduce the run: after trace event {at} "
                              "{theirs} was reserved, the replay has {ours} ({diff}); nothing below is ranked",
                              at=f"{at:,}", theirs=format_bytes(theirs), ours=format_bytes(ours),
                              diff=_signed(ours - theirs)))
            out.append(f"  {_pad(tr('change'), 34)} {_pad(tr('peak reserved'), 14, right=True)} "
                       f"{_pad(tr('frag @ live peak'), 17, right=True)} {_pad(tr('device calls'), 13, right=True)} "
                       f"{_pad(tr('retries'), 8, right=True)}  {tr('fits')}")
            for t in r.trials:
                name = {"recorded": tr("(as recorded)"), "recorded-on-target": tr("(recorded settings, target)")}.get(
                    t.kind, t.change)
                if t.skipped:
                    out.append(f"  {_pad(name, 34)} " + tr("skipped: {why}", why=t.skipped))
                    continue
                fits = "-" if t.fits is None else (tr("yes") if t.fits else tr("NO ({n} OOM)", n=t.ooms))
                out.append(f"  {_pad(name, 34)} {format_bytes(t.peak_reserved):>14} {format_bytes(t.frag_at_live_peak):>17} "
                           f"{t.device_calls:>13,} {t.alloc_retries:>8,}  {fits}"
                           + (tr("  (model prediction)") if t.prediction else ""))
            if any(t.prediction and not t.skipped for t in r.trials):
                out.append(tr("  backend:cudaMallocAsync is {prediction}; it ranks after any knob with the same "
                              "result; the switch costs: {costs}", prediction=async_prediction(),
                              costs=tr("; ").join(async_costs())))
        if len(d.devices) > 1:
            others = tr(", ").join(tr("device {device} ({n} events)", device=x["device"], n=f"{x['events']:,}")
                                   for x in d.devices if x["device"] != d.device)
            out += ["", tr("Other devices in the snapshot: {others}; ask with --device N (device=N).", others=others)]
        return out

    # ------------------------------------------------------------ machine-readable
    @_in_own_language
    def to_json(self) -> dict:
        d, r, v = self.diagnosis, self.remedies, self.verdict
        return {
            "source": d.source, "device": d.device, "events": d.events_replayed, "verified": d.verified,
            "allocs": d.verify_summary["allocs"], "allocs_exact": d.verify_summary["allocs_exact"],
            "verdict": v.kind, "verdict_text": v.text, "recommended_line": v.line,
            "proposal": proposal(v, r),
            "reduce_live_memory_by": v.reduce_by, "more_gpu_memory": v.more_memory,
            "extra_memory_needed": None if r is None else r.extra_needed,
            "oom_count": d.oom_count,
            "judgement": None if d.judgement is None else d.judgement.to_json(words_of(d)),
            "simulated_gpu": d.profile, "simulated_gpu_note": d.profile_note or None,
            "peak_allocated": d.peak_allocated, "peak_reserved": d.peak_reserved,
            "peak_allocated_at": "start" if d.peak_allocated_at < 0 else d.peak_allocated_at,
            "peak_reserved_at": "start" if d.peak_at_start else d.peak_reserved_at,
            "start_reserved": d.start_reserved, "start_allocated": d.start_allocated,
            "unallocated_at_live_peak": d.reserved_at_live_peak - d.peak_allocated,
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
            "headroom": None if r is None or r.target is None else r.target - r.recorded.peak_reserved,
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
    @_in_own_language
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
        with speaking(self.language):
            kwargs.setdefault("title", tr("{source}, device {device}", source=self.diagnosis.source,
                                          device=self.diagnosis.device))
        return TracePlayer(self.frames, **kwargs)

    @property
    def frames(self):
        """The frames of the whole trace the player and the page draw (recorded when first used)."""
        return frames_of(self.diagnosis)

    def __str__(self) -> str:
        return self.text()

    def _repr_html_(self) -> str:
        return "<pre>" + _escape(self.text()) + "</pre>"


def _unproven(summary: dict) -> str:
    """The caveat over every figure of a replay that did not reproduce the run (the verdict gives no advice;
    the peaks and holdings below are still the reference allocator's, which is all a reader can check)."""
    divergence = summary.get("first_divergence")
    if divergence is not None:
        return tr("  (these figures and those below are the reference allocator's replay, which departs from the "
                  "recorded decisions at trace event {at}: they are not proven to be the run's)",
                  at=f"{divergence['index']:,}")
    return tr("  (these figures and those below are the reference allocator's replay, whose final state differs "
              "from the snapshot's: they are not proven to be the run's)")


def whatif_line(r: Remedies) -> str:
    """Whether the "as recorded" what-if replay reproduced the run (the JSON's ``reproduced``)."""
    base = r.reproduction
    if base.skipped:            # a replay that failed also carries a mismatch (remedies.run_trial)
        return tr("What-ifs: NO -- the \"as recorded\" replay could not run ({why}), so no setting is ranked",
                  why=base.skipped)
    if r.reproduced:
        return tr("What-ifs: yes -- the \"as recorded\" replay reproduces the recorded reserved curve, so the "
                  "settings below are ranked")
    return tr("What-ifs: NO -- the \"as recorded\" replay parts from the recorded reserved curve, so no setting "
              "is ranked")


def proposal(v: Verdict, r: Optional[Remedies]) -> Optional[dict]:
    """What the verdict proposes, as the JSON carries it: the setting, its line, its replayed peak and
    saving, and whether it is a fix (the run does not fit without it) or an offer (the run fits as it is)."""
    t = v.trial
    if r is None or t is None or t.kind in ("recorded", "recorded-on-target", "probe"):
        return None
    recorded = r.recorded
    return {"setting": t.change, "line": t.line, "kind": "offer" if v.kind == "no-target" else "fix",
            "peak_reserved": t.peak_reserved, "saving": recorded.peak_reserved - t.peak_reserved,
            "fits": t.fits, "alloc_retries": t.alloc_retries, "model_prediction": bool(t.prediction)}


def _floored(remedies: Remedies, t: Trial) -> str:
    """Said when a replayed saving stops at the memory held when recording began (the inherited start
    state, kept as PyTorch had it): from the run's own start the setting might save more."""
    held = remedies.start_held
    if not held or t.peak_reserved - held >= material_threshold(remedies.recorded.peak_reserved):
        return ""
    return tr(" Its peak is floored by the {held} already held when recording began, which no setting replayed "
              "from the first event gives back: recorded from the start of the run, it might save more.",
              held=format_bytes(held))


def _mapped_but_free(diag: Diagnosis) -> str:
    """With expandable segments, what reserved-but-unallocated memory is, so a run that fits is not read as
    leaking: freed pages stay mapped until ``release_cached_blocks`` unmaps them (``release_blocks`` ->
    ``unmap_block``: torch.cuda.empty_cache(), or the flush of a request that would fail), PyTorch 2.11,
    c10/cuda/CUDACachingAllocator.cpp."""
    if "expandable_segments:true" not in diag.config.replace(" ", "").lower() or not diag.unallocated_at_peak:
        return ""
    return tr(" Of its reserved peak, {free} was mapped but not allocated: expandable segments keep freed pages "
              "mapped until torch.cuda.empty_cache() or a request that would otherwise fail unmaps them, so those "
              "bytes come back when needed; they are not a leak.", free=format_bytes(diag.unallocated_at_peak))


def _no_target_verdict(remedies: Remedies) -> Verdict:
    """No GPU to fit in: nothing to fix; a setting is shown only when its gain is material."""
    recorded = remedies.recorded
    device = words_for(recorded.policy).device
    head = tr("The run did not run out of memory and did not flush its cache on retry, so nothing tells the {device}'s "
              "size and there is nothing to fix; pass --device-memory GiB to ask whether it fits a smaller {device}.",
              device=device)
    best = remedies.best_material
    if best is not None:
        saving = recorded.peak_reserved - best.peak_reserved
        return Verdict("no-target", head + tr(
            " The replays show `{line}` would lower peak reserved to {peak} ({saving} less, {share}%; "
            "{rests_on}){prediction}. It is offered because {material}.", line=best.line,
            peak=format_bytes(best.peak_reserved), saving=format_bytes(saving),
            share=f"{100 * saving / recorded.peak_reserved:.1f}", rests_on=_rests_on(best),
            prediction=_prediction(best), material=material_words())
            + tr(" It is an offer, not a fix: the run fits where it ran without it.") + _floored(remedies, best),
            None, best)
    lowest = remedies.lowest
    saving = recorded.peak_reserved - lowest.peak_reserved
    if recorded.peak_at < 0 and recorded.start_held and saving <= 0:
        tail = tr(" None of the remedies lowers peak reserved: the peak is the {held} already held in segments when "
                  "recording began, which no setting replayed from the first event can give back.",
                  held=format_bytes(recorded.start_held))
    elif saving > 0:
        tail = tr(" No setting is worth making: the largest saving replayed, `{change}`, is {saving} ({share}% of "
                  "peak reserved), and {material}.", change=lowest.change, saving=format_bytes(saving),
                  share=f"{100 * saving / recorded.peak_reserved:.1f}", material=material_words())
    else:
        tail = tr(" None of the remedies lowers peak reserved.")
    return Verdict("no-target", head + tail, None, None)


def _shortage_verdict(diag: Diagnosis, remedies: Remedies, judged) -> Verdict:
    """A shortage: no allocator setting, how much live memory must go, where it lives, what helps.

    Its figures each say what they are: the live memory that must go for the failed request
    to succeed (at the failure), what the rest of the run needs beyond that (its later live
    peak with the request served), and the GPU memory the recorded settings would need
    instead (replayed, fragmentation counted) -- GPU to add, never read as live to cut."""
    cut = judged.cut
    later = later_need(diag)
    fits = [t for t in remedies.knobs if t.fits]
    replayed = ("" if remedies.target is None else
                tr(" The replays agree: no setting tried fits in {target}.", target=format_bytes(remedies.target))
                if not fits else
                tr(" (One replay fits anyway, `{change}`: it counts live memory differently at that moment; the rule "
                   "above is the decision.)", change=fits[0].change))
    if later is not None and later[0] > cut:
        replayed += tr(" The rest of the run needs more: with the request served, live memory later reaches {live} "
                       "(event {at}), so {more} more of it must go, {total} in all.", live=format_bytes(later[2]),
                       at=f"{later[1]:,}", more=format_bytes(later[0] - cut), total=format_bytes(later[0]))
        cut = later[0]
    if remedies.extra_needed:
        replayed += tr(" Instead of cutting, a {device} with {extra} more would do: the replays of the recorded "
                       "settings fit there ({device} memory to add, the fragmentation of the rest of the run counted; "
                       "it is not live memory to cut).", extra=format_bytes(remedies.extra_needed),
                       device=words_of(diag).device)
    live = diag.oom.live_places if diag.oom is not None and diag.oom.live_places else diag.live_places
    places = tr(", ").join(tr("{size} in the {pool} pool on stream {stream}", size=format_bytes(b), pool=_pool(pool),
                              stream=stream)
                           for (pool, stream), b in sorted(live.items(), key=lambda kv: -kv[1])[:3])
    largest = diag.oom.live if diag.oom is not None and diag.oom.live else diag.largest
    biggest = tr("; ").join(tr("{size} from {where}", size=format_bytes(a.size), where=a.where[0]) if a.where
                            else format_bytes(a.size) for a in largest[:3])
    text = tr("This is a shortage, not fragmentation: {words}.{replayed} Plan to cut at least {cut} of live memory. "
              "Where the live memory is: {places}", words=judged.words, replayed=replayed, cut=format_bytes(cut),
              places=places or tr("not in the trace"))
    if biggest:
        text += tr("; the largest live tensors: {biggest} (all of them under LARGEST LIVE ALLOCATIONS)",
                   biggest=biggest)
    text += tr(". What helps is outside the allocator (changes to the program or the hardware, not settings): "
               "{remedies}.", remedies=tr("; ").join(program_remedies(words_of(diag))))
    return Verdict("shortage", text, None, None, reduce_by=cut, more_memory=remedies.extra_needed or 0)


def frames_of(diag: Diagnosis):
    """The frames of ``diag``'s whole trace, for the player and the page: a frame per event the verify
    replay reported, recorded (one more replay, viz.replay_frames) the first time one is used, and
    kept on the diagnosis.  The drawing side's: every fact is read off the replay engine."""
    if diag.frames is None:
        from ..viz.replay_frames import LazyFrames
        diag.frames = LazyFrames(diag.recording if diag.recording is not None else diag.snapshot, diag.device,
                                 diag.events_replayed, first_event=diag.first_event, profile=diag.profile)
    return diag.frames


def later_need(diag: Diagnosis) -> Optional[tuple]:
    """After a failed request: (live bytes to cut for the whole run, the event, the live bytes there),
    the request counted as served and kept (it has no free in the trace) against what the process
    could hold at the failure (``usable``: reserved + the driver's free).  None without an OOM."""
    o = diag.oom
    if o is None or not diag.allocated:
        return None
    at = min(max(o.event_index - diag.first_event, 0), len(diag.allocated) - 1)
    request = max(512, -(-o.request // 512) * 512)           # round_size at the least (shortage.rounded)
    pending = sum(o.pending.values())
    index = max(range(at, len(diag.allocated)), key=diag.allocated.__getitem__)
    live = diag.allocated[index] + request
    return max(0, live + pending - o.usable), index, live


def _caveats(diag: Diagnosis, t: Trial) -> str:
    """What an expert adds to a memory cap: the headroom is thin, and several streams' caches have a
    fix in the code too (each stream's free blocks serve only its own requests: get_free_block looks
    in the requesting stream's pool, c10/cuda/CUDACachingAllocator.cpp, PyTorch 2.11)."""
    if t.allowed is None:
        return ""
    out = tr(" {headroom} headroom is thin once NCCL buffers, cuDNN/cuBLAS workspaces or lazily loaded kernels "
             "grow: lower the fraction if they do.", headroom=f"{FRACTION_HEADROOM:.0%}")
    if len(diag.by_stream) > 1 or diag.pending_max:
        out += tr(" In the program, the lasting fix: join the side streams to the main one (wait_stream) or reuse "
                  "the same few side streams, and free their tensors once the side-stream phase is over: each "
                  "stream's cached blocks serve only that stream's requests.")
    return out


def _rests_on(t: Trial) -> str:
    """What a proposed setting's figure rests on."""
    return (tr("replayed on the recorded requests, on a model of the driver's pool") if t.prediction else
            tr("replayed on the recorded requests"))


def _places_json(places: dict) -> list:
    return [{"pool": pool, "stream": stream, "live": b} for (pool, stream), b in places.items()]


def capacity_line(cap: Capacity, words: DeviceWords = CUDA) -> str:
    return capacity_words(cap, words)


def _signed(n: int) -> str:
    return ("+" if n >= 0 else "-") + format_bytes(abs(n))


def _flushing(n: int) -> str:
    return tr("without a single flush") if n == 0 else tr("flushing {times}", times=_times(n))


def _times(n: int) -> str:
    return tr("no time") if n == 0 else (tr("once") if n == 1 else tr("{n} times", n=f"{n:,}"))


def _pool(pool: str) -> str:
    """'large' or 'small', in the reader's language."""
    return {"large": tr("large"), "small": tr("small")}.get(pool, pool)


def _judgement_kind(kind: str) -> str:
    return {"shortage": tr("shortage"), "fragmentation": tr("fragmentation"), "fits": tr("fits"),
            "undecided": tr("undecided")}.get(kind, kind)


def _width(text: str) -> int:
    """Columns ``text`` takes in a terminal: a Chinese character takes two."""
    return sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in text)


def _pad(text: str, width: int, right: bool = False) -> str:
    """``text`` padded to ``width`` terminal columns (``f"{text:34}"`` counts a Chinese character as one)."""
    space = " " * max(0, width - _width(text))
    return space + text if right else text + space


def _prediction(t: Trial) -> str:
    if t.cap_note:
        return tr(" ({note})", note=t.cap_note)
    if not t.prediction:
        return ""
    return tr(" -- {prediction}; the switch costs: {costs}", prediction=t.prediction, costs=tr("; ").join(t.costs))


def _why(kind: str, w: DeviceWords = CUDA) -> str:
    """Why a remedy that fits may still fragment more or call the device more than the recorded run."""
    if kind == "expandable":
        return tr("expandable segments map and unmap memory page by page ({map_calls}; 20 MiB pages in the "
                  "large pool, 2 MiB in the small one: ExpandableSegment's segment size), so they make more device "
                  "calls, and free bytes inside a mapped page count as reserved", map_calls=w.map_calls)
    if kind == "max_split":
        return tr("blocks above the limit are never split, so they are cached whole and released first when memory "
                  "runs short (release_available_cached_blocks), which costs {free}/{malloc} calls",
                  free=w.free, malloc=w.malloc)
    if kind == "roundup":
        return tr("rounding requests up to a power-of-two step leaves the rounded-off bytes unallocated in each block")
    if kind == "gc":
        return tr("the garbage collector releases cached blocks early ({free}), so later requests call {malloc} again",
                  free=w.free, malloc=w.malloc)
    if kind == "async":
        return tr("the driver's pool is modelled with its own chunking, so its calls and leftovers are the model's")
    return tr("the change trades them for a lower peak")


def _tradeoff(t: Trial, recorded: Trial) -> str:
    worse = []
    if t.fragmentation > recorded.fragmentation:
        worse.append(tr("more fragmentation at its peak ({this} vs {recorded})", this=format_bytes(t.fragmentation),
                        recorded=format_bytes(recorded.fragmentation)))
    if t.device_calls > recorded.device_calls:
        worse.append(tr("more device calls ({this} vs {recorded})", this=f"{t.device_calls:,}",
                        recorded=f"{recorded.device_calls:,}"))
    if not worse:
        return ""
    return tr(". It has {worse}: {why}", worse=tr(" and ").join(worse), why=_why(t.kind, words_for(t.policy)))


def _escape(text: str) -> str:
    from html import escape
    return escape(text)


def oom_lines(diag: Diagnosis) -> list[str]:
    """The OOM message, clause by clause, with what each number means for this run.

    PyTorch's clauses, or torch_npu's (caching/npu/oom.py: "... free; ... reserved in total by PyTorch)")
    for a run replayed on torch_npu's design: the clauses quoted are the error's own English words."""
    o = diag.oom
    gap = o.reserved - o.allocated
    w = words_of(diag)
    npu = w is NPU
    lines = [
        tr("\"Tried to allocate {request}\": the request that failed (trace event {at}){where}.",
           request=format_bytes(o.request), at=f"{o.event_index:,}",
           where=tr(", made at {stack}", stack=" <- ".join(o.where)) if o.where else ""),
        tr("\"{clause}\": what {mem_get_info} reported after the allocator had already released every cached "
           "segment it could (the last rung of the retry ladder).", mem_get_info=w.mem_get_info,
           clause=(f"{format_bytes(o.device_free)} free" if npu else f"... of which {format_bytes(o.device_free)} is free")),
        tr("\"{clause}\": live tensors at that moment.",
           clause=(f"{format_bytes(o.allocated)} already allocated" if npu else
                   f"{format_bytes(o.allocated)} is allocated by PyTorch")),
        tr("\"{reserved} reserved in total by PyTorch\": {gap} of it in free blocks stuck in segments that still hold "
           "live tensors, so they could not be given back.", reserved=format_bytes(o.reserved), gap=format_bytes(gap))
        if npu else
        tr("\"{gap} is reserved by PyTorch but unallocated\": free blocks stuck in segments that still hold live "
           "tensors, so they could not be given back.", gap=format_bytes(gap)),
    ]
    judged = judge_request(o.request, o.allocated, o.reserved, o.device_free, o.pending)
    if o.pending:
        lines.append(tr("Of those unallocated bytes, {pending}: freed by the program but waiting for another "
                        "stream's work (record_stream), so not free yet.", pending=pending_words(o.pending)))
    lines.append(tr("A shortage: {words}.", words=judged.words) if judged.shortage else
                 tr("Fragmentation: {words}; see the remedies.", words=judged.words))
    return lines
