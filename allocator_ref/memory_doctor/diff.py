"""Two runs of one program, compared: what changed in the allocator's decisions, and what moved the peak.

    python -m allocator_ref doctor --diff before.pickle after.pickle
    ar.memory_doctor.diff.doctor_diff("before.pickle", "after.pickle")

Each run is diagnosed on its own (``doctor``: a replay at PyTorch's addresses, so every figure is
the allocator's own).  Then, side by side:

* the peaks: live tensors (``max_memory_allocated``), reserved (``max_memory_reserved``) and the
  reserved-but-unallocated bytes at the reserved peak;
* the settings: the recorded ``PYTORCH_CUDA_ALLOC_CONF`` of each;
* the live bytes at each run's live peak, by the Python line that allocated them, and the request
  sizes each line asked for: where the program itself changed;
* what moved the reserved peak.  When the settings differ, the second run's requests are replayed
  under the first run's settings (an anchored what-if, ``trace/whatif.py``): the difference between
  that replay and the second run is the settings' share, the rest is the program's.  When they are
  the same, all of it is the program's, and the line whose live bytes grew most is named.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from ..editions.language import language, speaking
from ..editions.messages import translator
from ..provenance import course_made
from ..units import format_bytes
from .device_words import words_of
from .diagnosis import chosen_frames, python_frames, reproduced_line

tr = translator("doctor")
START = "(held when recording began)"          # the stack of a block already live at the first event


@dataclass
class StackChange:
    where: str                  # "file.py:line in function" in the reader's language, or START
    function: str               # the allocating function's name ("" for START or no frames): what a program reads
    before: int                 # live bytes from that line at the first run's live peak
    after: int
    sizes_before: list          # distinct request sizes that line asked for, in the first run
    sizes_after: list

    @property
    def delta(self) -> int:
        return self.after - self.before


@dataclass
class DiffReport:
    before: Any                 # DoctorReport of the first run
    after: Any                  # DoctorReport of the second run
    stacks: list = field(default_factory=list)        # StackChange, largest change first
    under_before: Optional[Any] = None                # Trial: the second run's requests, first run's settings
    language: str = field(default_factory=language)

    @property
    def diagnosis(self):            # the CLI's exit status reads diagnosis.verified
        from .ranks import _AllVerified
        return _AllVerified(self.before.diagnosis.verified and self.after.diagnosis.verified)

    @property
    def moved(self) -> int:
        return self.after.diagnosis.peak_reserved - self.before.diagnosis.peak_reserved

    @property
    def settings_share(self) -> Optional[int]:
        """Bytes of the reserved peak's move that the change of settings made (proven by replay), or None."""
        t = self.under_before
        if t is None or t.skipped:
            return None
        return self.after.diagnosis.peak_reserved - t.peak_reserved

    @property
    def verdict(self):
        from .report import Verdict
        with speaking(self.language):
            return Verdict("diff", " ".join(self.verdict_lines()), None, self.under_before)

    def verdict_lines(self) -> list:
        a, b = self.before.diagnosis, self.after.diagnosis
        if not (a.verified and b.verified):
            return [tr("The reference allocator does not reproduce both runs, so what changed in its decisions is "
                       "not proven: no cause is named.")]
        out = [tr("The reserved peak moved by {moved} ({before} -> {after}); the live peak by {live}.",
                  moved=_signed(self.moved), before=format_bytes(a.peak_reserved), after=format_bytes(b.peak_reserved),
                  live=_signed(b.peak_allocated - a.peak_allocated))]
        share = self.settings_share
        if a.config != b.config:
            if share is None:
                out.append(tr("The settings changed too, but the second run could not be replayed under the first "
                              "run's settings, so their share is not proven."))
            else:
                out.append(tr("Replayed under the first run's settings, the second run's requests peak at {peak}: "
                              "the change of settings accounts for {settings}, the program for {program}.",
                              peak=format_bytes(self.under_before.peak_reserved), settings=_signed(share),
                              program=_signed(self.moved - share)))
        else:
            out.append(tr("The settings are the same, so the program moved it."))
        grew = next((s for s in self.stacks if s.delta), None)
        if grew is not None:
            out.append(tr("At the live peak, the line whose live bytes changed most is {where}: {before} -> {after} "
                          "({delta}).", where=_where(grew.where), before=format_bytes(grew.before),
                          after=format_bytes(grew.after), delta=_signed(grew.delta)))
        return out

    def lines(self) -> list:
        with speaking(self.language):
            return self._lines()

    def _lines(self) -> list:
        a, b = self.before.diagnosis, self.after.diagnosis
        out = [tr("Memory doctor: what changed from {before} to {after}", before=a.source, after=b.source), "",
               tr("  first:  {line}", line=reproduced_line(a.verify_summary, a.verified, words_of(a),
                                                          course_made(a.snapshot))),
               tr("  second: {line}", line=reproduced_line(b.verify_summary, b.verified, words_of(b),
                                                          course_made(b.snapshot))),
               "", tr("VERDICT")] + ["  " + line for line in self.verdict_lines()]
        out += ["", tr("PEAKS (first -> second)")]
        for name, x, y in ((tr("live tensors (memory_allocated)"), a.peak_allocated, b.peak_allocated),
                           (tr("reserved (memory_reserved)"), a.peak_reserved, b.peak_reserved),
                           (tr("reserved but unallocated at the reserved peak"), a.unallocated_at_peak,
                            b.unallocated_at_peak)):
            out.append(tr("  {name}: {before} -> {after} ({delta})", name=name, before=format_bytes(x),
                          after=format_bytes(y), delta=_signed(y - x)))
        out += ["", tr("SETTINGS (PYTORCH_CUDA_ALLOC_CONF)")]
        out.append(tr("  the same: {config}", config=repr(a.config)) if a.config == b.config else
                   tr("  changed: {before} -> {after}", before=repr(a.config), after=repr(b.config)))
        out += ["", tr("LIVE BYTES AT EACH RUN'S LIVE PEAK, BY THE LINE THAT ALLOCATED THEM")]
        for s in self.stacks[:8]:
            sizes = ("" if s.sizes_before == s.sizes_after else
                     tr("; request sizes {before} -> {after}", before=_sizes(s.sizes_before),
                        after=_sizes(s.sizes_after)))
            out.append(tr("  {where}: {before} -> {after} ({delta}){sizes}", where=_where(s.where),
                          before=format_bytes(s.before), after=format_bytes(s.after), delta=_signed(s.delta),
                          sizes=sizes))
        return out

    def text(self) -> str:
        return "\n".join(self.lines()) + "\n"

    def __str__(self) -> str:
        return self.text()

    def to_json(self) -> dict:
        with speaking(self.language):
            a, b, t = self.before.diagnosis, self.after.diagnosis, self.under_before
            return {"diff": True, "before": a.source, "after": b.source,
                    "verified": [a.verified, b.verified], "verdict_text": " ".join(self.verdict_lines()),
                    "peak_reserved": [a.peak_reserved, b.peak_reserved],
                    "peak_allocated": [a.peak_allocated, b.peak_allocated],
                    "unallocated_at_peak": [a.unallocated_at_peak, b.unallocated_at_peak],
                    "config": [a.config, b.config], "moved": self.moved,
                    "settings_share": self.settings_share,
                    "after_under_before_settings": None if t is None else t.peak_reserved,
                    "stacks": [{"where": s.where, "function": s.function, "before": s.before, "after": s.after, "delta": s.delta,
                                "sizes_before": s.sizes_before, "sizes_after": s.sizes_after} for s in self.stacks]}

    def html(self, path=None) -> str:
        from .html_report import text_page        # lazily: it draws with matplotlib
        with speaking(self.language):
            title = tr("memory doctor: diff")
        return text_page(title, self.text(), self.language, path)


