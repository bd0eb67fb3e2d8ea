"""The real PyTorch snapshots: where they come from, where the course finds them, how to fetch them.

    python -m allocator_ref traces fetch        # (or `make traces`) download, verify, cache
    python -m allocator_ref traces list         # where each one is found, or that it is missing

Six ``torch.cuda.memory._dump_snapshot()`` pickles, recorded by PyTorch's real
CUDA caching allocator on real GPUs and published by their authors on GitHub
(the table below says which repository, commit and path).  The course never
ships them: a learner downloads them once from those public addresses, and
each file must match the sha256 recorded here before anything reads it.

Where the course looks, in this order (``find_trace``):

1. the ``traces`` course setting (``ALLOCATOR_REF_TRACES`` or course-settings.toml);
   ``none`` there turns the real snapshots off (the chapters then use course-made ones);
2. the per-user cache ``$XDG_CACHE_HOME/allocator-ref/traces`` (``~/.cache/...``),
   where ``fetch`` stores them when the setting is empty;
3. ``../shared/traces`` beside the repository (what the course's CI uses).

A file that does not match its sha256 is never used, wherever it lies.  A
download goes to a temporary file in the target folder and is renamed into
place only once its size and sha256 are right, so an interrupted or corrupted
download leaves nothing behind that a later run could mistake for the real one.

A mirror cannot keep a fetch busy or fill the disk: at most the recorded size
(plus one byte, to tell "too long") is read, each file has a deadline
(``deadline_for``: two minutes plus a second per 16 KiB, whatever the rate), the
whole fetch has one too (``total_deadline_for``: two minutes plus a second per
16 KiB of all the files it fetches; a file it leaves untried says so), and a file
that fails (a folder at its name, a full disk) is reported and the others are
still fetched.
"""
from __future__ import annotations

import hashlib
import http.client
import os
import socket
import sys
import tempfile
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Optional

from .. import settings
from ..editions.messages import translator

tr = translator("doctor")     # traces list / fetch in the reader's language

# The original public address of every file: https://raw.githubusercontent.com/<repo>/<commit>/<path>
RAW_GITHUB = "https://raw.githubusercontent.com"
CHUNK = 1 << 16
TIMEOUT_S = 30                  # one read or connect
DEADLINE_BASE_S = 120           # a file's whole download: this, plus a second per
DEADLINE_RATE = 16 << 10        # this many bytes (3 MiB: about five minutes)


def deadline_for(size: int) -> float:
    """Seconds one download of ``size`` bytes may take in all (a slow but honest link fits)."""
    return DEADLINE_BASE_S + size / DEADLINE_RATE


def total_deadline_for(sizes: Iterable[int]) -> float:
    """Seconds a whole fetch of files of these sizes may take: one download of all their bytes."""
    return deadline_for(sum(sizes))


@dataclass(frozen=True)
class RealTrace:
    name: str           # the file name the course uses
    repo: str           # owner/name on GitHub
    commit: str
    path: str           # inside that repository
    size: int           # bytes
    sha256: str
    what: str

    def url(self, base: str = RAW_GITHUB) -> str:
        return f"{base.rstrip('/')}/{self.repo}/{self.commit}/{self.path}"


