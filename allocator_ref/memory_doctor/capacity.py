"""How much memory the GPU that recorded the run let the allocator have, read off the run.

A snapshot does not record the GPU's size, but a run that flushed its cache on retry or ran
out of memory tells it.  In ``DeviceCachingAllocator::malloc`` a new segment is asked for
(``alloc_block`` -> cudaMalloc) only when the cache cannot serve the request; when
cudaMalloc fails, the allocator releases cached segments (``release_cached_blocks``) and
tries again, and raises the OutOfMemoryError only when the last try fails.  So for the
memory ``U`` this process could hold:

* every cudaMalloc that succeeded fit: ``U >= reserved after it``, so ``U >= the peak of
  reserved over every event``;
* every one that failed did not: ``U < reserved before the flush + the segment it asked
  for`` (and, at an OOM, ``U < reserved at the error + the request's segment``).

That interval is a candidate; the replays decide.  The "as recorded" anchored replay
(``trace/whatif.py``) runs on a GPU of ``U`` usable bytes at the interval's ends (and at
what the OOM's cudaMemGetInfo said, reserved + free): the values where it reproduces the
recorded curve -- every flush and every OOM where PyTorch had them -- are the capacity this
run behaved like.  A run that never flushed and never failed says nothing: its capacity is
unknown and the replays are uncapped.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Optional

from ..caching.config import AllocatorConfig, get_allocation_size, round_size
from ..device.errors import CudaError
from ..trace.whatif import RELEASES, Anchored, Program, first_mismatch
from ..editions.messages import translator
from ..units import format_bytes
from .device_words import CUDA, DeviceWords, a_device

tr = translator("doctor")

GiB = 2**30

MiB = 2**20


@dataclass
class Capacity:
    known: bool
    low: Optional[int] = None         # the smallest usable bytes that reproduce the run (replayed)
    high: Optional[int] = None        # the largest (replayed)
    bound_low: Optional[int] = None   # what the recorded events allow, before any replay
    bound_high: Optional[int] = None
    driver: Optional[int] = None      # reserved + device_free at the first OOM (cudaMemGetInfo)
    target: Optional[int] = None      # the usable bytes the what-ifs run on by default
    evidence: str = ""                # which events tell it ("1 flush on retry in the trace")
    told: str = ""                    # the same without where ("1 flush on retry"), for capacity_words
    probes: list = field(default_factory=list)     # (usable bytes, reproduced?) for each replay
    contradiction: str = ""           # when no capacity reproduces the run

    @property
    def replays(self) -> int:
        return len(self.probes)

    def to_json(self) -> dict:
        return {"known": self.known, "low": self.low, "high": self.high, "bound_low": self.bound_low,
                "bound_high": self.bound_high, "driver": self.driver, "target": self.target,
                "evidence": self.evidence, "probes": [list(p) for p in self.probes],
                "contradiction": self.contradiction or None}


def reproduces(recorded: list, program: Program, run: Anchored) -> bool:
    """Does this "as recorded" replay make the recorded curve, flushes and OOMs included?"""
    return not run.start_does_not_fit and first_mismatch(recorded, run) is None and run.oom_at == program.ooms


def failure_bounds(events: list, reserved: list, program: Program, config: str) -> list:
    """For each cudaMalloc the run saw fail: (trace event, reserved then + bytes it asked for)."""
    conf = AllocatorConfig.parse(config) if config else AllocatorConfig()
    out = []
    for j in sorted(set(program.ladder_flushes) | set(program.ooms)):
        start = j
        while start > 0 and events[start - 1]["action"] not in ("alloc", "oom", "free_requested"):
            start -= 1
        first_release = next((i for i in range(start, j) if events[i]["action"] in RELEASES), None)
        asked = next((events[i]["size"] for i in range(first_release or start, j)
                      if events[i]["action"] in ("segment_alloc", "segment_map")), None)
        if asked is None:
            asked = get_allocation_size(round_size(events[j]["size"], conf), conf)
        if first_release is not None and first_release > 0:
            out.append((j, reserved[first_release - 1] + asked))
        if events[j]["action"] == "oom":
            out.append((j, reserved[j] + asked))
    return out


def infer_capacity(events: list, reserved: list, program: Program, config: str,
                   replay_at: Callable[[Optional[int]], Anchored]) -> Capacity:
    """The usable capacity that reproduces the run's flushes and OOMs (see the module doc)."""
    if not program.ladder_flushes and not program.ooms:
        return Capacity(False, evidence=tr("the run never flushed its cache on retry and never ran out of memory"))
    low = max(reserved)
    fails = failure_bounds(events, reserved, program, config)
    high = min(b for _, b in fails) - 1 if fails else None
    oom = next((events[k] for k in program.ooms), None)
    driver = None
    if oom is not None:       # PyTorch's oom entry carries what cudaMemGetInfo said was free
        driver = reserved[program.ooms[0]] + int(oom.get("device_free", oom.get("addr", 0)))
    n_flush, n_oom = len(program.ladder_flushes) - len(set(program.ladder_flushes) & set(program.ooms)), len(program.ooms)
    words = []
    if n_flush:
        words.append(tr("{n} flush on retry", n=n_flush) if n_flush == 1 else tr("{n} flushes on retry", n=n_flush))
    if n_oom:
        words.append(tr("{n} out-of-memory error", n=n_oom) if n_oom == 1 else
                     tr("{n} out-of-memory errors", n=n_oom))
    told = tr(" and ").join(words)
    cap = Capacity(True, bound_low=low, bound_high=high, driver=driver, told=told,
                   evidence=tr("{events} in the trace", events=told))
    if high is not None and high < low:
        cap.known = False
        cap.contradiction = tr("a cudaMalloc succeeded with {low} bytes reserved but one failed below {high}: the "
                               "GPU's free memory changed during the run (another process?)", low=low, high=high + 1)
        return cap
    candidates = [low] + ([driver] if driver is not None and low <= driver <= (high or driver) else [])
    if high is not None:
        candidates.append(high)
    def ok_at(usable: int) -> bool:
        try:
            return reproduces(reserved, program, replay_at(usable))
        except (ValueError, RuntimeError, CudaError):     # a replay that cannot run reproduces nothing
            return False

    good = []
    for usable in dict.fromkeys(candidates):
        ok = ok_at(usable)
        cap.probes.append((usable, ok))
        if ok:
            good.append(usable)
    if not good and high is not None:
        # The ends disagree with the replay: try the middle before giving up.
        mid = (low + high) // 2
        ok = ok_at(mid)
        cap.probes.append((mid, ok))
        if ok:
            good.append(mid)
    if not good:
        cap.known = False
        cap.contradiction = tr("no capacity between the recorded bounds makes the \"as recorded\" replay flush "
                               "and fail where PyTorch did")
        return cap
    cap.low, cap.high = min(good), max(good)
    cap.target = driver if driver in good else cap.low
    return cap


