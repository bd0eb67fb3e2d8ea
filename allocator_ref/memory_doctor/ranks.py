"""Several snapshots of one job, one per rank: which rank stands out, why, and one setting for all.

A job that runs out of memory on one rank of many (a pipeline stage with more layers, an
uneven shard, a rank that also holds the embedding) leaves one snapshot per rank.  Each is
diagnosed on its own (``doctor``), then compared:

* a table of every rank: peak allocated and reserved, reserved-but-unallocated at the
  reserved peak (fragmentation), flushes on retry (``num_alloc_retries``), OOMs;
* the outlier: the rank whose peak reserved is above the others' median by a material
  amount (``shortage.is_material``).  Why it differs: **more live memory** when its peak
  allocated is above the median by a material amount too, otherwise **the same live memory
  laid out worse** (its reserved-but-unallocated bytes are what differ);
* whether one setting serves every rank: the outlier's remedy, checked on every other
  rank's own replays (it must fit where that rank has a GPU to fit, and raise no rank's peak
  reserved by a material amount).

A file that cannot be read, or that does not belong with the others (another
``PYTORCH_CUDA_ALLOC_CONF``, the same file twice), gets one line naming it; the rest are
still compared.
"""
from __future__ import annotations

import hashlib
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from ..editions.language import language, speaking
from ..editions.messages import translator
from ..units import format_bytes
from .shortage import is_material, material_threshold, material_words

tr = translator("doctor")


@dataclass
class Rank:
    name: str                       # the file's name, as the table shows it
    report: Any                     # DoctorReport or StateReport
    peak_allocated: int
    peak_reserved: int
    fragmentation: int              # reserved - allocated at the reserved peak
    retries: Optional[int]          # num_alloc_retries (None: no trace to count them)
    ooms: Optional[int]
    config: str
    state_only: bool = False
    live_need: int = 0              # live bytes at the worst moment, the failed request counted
    sizes: dict = field(default_factory=dict)       # share of allocations by power-of-two size class

    @property
    def need(self) -> int:
        """What this rank needed of its GPU: its reserved peak, or more when a request failed."""
        return max(self.peak_reserved, self.live_need)

    @property
    def verdict(self):
        return self.report.verdict


@dataclass
class RanksReport:
    ranks: list
    problems: list = field(default_factory=list)      # one line per file that was left out or stands apart
    outlier: Optional[Rank] = None
    why: str = ""                   # "more live memory" or "the same live memory laid out worse" (or "")
    why_words: str = ""
    setting: Optional[str] = None   # the change that serves every rank, when one does
    setting_words: str = ""
    seconds: float = 0.0
    language: str = field(default_factory=language)     # the words of the whole report (report.py)
    apart: list = field(default_factory=list)       # Rank: files of other jobs, diagnosed but not compared

    def lines(self) -> list:
        with speaking(self.language):
            return self._lines()

    def _lines(self) -> list:
        from .report import _pad
        out = [tr("Memory doctor: {n} ranks of one job, compared", n=len(self.ranks)), ""]
        out += [f"  {p}" for p in self.problems]
        if self.problems:
            out.append("")
        out.append(f"  {_pad(tr('rank'), 28)} {_pad(tr('peak allocated'), 15, right=True)} "
                   f"{_pad(tr('peak reserved'), 14, right=True)} {_pad(tr('unallocated @ peak'), 19, right=True)} "
                   f"{_pad(tr('retries'), 8, right=True)} {_pad(tr('OOMs'), 5, right=True)}  {tr('verdict')}")
        for r in self.ranks:
            mark = tr(" <- outlier") if r is self.outlier else ""
            out.append(_row(r, mark))
        if self.apart:
            out += ["", tr("NOT RANKS OF THIS JOB (each diagnosed on its own, not compared)")]
            out += [_row(r, "") for r in self.apart]
        out += ["", tr("THE OUTLIER"), f"  {self.why_words}", "", tr("ONE SETTING FOR EVERY RANK"),
                f"  {self.setting_words}", tr("  ({words})", words=material_words())]
        if self.outlier is not None:
            out += ["", tr("THE OUTLIER'S OWN REPORT ({name})", name=self.outlier.name)]
            out += ["  " + line for line in self.outlier.report.lines()]
        return out

    def text(self) -> str:
        return "\n".join(self.lines()) + "\n"

    def __str__(self) -> str:
        return self.text()

    def to_json(self) -> dict:       # the words in it were made in the report's language
        return {"ranks": [{"name": r.name, "peak_allocated": r.peak_allocated, "peak_reserved": r.peak_reserved,
                           "unallocated_at_peak": r.fragmentation, "num_alloc_retries": r.retries, "ooms": r.ooms,
                           "verdict": r.verdict.kind, "state_only": r.state_only} for r in self.ranks],
                "not_ranks_of_this_job": [{"name": r.name, "verdict": r.verdict.kind, "config": r.config,
                                           "size_overlap": round(overlap(r.sizes, self.ranks[0].sizes), 3)}
                                          for r in self.apart],
                "problems": self.problems, "outlier": None if self.outlier is None else self.outlier.name,
                "why": self.why or None, "why_words": self.why_words, "one_setting": self.setting,
                "one_setting_words": self.setting_words, "seconds": self.seconds}

    @property
    def verdict(self):
        from .report import Verdict
        return Verdict("ranks", self.why_words + " " + self.setting_words, None, None)

    @property
    def diagnosis(self):            # the CLI's exit status reads diagnosis.verified
        return _AllVerified(all(getattr(r.report.diagnosis, "verified", True) for r in self.ranks))

    def html(self, path=None) -> str:
        from .html_report import text_page        # lazily: it draws with matplotlib
        with speaking(self.language):
            title = tr("memory doctor: ranks")
        return text_page(title, self.text(), self.language, path)