def doctor_diff(before: Any, after: Any, *, device: Optional[int] = None,
                profile: str = "h100-80gb") -> DiffReport:
    """Compare two runs of one program (paths, bytes, dicts or Recordings; see the module doc)."""
    from . import doctor
    from .diagnosis import whatif_run
    from .remedies import Trial, run_trial
    reports = []
    for snapshot in (before, after):
        report = doctor(snapshot, device=device, profile=profile, remedies=False)
        report = getattr(report, "reports", [report])[0]           # several GPUs: the busiest
        if not hasattr(report.diagnosis, "peak_reserved"):
            raise ValueError(tr("{source}: has no trace to compare (a state-only dump); --diff needs two recorded "
                                "runs: record each with torch.cuda.memory._record_memory_history()",
                                source=report.diagnosis.source))
        reports.append(report)
    out = DiffReport(*reports)
    a, b = reports[0].diagnosis, reports[1].diagnosis
    out.stacks = _stack_changes(a, b)
    if a.verified and b.verified and a.config != b.config:
        # The second run's requests under the first run's settings: what the program alone would have reserved.
        run = whatif_run(b, b.profile)
        out.under_before = run_trial(Trial("change", a.config, a.config), run, None)
    return out


def live_by_stack(diag) -> tuple:
    """Live bytes by allocating line at the run's live peak, and the request sizes each line asked for.

    Walks the trace as the allocator saw it: an ``alloc`` makes a block live, its ``free_requested``
    ends it (the program's view: memory_allocated() drops there).  Blocks live at the first event
    count under START."""
    events = diag.recording.device(diag.device).events
    live = {}                                   # address -> (size, where)
    for b in _start_blocks(diag):
        live[b[0]] = (b[1], (START, ""))
    sizes: dict = {}
    by_where: dict = {}
    for address, (size, where) in live.items():
        by_where[where] = by_where.get(where, 0) + size
    best, best_total = dict(by_where), sum(by_where.values())
    total = best_total
    for e in events:
        action = e["action"]
        if action == "alloc":
            site = chosen_frames(e.get("frames"), keep=1)
            where = ((python_frames(e.get("frames"), keep=1)[0], site[0].get("name", "")) if site else
                     (tr("(no Python frames recorded)"), ""))
            live[e["addr"]] = (e["size"], where)
            by_where[where] = by_where.get(where, 0) + e["size"]
            total += e["size"]
            sizes.setdefault(where, set()).add(e["size"])
        elif action == "free_requested" and e["addr"] in live:
            size, where = live.pop(e["addr"])
            by_where[where] -= size
            total -= size
        if total > best_total:
            best, best_total = dict(by_where), total
    return {k: v for k, v in best.items() if v}, {k: sorted(v) for k, v in sizes.items()}