# Recorded from each file's public source (see ../shared/traces/PROVENANCE.md in the course's CI).
TRACES = (
    RealTrace("cs336-gpt-ctx128-forward.pickle", "kkaitlyn111/cs336-a2-systems",
              "9aa5e31a129df72cb5cf4997dc8d7f58aecd96c3", "memory_ctx128_forward.pickle", 1037065,
              "1dabc903bf7aee41b0799513abe0cbbd3b61bec5093e8fa94dede2f29361d566",
              "GPT-style LM, forward only, context 128; recording starts after the model was built"),
    RealTrace("cs336-gpt-ctx128-fullstep.pickle", "kkaitlyn111/cs336-a2-systems",
              "c1272e189aa1b8ab6b0a02e08f3f2be1ae122c39", "memory_files/memory_ctx128_fullstep.pickle", 3226220,
              "8c8c955736c7b7a1dbb1dcedf5813404267eb1f8fd532ea3d343c0f0ef58ab0e",
              "the same model, a full training step (forward, backward, optimizer)"),
    RealTrace("cs336-medium-128-training.pickle", "Wedsonlin/assignment2-systems",
              "87b086417ea831f54f7535eb3680f90da0952722", "results/medium_128_training_memory_snapshot.pickle",
              3145433, "8a8f19ab3d15309235c1f547a4d158770e93bb44d6ef21df97ccef444a74c9e1",
              "'medium' LM training steps; every allocation lands in segments made before recording began"),
    RealTrace("hf-finetune-expandable-oom.pickle", "Constructor-Sun/code_location",
              "27ced20ac59ded66b97b54146dc9f428b6e6b026", "memory_snapshot.pickle", 2626235,
              "86ae388c6ff617c91b339318611aff00f0348ab090ea8997c10d4e3fd235a876",
              "Hugging Face Trainer fine-tune with expandable_segments:True, ending in an OOM"),
    RealTrace("small-from-empty.pickle", "silmont2000/assignment2-systems",
              "75d09aad44d65bcf350114d4beaf1d3a7cde42db", "mem_snapshot.pickle", 72171,
              "4c4f58cffaad82e78c1322cd38b3671a5f099ea27d6debf21312ed04051a89c2",
              "97 events recorded from an empty allocator; the smallest complete case"),
    RealTrace("multistream-select-n.pickle", "Maphsge4/select_n",
              "04d383cd77ae217b1349900f5dd12c7ff15f3f2c", "snapshot.pickle", 2401885,
              "0eae2f082d0813e3b1a14dc919b3ef3130689ab54ef8653b2ddb11b98723935f",
              "older PyTorch, ten streams"),
)
BY_NAME = {t.name: t for t in TRACES}


class TraceNotFound(FileNotFoundError):
    """A real snapshot the course needs is in none of the places it looks."""


class UnknownTrace(KeyError, ValueError):
    """A trace name the course does not know (a usage error: ValueError, so the CLI exits 2)."""

    def __str__(self) -> str:                  # KeyError's own str() would quote the message
        return str(self.args[0])


# ------------------------------------------------------------------ where they are

def cache_dir() -> Path:
    """The per-user cache (XDG Base Directory spec): $XDG_CACHE_HOME/allocator-ref/traces."""
    named = os.environ.get("XDG_CACHE_HOME")
    try:
        base = Path(named).expanduser() if named else Path.home() / ".cache"
    except (RuntimeError, ValueError) as exc:     # ~nosuchuser, no HOME and no passwd entry
        what = f"XDG_CACHE_HOME={named!r}" if named else "the home folder (HOME)"
        raise settings.SettingsError(f"{what} cannot be used for the traces cache ({exc}); set "
                                     "ALLOCATOR_REF_TRACES or XDG_CACHE_HOME to a folder") from None
    return base / "allocator-ref" / "traces"


def shared_dir() -> Path:
    """../shared/traces beside the repository root (the course's CI keeps the files there)."""
    return Path(__file__).resolve().parents[2].parent / "shared" / "traces"


OFF = "none"     # ALLOCATOR_REF_TRACES=none: use no real snapshot (what a clone without them sees)


def setting_dir() -> Optional[Path]:
    return settings.folder(settings.get("traces"))       # a path it cannot use is a SettingsError


def search_dirs() -> list[tuple[Path, str]]:
    """(folder, why it is searched), in the order the course looks; none when the setting is 'none'."""
    if settings.value("traces").lower() == OFF:
        return []
    dirs = []
    named = setting_dir()
    if named is not None:
        dirs.append((named, tr("the traces setting ({source})", source=settings.get('traces').source)))
    dirs.append((cache_dir(), tr("the per-user cache")))
    dirs.append((shared_dir(), "../shared/traces"))
    return dirs


def fetch_target() -> Path:
    """Where ``fetch`` stores files: the traces setting when set, else the per-user cache."""
    return setting_dir() or cache_dir()


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(CHUNK), b""):
            h.update(chunk)
    return h.hexdigest()


def verified(path: Path, trace: RealTrace) -> bool:
    """True when the file is there with the recorded size and sha256 (else it is never used)."""
    try:
        return path.is_file() and path.stat().st_size == trace.size and sha256_of(path) == trace.sha256
    except OSError:
        return False