@dataclass
class _AllVerified:
    verified: bool


def verdict_kind(kind: str) -> str:
    """A verdict's kind as the table shows it: the key itself in English, its words in Chinese."""
    return {"no-target": tr("no-target"), "fits": tr("fits"), "fewer-retries": tr("fewer-retries"),
            "remedy": tr("remedy"), "less-memory": tr("less-memory"), "shortage": tr("shortage"),
            "state-only": tr("state-only"), "unverified": tr("unverified"),
            "whatif-unverified": tr("whatif-unverified"), "start-does-not-fit": tr("start-does-not-fit"),
            "not-asked": tr("not-asked")}.get(kind, kind)


def _row(r: Rank, mark: str) -> str:
    return (f"  {r.name[:28]:28} {format_bytes(r.peak_allocated):>15} {format_bytes(r.peak_reserved):>14} "
            f"{format_bytes(r.fragmentation):>19} {_count(r.retries):>8} {_count(r.ooms):>5}  "
            f"{verdict_kind(r.verdict.kind)}{mark}")


def _count(n: Optional[int]) -> str:
    return "-" if n is None else f"{n:,}"


SNAPSHOT_SUFFIXES = (".pickle", ".pkl")    # what torch.cuda.memory._dump_snapshot is given (default dump_snapshot.pickle)


def snapshot_paths(paths: list, skipped: Optional[list] = None) -> list:
    """The files named; a folder stands for its snapshot files (``SNAPSHOT_SUFFIXES``), sorted, hidden
    ones left out.  A job's folder also holds logs, scripts and checkpoints: they are never opened
    (``skipped`` collects them, so the report can say so; a snapshot with another name is compared
    when it is named on the command line)."""
    out = []
    for p in map(Path, paths):
        if p.is_dir():
            # not only regular files: a FIFO or a device named .pickle is a candidate that the reader
            # refuses unopened (read_regular_file stats it first), so the report names it
            files = sorted(q for q in p.iterdir() if not q.is_dir() and not q.name.startswith("."))
            snapshots = [q for q in files if q.suffix.lower() in SNAPSHOT_SUFFIXES]
            out += snapshots
            if skipped is not None:
                skipped += [q for q in files if q not in snapshots]
        else:
            out.append(p)
    return out


# ------------------------------------------------------------------ which files are ranks of one job

JOB_OVERLAP = 0.5     # ranks of one job share at least half their allocations' power-of-two size classes