def capacity_words(cap, words: DeviceWords = CUDA) -> str:
    """The capacity the run told, in one sentence (``words``: a GPU's names or an NPU's, device_words.py)."""
    if cap.known:
        # Two decimals: the whole point is how narrow the range is (format_bytes keeps one).
        span = (f"{cap.low / GiB:.2f} GiB" if cap.low == cap.high else
                f"{cap.low / GiB:.2f}-{cap.high / GiB:.2f} GiB")
        text = tr("this run behaved like {a_device} with {span} usable: the \"as recorded\" replay reproduces its "
                  "{evidence} on any of those ({n} replays)", span=span, evidence=cap.told, n=cap.replays,
                  a_device=a_device(words))
        if cap.driver is not None and cap.target == cap.driver:
            text += tr("; the target is {size}, what {mem_get_info} said at the OOM (reserved + free)",
                       size=format_bytes(cap.driver), mem_get_info=words.mem_get_info)
        elif cap.target is not None:
            text += tr("; the target is the smallest, {size}", size=format_bytes(cap.target))
        return text
    if cap.contradiction:
        return tr("capacity unknown ({why}); the replays are uncapped", why=cap.contradiction)
    return tr("capacity unknown: {evidence}, so nothing tells the {device}'s size; the replays are uncapped",
              evidence=cap.evidence, device=words.device)