def _start_blocks(diag) -> list:
    from .diagnosis import start_segments
    return [(b["address"], b["size"]) for seg in start_segments(diag.recording.device(diag.device).start_state())
            for b in seg["blocks"] if b["state"] == "active_allocated"]


def _stack_changes(a, b) -> list:
    live_a, sizes_a = live_by_stack(a)
    live_b, sizes_b = live_by_stack(b)
    wheres = set(live_a) | set(live_b) | set(sizes_a) | set(sizes_b)
    out = [StackChange(w[0], w[1], live_a.get(w, 0), live_b.get(w, 0), sizes_a.get(w, []), sizes_b.get(w, []))
           for w in wheres]
    return sorted(out, key=lambda s: (-abs(s.delta), s.where))


def _where(where: str) -> str:
    return tr("(held when recording began)") if where == START else where


def _sizes(sizes: list) -> str:
    if not sizes:
        return tr("none")
    shown = ", ".join(format_bytes(s) for s in sizes[:4])
    return shown + (tr(" and {n} more", n=len(sizes) - 4) if len(sizes) > 4 else "")


def _signed(n: int) -> str:
    return ("+" if n >= 0 else "-") + format_bytes(abs(n))


__all__ = ["doctor_diff", "DiffReport", "StackChange", "live_by_stack"]