def size_classes(recording, device: int) -> dict:
    """The share of a device's allocations in each power-of-two size class (the trace's allocs; the
    live blocks of a state-only dump).  Ranks of one job allocate the same shapes (tensor parallel) or
    the same layers' shapes in other numbers (pipeline stages); another model, parallelism or sequence
    length moves most of them to other classes."""
    sizes = [e["size"] for e in recording.device(device).events if e["action"] == "alloc"]
    if not sizes:
        sizes = [b["size"] for seg in recording.device(device).segments for b in seg["blocks"]
                 if b["state"] == "active_allocated"]
    counts: dict = {}
    for size in sizes:
        counts[int(size).bit_length()] = counts.get(int(size).bit_length(), 0) + 1
    return {k: n / len(sizes) for k, n in counts.items()} if sizes else {}


def overlap(a: dict, b: dict) -> float:
    """The share of allocations two size profiles have in common (histogram intersection, 0 to 1)."""
    return sum(min(share, b.get(k, 0.0)) for k, share in a.items())


def group_jobs(ranks: list) -> list:
    """The ranks grouped by job: one group per recorded setting and size profile, largest first."""
    groups: list = []
    for r in ranks:
        home = next((g for g in groups if g[0].config == r.config
                     and overlap(g[0].sizes, r.sizes) >= JOB_OVERLAP), None)
        if home is None:
            groups.append([r])
        else:
            home.append(r)
    return sorted(groups, key=len, reverse=True)


def apart_words(r: "Rank", lead: "Rank") -> str:
    """Why ``r`` is not a rank of ``lead``'s job."""
    if r.config != lead.config:
        return tr("{name} is not a rank of the same job: recorded with PYTORCH_CUDA_ALLOC_CONF={config}, the others "
                  "with {usual}", name=r.name, config=repr(r.config), usual=repr(lead.config))
    return tr("{name} is not a rank of the same job: only {share}% of its allocations fall in the size classes of "
              "the others' (ranks of one job share at least {least}%): another model, parallelism or sequence "
              "length; it is diagnosed on its own, not compared", name=r.name,
              share=f"{100 * overlap(r.sizes, lead.sizes):.0f}", least=f"{100 * JOB_OVERLAP:.0f}")


def rank_of(name: str, report) -> Rank:
    """One rank's row, read off its doctor report."""
    d = report.diagnosis
    if not hasattr(d, "peak_reserved"):             # a state-only dump: one moment, no trace
        return Rank(name, report, d.allocated, d.reserved, d.unallocated, None, None, d.config, state_only=True)
    retries = report.remedies.reproduction.alloc_retries if report.remedies is not None else None
    return Rank(name, report, d.peak_allocated, d.peak_reserved, d.unallocated_at_peak, retries, d.oom_count,
                d.config, live_need=d.live_need)


def doctor_ranks(paths: list, device_memory: Optional[float] = None, *, profile: Optional[str] = None,
                 device: Optional[int] = None) -> RanksReport:
    """Diagnose every rank's snapshot and compare the ranks of one job (see the module docstring).

    Each file is diagnosed on its own, so the files are spread over the cores (workers.py: one
    process per core this process may use, capped by the ``workers`` setting); the results come
    back in the files' order, so the report is the same with one worker or many."""
    import time
    from .workers import map_in_order, worker_count
    start = time.perf_counter()
    problems, ranks, skipped = [], [], []
    files = snapshot_paths(paths, skipped)
    slots, jobs = _distinct_files(files)
    # The language travels as an argument: a spawned worker starts from the environment alone,
    # and this process may have chosen one (--lang zh) that the environment does not say.
    args = [(path, device_memory, profile, device, language()) for path in jobs]
    done = iter(map_in_order(doctor_file, args, worker_count(len(args))))
    for slot in slots:               # each file's rows, or its one line, in the order the files were given
        got = next(done) if slot is None else slot
        if isinstance(got, str):
            problems.append(got)
        else:
            ranks += got
    problems += [tr("left out {path}: not read (in a folder, the snapshots are its {suffixes} files; name it on the "
                    "command line to compare it too)", path=q, suffixes=tr(" and ").join(SNAPSHOT_SUFFIXES))
                 for q in skipped]
    if len(ranks) < 2:
        raise ValueError(tr("comparing ranks needs at least two readable snapshots, got {n}{problems}: pass every "
                            "rank's file, or the folder that holds them", n=len(ranks),
                            problems=f" ({'; '.join(problems)})" if problems else ""))
    groups = group_jobs(ranks)
    job, apart = groups[0], [r for g in groups[1:] for r in g]
    problems += [apart_words(r, job[0]) for r in apart]
    for r in job:
        if r.state_only and not all(x.state_only for x in job):
            problems.append(tr("{name} has no trace (history was off): its row is the state at one moment, not its "
                               "peaks, and no replay stands behind it", name=r.name))
    out = RanksReport(job, problems, apart=apart)
    if len(job) < 2:
        out.why_words = tr("no comparison: no two of the files are ranks of one job (each is diagnosed on its own)")
        out.setting_words = tr("none can be said for a job: the files are of different jobs")
    else:
        _find_outlier(out)
        _one_setting(out)
    out.seconds = time.perf_counter() - start
    return out