def find_trace(name: str) -> Optional[Path]:
    """The verified copy of a real snapshot, from the first place that has one; None if none has."""
    trace = _known(name)
    for folder, _why in search_dirs():
        path = folder / trace.name
        if verified(path, trace):
            return path
    return None


def require_trace(name: str) -> Path:
    """Like ``find_trace`` but a missing file is an error that says how to get it."""
    path = find_trace(name)
    if path is None:
        looked = "; ".join(f"{folder} ({why})" for folder, why in search_dirs())
        raise TraceNotFound(f"the real PyTorch snapshot {name} is not here (looked in: {looked}). "
                            f"Run `python -m allocator_ref traces fetch` (or `make traces`) once, "
                            f"online, to download it from its public source.")
    return path


def _known(name: str) -> RealTrace:
    if name not in BY_NAME:
        raise UnknownTrace(f"no real trace named {name!r}; the course knows: {', '.join(BY_NAME)}")
    return BY_NAME[name]


# ------------------------------------------------------------------ fetching

@dataclass
class FetchReport:
    target: Path
    fetched: list[str] = field(default_factory=list)
    already: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)     # name -> why

    @property
    def ok(self) -> bool:
        return not self.failed


class DownloadError(Exception):
    """One file could not be downloaded intact; the message says why in plain words."""


class _Watchdog:
    """Shut the download's sockets at its deadline, wherever it is blocked: in the body, or
    in the status line and headers (a mirror trickling those never lets a read time out)."""

    def __init__(self, seconds: float) -> None:
        import threading
        self.sockets: list = []
        self.expired = threading.Event()
        self.timer = threading.Timer(seconds, self._expire)
        self.timer.daemon = True

    def _expire(self) -> None:
        self.expired.set()
        for sock in list(self.sockets):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def opener(self):
        watchdog = self

        class WatchedHTTP(http.client.HTTPConnection):
            def connect(self):
                super().connect()
                watchdog.sockets.append(self.sock)

        class WatchedHTTPS(http.client.HTTPSConnection):
            def connect(self):
                super().connect()
                watchdog.sockets.append(self.sock)

        class HTTPHandler(urllib.request.HTTPHandler):
            def http_open(self, req):
                return self.do_open(WatchedHTTP, req)

        class HTTPSHandler(urllib.request.HTTPSHandler):
            def https_open(self, req):
                return self.do_open(WatchedHTTPS, req, context=self._context)

        return urllib.request.build_opener(HTTPHandler, HTTPSHandler)


def _download(trace: RealTrace, url: str, target: Path, timeout: float,
              deadline: Optional[float] = None, left: Optional[float] = None) -> None:
    """Stream url into a temporary file beside target; rename it into place only if it verifies.
    At most ``trace.size + 1`` bytes are read, within ``deadline`` seconds (``deadline_for``), or
    within ``left``, what remains of the whole fetch's deadline, when that comes first."""
    import time
    seconds = deadline_for(trace.size) if deadline is None else deadline
    which = "the deadline for this file"
    if left is not None and left < seconds:
        seconds, which = left, "what was left of the whole fetch's deadline, --total-deadline"
    give_up = time.monotonic() + seconds
    try:
        fd, tmp_name = tempfile.mkstemp(prefix=f".{trace.name}.", suffix=".part", dir=target)
    except OSError as exc:
        raise DownloadError(f"cannot write in {target} ({exc.strerror})") from None
    tmp = Path(tmp_name)
    watchdog = _Watchdog(seconds)
    watchdog.timer.start()
    h, received = hashlib.sha256(), 0

    def too_slow() -> DownloadError:
        return DownloadError(f"{url} sent only {received:,} of {trace.size:,} bytes in {seconds:.3g} s ({which}); "
                             "run the fetch again, or from another mirror (--from)")
    try:
        with os.fdopen(fd, "wb") as out:
            try:
                with watchdog.opener().open(url, timeout=min(timeout, seconds)) as resp:
                    announced = resp.headers.get("Content-Length")
                    if announced is not None and announced.isdigit() and int(announced) > trace.size:
                        raise DownloadError(f"{url} announces {int(announced):,} bytes; the recorded file has "
                                            f"{trace.size:,}: not the file the course expects (nothing read)")
                    # read1: return what has arrived (read(n) waits for all n bytes, so a
                    # trickling mirror would never reach the deadline check).
                    while received <= trace.size and (chunk := resp.read1(min(CHUNK, trace.size + 1 - received))):
                        out.write(chunk)
                        h.update(chunk)
                        received += len(chunk)
                        if time.monotonic() > give_up:
                            raise too_slow()
            except DownloadError:
                raise
            except Exception as exc:
                if watchdog.expired.is_set():             # the watchdog shut the socket: say why
                    raise too_slow() from None
                _explain(exc, url, trace, target, received, timeout)
        if watchdog.expired.is_set() and received < trace.size:
            raise too_slow()
        _check_body(trace, url, received, announced, h)
        try:
            os.replace(tmp, target / trace.name)      # atomic: a reader sees the old file or the whole new one
        except OSError as exc:
            raise DownloadError(f"verified, but cannot put it at {target / trace.name} ({exc.strerror}); "
                                "move what is there away and run the fetch again") from None
    finally:
        watchdog.timer.cancel()
        tmp.unlink(missing_ok=True)