def _distinct_files(files: list) -> tuple:
    """Read each file once here (a refusal or a second copy is one line, as before a replay runs):
    ``slots`` holds that line, or None where the file is to be diagnosed (``jobs``, in order)."""
    from ..trace.snapshot import max_snapshot_bytes, read_regular_file
    slots, jobs, seen = [], [], {}
    for path in files:
        try:
            # stat before read: a file over the size cap (or not a regular file) is refused unread,
            # before it is hashed (trace/snapshot.py's read_regular_file)
            digest = hashlib.sha256(read_regular_file(path, max_snapshot_bytes())).hexdigest()
        except OSError as exc:
            slots.append(tr("left out {path}: cannot be read ({why})", path=path, why=exc.strerror or exc))
            continue
        except Exception as exc:
            slots.append(tr("left out {path}: {why}", path=path, why=_first_line(exc, path)))
            continue
        if digest in seen:
            slots.append(tr("left out {path}: the same file as {other}", path=path, other=seen[digest]))
            continue
        seen[digest] = path.name
        slots.append(None)
        jobs.append(path)
    return slots, jobs


def doctor_file(path: Path, device_memory: Optional[float], profile: Optional[str], device: Optional[int],
                lang: str):
    """One file's rows (every device of a multi-GPU file is a rank of its own), or the one line
    that leaves it out.  Run in a worker process: it reads the file itself (the bytes are not sent
    over a pipe) and catches every error, so one bad file never stops the others."""
    from . import doctor
    from ..trace.recording import load_recording
    from ..trace.snapshot import max_snapshot_bytes, read_regular_file
    with speaking(lang):
        try:
            recording = load_recording(read_regular_file(path, max_snapshot_bytes()), name=str(path))
            devices = [device] if device is not None else (recording.devices_with_events or
                                                            [d for d in recording.devices])
            rows = []
            for index in devices:
                name = path.name if len(devices) == 1 else tr("{name} (device {device})", name=path.name,
                                                              device=index)
                report = doctor(recording, device_memory, device=index, profile=profile)
                rank = rank_of(name, getattr(report, "reports", [report])[0])
                rank.sizes = size_classes(recording, index)
                rows.append(rank)
            return rows
        except Exception as exc:          # one bad file must not stop the comparison of the rest
            return tr("left out {path}: {why}", path=path, why=_first_line(exc, path))


def _first_line(exc: Exception, path) -> str:
    first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return (first[len(str(path)) + 2:] if first.startswith(f"{path}: ") else first)[:300]


def _find_outlier(out: RanksReport) -> None:
    # The rank that needed the most: its reserved peak, or its live memory plus the request that failed.
    top = max(out.ranks, key=lambda r: r.need)
    others = [r for r in out.ranks if r is not top]
    reserved = statistics.median(r.need for r in others)
    allocated = statistics.median(max(r.peak_allocated, r.live_need) for r in others)
    extra = top.need - reserved
    if not is_material(extra, int(reserved)):
        out.why_words = tr("no outlier: every rank's need (peak reserved, or live memory plus a failed request) is "
                           "within {threshold} of the others' median ({median})",
                           threshold=format_bytes(material_threshold(int(reserved))), median=format_bytes(int(reserved)))
        return
    out.outlier = top
    top_live = max(top.peak_allocated, top.live_need)
    more_live = top_live - allocated
    if is_material(more_live, int(allocated)):
        out.why = "more live memory"
        out.why_words = tr("{name} needs {extra} more than the other ranks' median ({need} vs {median}) because it "
                           "holds more live memory: its live tensors peak {more} higher ({live} vs {others}{counted}): "
                           "an uneven share of the work (a pipeline stage, a shard, an embedding), which no allocator "
                           "setting evens out", name=top.name, extra=format_bytes(int(extra)),
                           need=format_bytes(top.need), median=format_bytes(int(reserved)),
                           more=format_bytes(int(more_live)), live=format_bytes(top_live),
                           others=format_bytes(int(allocated)),
                           counted=tr(", the request that failed counted") if top.live_need > top.peak_allocated
                           else "")
    else:
        frag = statistics.median(r.fragmentation for r in others)
        out.why = "the same live memory laid out worse"
        out.why_words = tr("{name} needs {extra} more than the other ranks' median ({need} vs {median}) with the same "
                           "live memory (peak allocated {live} vs {others}): the same live memory laid out worse, "
                           "{frag} reserved but unallocated at its peak against {others_frag} on the others",
                           name=top.name, extra=format_bytes(int(extra)), need=format_bytes(top.need),
                           median=format_bytes(int(reserved)), live=format_bytes(top_live),
                           others=format_bytes(int(allocated)), frag=format_bytes(top.fragmentation),
                           others_frag=format_bytes(int(frag)))


def _serves(report, change: str) -> Optional[str]:
    """None when ``change`` serves this rank (by its own replays), else why not."""
    r = report.remedies
    if r is None:
        return tr("has no trace to replay it on") if not hasattr(report.diagnosis, "peak_reserved") else \
            tr("is not replayed")
    trial = next((t for t in r.trials if t.change == change), None)
    if trial is None or trial.skipped:
        return tr("is not replayed there ({why})", why=trial.skipped if trial else tr("not tried"))
    if r.target is not None and not trial.fits:
        return tr("runs out of memory there ({n} OOM in {target})", n=trial.ooms, target=format_bytes(r.target))
    base = r.recorded.peak_reserved
    if is_material(trial.peak_reserved - base, base):
        return tr("raises its peak reserved to {peak} (from {base})", peak=format_bytes(trial.peak_reserved),
                  base=format_bytes(base))
    return None


NOT_REPLAYED = ("unverified", "whatif-unverified", "not-asked", "start-does-not-fit", "state-only")


def _one_setting(out: RanksReport) -> None:
    lead = out.outlier or max(out.ranks, key=lambda r: r.need)
    v = lead.verdict
    if v.kind == "shortage":
        out.setting_words = tr("none: {name} is short of memory (a shortage, not fragmentation), which no allocator "
                               "setting serves; cut its live memory (its report says where it lives)", name=lead.name)
        return
    if v.kind in NOT_REPLAYED:
        out.setting_words = tr("none can be said: {name}, the rank that needs the most, has no what-if replay that "
                               "ran ({kind}), and a setting is only proposed where its replay ran",
                               name=lead.name, kind=verdict_kind(v.kind))
        return
    trial = v.trial if v.trial is not None and v.trial.kind not in ("recorded", "recorded-on-target") else None
    if trial is None:
        out.setting_words = tr("none needed: {name}, the rank that reserves the most, has no setting worth making "
                               "({kind})", name=lead.name, kind=verdict_kind(v.kind))
        return
    refused = {r.name: why for r in out.ranks if r is not lead for why in [_serves(r.report, trial.change)] if why}
    if not refused:
        out.setting = trial.change
        out.setting_words = tr("`{line}` serves every rank: it is {name}'s remedy, and on every other rank its replay "
                               "raises no peak reserved by a material amount (and fits, where the rank has a GPU to "
                               "fit in)", line=trial.line, name=lead.name)
        return
    out.setting_words = tr("no one setting: `{change}` is {name}'s remedy, but {refusals}", change=trial.change,
                           name=lead.name, refusals=tr("; ").join(tr("on {name} it {why}", name=name, why=why)
                                                                  for name, why in refused.items()))