def _explain(exc: Exception, url: str, trace: RealTrace, target: Path, received: int, timeout: float) -> None:
    """Raise the DownloadError that says, in plain words, what ``exc`` means for this download."""
    if isinstance(exc, urllib.error.HTTPError):
        raise DownloadError(f"{url} answered HTTP {exc.code} {exc.reason}") from None
    if isinstance(exc, urllib.error.URLError):
        raise DownloadError(f"cannot reach {url} ({exc.reason}); are you offline? "
                            f"Try again when online, or copy {trace.name} by hand into {target}") from None
    if isinstance(exc, (socket.timeout, TimeoutError)):
        raise DownloadError(f"{url} stopped answering after {received:,} bytes "
                            f"(timeout {timeout:g} s)") from None
    if isinstance(exc, (ConnectionError, http.client.HTTPException, OSError, ValueError)):   # reset mid-body
        raise DownloadError(f"the connection dropped after {received:,} of {trace.size:,} bytes "
                            f"({exc.__class__.__name__}); run the fetch again") from None
    raise exc


def _check_body(trace: RealTrace, url: str, received: int, announced: Optional[str], h) -> None:
    """The whole body arrived: it must be the recorded file, byte for byte."""
    if received > trace.size:
        raise DownloadError(f"{url} sent more than the recorded {trace.size:,} bytes: not the file the "
                            "course expects (it stopped reading there; nothing was kept)")
    if announced is not None and announced.isdigit() and received != int(announced):
        raise DownloadError(f"the connection dropped after {received:,} of {int(announced):,} bytes; "
                            f"run the fetch again")
    if received != trace.size:
        raise DownloadError(f"got {received:,} bytes, the recorded file has {trace.size:,}: "
                            f"not the file the course expects")
    if h.hexdigest() != trace.sha256:
        raise DownloadError(f"sha256 mismatch: got {h.hexdigest()}, the course records {trace.sha256} "
                            f"(a corrupted or different file; it was not kept)")


STALE_PART_S = 3600


def _remove_stale_parts(target: Path, wanted: list[RealTrace]) -> None:
    """Temporary files a killed fetch left behind (never read: their names are not the trace's).

    Only those older than an hour, so that a fetch running at the same time keeps its own.
    """
    import time
    for trace in wanted:
        for part in target.glob(f".{trace.name}.*.part"):
            try:
                if time.time() - part.stat().st_mtime > STALE_PART_S:
                    part.unlink()
            except OSError:
                pass


def fetch(names: Optional[Iterable[str]] = None, target: Optional[Path] = None, base_url: str = RAW_GITHUB,
          timeout: float = TIMEOUT_S, say: Callable[[str], None] = print,
          deadline: Optional[float] = None, total_deadline: Optional[float] = None) -> FetchReport:
    """Download the named real snapshots (all by default) into target, each verified by sha256.
    ``deadline``: seconds per file (``deadline_for``); ``total_deadline``: seconds for the whole
    fetch, every file together (``total_deadline_for``)."""
    import time
    wanted = [_known(n) for n in names] if names else list(TRACES)
    total = total_deadline_for(t.size for t in wanted) if total_deadline is None else total_deadline
    ends = time.monotonic() + total
    if target is None and settings.value("traces").lower() == OFF:
        raise ValueError(f"the traces setting is {OFF!r} ({settings.get('traces').source}), which turns the "
                         f"real snapshots off; unset it, or pass a folder (--to DIR)")
    target = Path(target) if target is not None else fetch_target()
    report = FetchReport(target)
    try:
        target.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        for t in wanted:
            report.failed[t.name] = f"cannot create {target} ({exc.strerror})"
        say(f"cannot create {target}: {exc.strerror}; set ALLOCATOR_REF_TRACES to a folder you can write")
        return report
    _remove_stale_parts(target, wanted)
    for trace in wanted:
        if verified(target / trace.name, trace):
            report.already.append(trace.name)
            say(f"  ok       {trace.name}: already there, sha256 verified")
            continue
        url = trace.url(base_url)
        left = ends - time.monotonic()
        if left <= 0:
            report.failed[trace.name] = (f"not tried: the whole fetch's deadline ({total:g} s) had passed; run "
                                         "the fetch again (what it verified is kept), or raise --total-deadline")
            say(f"  FAILED   {trace.name}: {report.failed[trace.name]}")
            continue
        try:
            _check_place(target / trace.name)
            _download(trace, url, target, timeout, deadline, left)
        except DownloadError as exc:
            report.failed[trace.name] = str(exc)
            say(f"  FAILED   {trace.name}: {exc}")
        else:
            report.fetched.append(trace.name)
            say(f"  fetched  {trace.name} ({trace.size:,} bytes, sha256 verified) from {url}")
    return report


def _check_place(path: Path) -> None:
    """What is at a trace's name must be a file (replaced once the download verifies) or nothing."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise DownloadError(f"cannot look at {path} ({exc.strerror})") from None
    import stat
    if not stat.S_ISREG(info.st_mode):
        kind = "a folder" if stat.S_ISDIR(info.st_mode) else "not a regular file"
        raise DownloadError(f"{path} is {kind}; move it away and run the fetch again (nothing was downloaded)")


# ------------------------------------------------------------------ the command line

def main_fetch(names: list[str], target: Optional[str], base_url: str, out=None,
               deadline: Optional[float] = None, total_deadline: Optional[float] = None) -> int:
    out = out or sys.stdout
    say = lambda line: print(line, file=out)      # noqa: E731
    for name in names:
        _known(name)                              # an unknown name is a usage error, before anything runs
    if not target and settings.value("traces").lower() == OFF:
        print(tr("the traces setting is {off} ({source}): real snapshots are turned off. Unset it, or pass "
                 "--to DIR.", off=repr(OFF), source=settings.get('traces').source), file=out)
        return 2
    dest = Path(target).expanduser() if target else fetch_target()
    say(tr("fetching {n} real PyTorch snapshot(s) into {dest}", n=len(names) or len(TRACES), dest=dest))
    report = fetch(names or None, dest, base_url, say=say, deadline=deadline, total_deadline=total_deadline)
    if report.ok:
        say(tr("done: {fetched} downloaded, {already} already there. The chapters find them there "
               "(python -m allocator_ref traces list).", fetched=len(report.fetched), already=len(report.already)))
        if dest != fetch_target():
            say(tr("(the course looks in {first} first; set ALLOCATOR_REF_TRACES={dest} so it finds these)",
                   first=fetch_target(), dest=dest))
        return 0
    say(tr("{failed} of {n} not fetched (nothing partial was kept); the chapters fall back to course-made "
           "traces for those and say so.", failed=len(report.failed),
           n=len(report.failed) + len(report.fetched) + len(report.already)))
    return 1


def main_list(out=None) -> int:
    out = out or sys.stdout
    for folder, why in search_dirs():
        print(tr("looks in {folder}  ({why})", folder=folder, why=why), file=out)
    missing = 0
    for trace in TRACES:
        path = find_trace(trace.name)
        missing += path is None
        print(f"  {trace.name:<36} {path if path else tr('MISSING (python -m allocator_ref traces fetch)')}",
              file=out)
    return 1 if missing else 0
