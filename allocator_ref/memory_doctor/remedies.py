"""Remedies, each proven by replaying the same trace under it.

Every remedy is one change to the run's ``PYTORCH_CUDA_ALLOC_CONF`` (or its allocator
backend), replayed on the reference allocator over the same requests
(``replay(..., verify=False)``) on a simulated GPU of the target size.  What each replay
reports -- peak reserved, fragmentation at that peak, device calls, and whether any
request ran out of memory -- is the evidence; nothing here is a rule of thumb.

The knobs, as ``c10/cuda/CUDACachingAllocator.cpp`` reads them (``AcceleratorAllocatorConfig``
in 2.11):

* ``expandable_segments:True`` -- one growing segment per stream, mapped page by page
  (``ExpandableSegment``), so freed ends are reused instead of stranded;
* ``max_split_size_mb:N`` -- blocks of N MiB or more are never split
  (``should_split``), and cached ones are released first when memory runs out
  (``release_available_cached_blocks``);
* ``roundup_power2_divisions:N`` -- sizes round up to one of N steps per power of two
  (``round_size``), so similar requests reuse the same blocks;
* ``garbage_collection_threshold:T`` with ``torch.cuda.set_per_process_memory_fraction(F)``
  -- above T of the allowed memory, free cached blocks not used for a while are released
  (``garbage_collect_cached_blocks``); it does nothing without a fraction;
* ``backend:cudaMallocAsync`` -- the driver's stream-ordered pool instead of PyTorch's cache.

A request the GPU refused (the trace's ``oom`` entry) is replayed as a request too: a
remedy fits only if that request succeeds and the rest of the recorded run fits.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Optional

from ..caching.allocator import CachingAllocator
from ..trace.replay import replay

MAX_SPLIT_SWEEP_MB = (512, 256, 128, 64, 32)      # largest first: the smaller change
ROUNDUP_SWEEP = (8, 4)                            # finer first: closer to no rounding
GC_THRESHOLD = 0.8

# How big a change each kind of remedy is, smallest first: the recommendation is the first
# one that fits.  One setting of the same allocator, then settings that change how blocks
# are cut, then one that also needs a line of code, then another allocator altogether.
RANKS = {"expandable": 0, "max_split": 1, "roundup": 2, "gc": 3, "async": 4}


@dataclass
class Trial:
    """One replay of the trace: the recorded settings, or the recorded settings plus one change."""
    kind: str                          # "recorded", "expandable", "max_split", "roundup", "gc", "async"
    change: str                        # the change, as it is written in PYTORCH_CUDA_ALLOC_CONF
    config: str                        # the whole PYTORCH_CUDA_ALLOC_CONF value replayed
    policy: str = "caching"
    fraction: Optional[float] = None   # torch.cuda.set_per_process_memory_fraction in the replay, if any
    allowed: Optional[int] = None      # the bytes that fraction allows (the same on any GPU)
    peak_reserved: int = 0
    peak_allocated: int = 0
    fragmentation: int = 0             # reserved - allocated at the reserved peak
    device_calls: int = 0
    ooms: int = 0
    fits: Optional[bool] = None        # None: no target memory to fit in
    seconds: float = 0.0
    skipped: str = ""                  # why it was not replayed
    order: int = 0                     # within its kind: 0 is the smallest change of a sweep

    @property
    def rank(self) -> tuple:
        """How big a change it is (smaller first): its kind's rank, then its place in the sweep."""
        return (RANKS.get(self.kind, -1), self.order)

    @property
    def line(self) -> str:
        """What to put in the environment (and code) to run with this remedy."""
        text = f"PYTORCH_CUDA_ALLOC_CONF={self.config}" if self.config else "PYTORCH_CUDA_ALLOC_CONF="
        if self.allowed is not None:
            # A fraction of *your* GPU's total that allows the target bytes: written as a division
            # so it is right on whatever GPU runs it.
            text += ("  # and in the script: torch.cuda.set_per_process_memory_fraction("
                     f"{self.allowed} / torch.cuda.get_device_properties(0).total_memory)")
        return text

    def to_json(self) -> dict:
        return {"kind": self.kind, "change": self.change, "config": self.config, "policy": self.policy,
                "fraction": self.fraction, "allowed": self.allowed, "line": self.line, "peak_reserved": self.peak_reserved,
                "peak_allocated": self.peak_allocated, "fragmentation_at_peak": self.fragmentation,
                "device_calls": self.device_calls, "ooms": self.ooms, "fits": self.fits,
                "seconds": self.seconds, "skipped": self.skipped or None}


@dataclass
class Remedies:
    target: Optional[int]              # bytes the run may reserve on the target GPU (None: no target)
    capacity: Optional[int]            # the simulated GPU's total memory for the replays
    target_from: str                   # where the target came from, in words
    trials: list = field(default_factory=list)
    extra_needed: Optional[int] = None    # when nothing fits: bytes more the recorded settings need (replayed)
    search: list = field(default_factory=list)   # the replays that found it: (extra bytes, fits)

    @property
    def recorded(self) -> Trial:
        return self.trials[0]

    @property
    def replays(self) -> int:
        return sum(1 for t in self.trials if not t.skipped) + len(self.search)

    @property
    def recommended(self) -> Optional[Trial]:
        """The smallest change that fits, or None (no target, it already fits, or nothing does)."""
        if self.target is None or self.recorded.fits:
            return None
        fitting = [t for t in self.trials[1:] if t.fits and not t.skipped]
        return min(fitting, key=lambda t: t.rank) if fitting else None

    @property
    def lowest(self) -> Trial:
        """The trial with the lowest peak reserved (for runs that fit already)."""
        return min((t for t in self.trials if not t.skipped), key=lambda t: (t.peak_reserved, t.rank))


# ---------------------------------------------------------------- settings text

def parse_conf(text: str) -> dict:
    """``PYTORCH_CUDA_ALLOC_CONF`` as {key: value}, in order (commas inside [...] kept)."""
    items, depth, current = [], 0, ""
    for ch in text or "":
        depth += (ch == "[") - (ch == "]")
        if ch == "," and depth == 0:
            items.append(current)
            current = ""
        else:
            current += ch
    items.append(current)
    out = {}
    for item in items:
        if item.strip():
            key, _, value = item.partition(":")
            out[key.strip()] = value.strip()
    return out


def with_change(recorded: str, change: str) -> str:
    """The recorded settings with one more (or one overridden): 'a:1' + 'b:2' -> 'a:1,b:2'."""
    conf = parse_conf(recorded)
    conf.update(parse_conf(change))
    return ",".join(f"{k}:{v}" for k, v in conf.items())


# ---------------------------------------------------------------- the trials

def failed_requests_as_allocs(snapshot: dict) -> dict:
    """The snapshot with each refused request (``oom`` entry) turned into a request to replay.

    A plain replay replays ``alloc`` entries only; PyTorch records the request that failed
    solely in its ``oom`` entry (``DeviceCachingAllocator::malloc``).  The address is one no
    real allocation has (above 2**63, where no GPU maps memory, so the snapshot
    still passes the loader's checks), and nothing frees it: the run stopped there.
    """
    traces, n = [], 0
    for events in snapshot.get("device_traces", []):
        out = []
        for e in events:
            if e.get("action") == "oom":
                n += 1
                e = {"action": "alloc", "addr": (1 << 63) + 512 * n, "size": e.get("size", 0), "stream": e.get("stream", 0)}
            out.append(e)
        traces.append(out)
    return dict(snapshot, device_traces=traces)


def plan(recorded: str, target: Optional[int], capacity: Optional[int]) -> list[Trial]:
    """The recorded settings first, then every single change, each with its whole settings line."""
    conf = parse_conf(recorded)
    trials = [Trial("recorded", "", recorded)]
    trials.append(Trial("expandable", "expandable_segments:True", with_change(recorded, "expandable_segments:True")))
    for order, mb in enumerate(MAX_SPLIT_SWEEP_MB):
        change = f"max_split_size_mb:{mb}"
        trials.append(Trial("max_split", change, with_change(recorded, change), order=order))
    for order, n in enumerate(ROUNDUP_SWEEP):
        change = f"roundup_power2_divisions:{n}"
        trials.append(Trial("roundup", change, with_change(recorded, change), order=order))
    change = f"garbage_collection_threshold:{GC_THRESHOLD}"
    gc = Trial("gc", change, with_change(recorded, change))
    if target is None or capacity is None:
        gc.skipped = "needs a memory fraction, so a target: pass --device-memory"
    else:
        gc.fraction, gc.allowed = target / capacity, target
    trials.append(gc)
    trials.append(Trial("async", "backend:cudaMallocAsync", "backend:cudaMallocAsync", policy="stream_ordered"))
    for t in trials[1:]:
        if t.kind == "expandable" and conf.get("expandable_segments", "").lower() == "true":
            t.skipped = "already set in the recorded run"
        if t.kind == "async" and conf.get("backend") == "cudaMallocAsync":
            t.skipped = "already the recorded backend"
    return trials


def run_trial(trial: Trial, snapshot: dict, device: int, capacity: Optional[int], profile: str) -> Trial:
    """Replay ``snapshot`` under ``trial`` and fill in what the replay measured."""
    if trial.skipped:
        return trial
    factory = None
    if trial.fraction is not None:
        def factory(dev, config, fraction=trial.fraction):
            allocator = CachingAllocator(dev, config)
            allocator.set_per_process_memory_fraction(float(fraction))
            return allocator
    start = time.perf_counter()
    config = trial.config if trial.policy == "caching" else ""
    result = replay(snapshot, factory, config=config, policy=trial.policy, profile=profile,
                    device_memory=capacity, progress=False)
    trial.seconds = time.perf_counter() - start
    dev = next(d for d in result.devices if d.device == device)
    trial.peak_reserved, trial.peak_allocated = dev.peak_reserved, dev.peak_allocated
    trial.fragmentation, trial.device_calls, trial.ooms = dev.fragmentation_at_peak, dev.device_calls, dev.ooms_raised
    trial.fits = None if capacity is None else dev.ooms_raised == 0
    return trial


def prescribe(snapshot: dict, device: int, recorded: str, target: Optional[int], capacity: Optional[int],
              target_from: str, profile: str = "h100-80gb", live_need: int = 0) -> Remedies:
    """Replay the recorded settings and every remedy; the evidence for the recommendation."""
    runnable = failed_requests_as_allocs(snapshot)
    remedies = Remedies(target, capacity, target_from, plan(recorded, target, capacity))
    for trial in remedies.trials:
        run_trial(trial, runnable, device, capacity, profile)
    if target is not None and not any(t.fits for t in remedies.trials if not t.skipped):
        find_extra_needed(remedies, runnable, device, profile, at_least=live_need - target)
    return remedies


def find_extra_needed(remedies: Remedies, snapshot: dict, device: int, profile: str, at_least: int = 0,
                      precision: int = 16 * 2**20) -> None:
    """How much more memory the recorded settings need to fit: a bisection of replays.

    Nothing fits, so only less live memory (or a bigger GPU) helps.  How much less?  The
    replays answer it for the recorded settings: the smallest extra capacity at which the
    same requests run without an out-of-memory error, to ``precision`` bytes.  The search
    starts from ``at_least`` (the live bytes that exceed the device: less cannot fit),
    doubles the extra until the run fits, then halves the gap.
    """
    recorded = remedies.trials[0]

    def fits(extra: int) -> bool:
        probe = run_trial(Trial("recorded", "", recorded.config), snapshot, device, remedies.capacity + extra, profile)
        remedies.search.append((extra, bool(probe.fits)))
        return bool(probe.fits)

    lo, hi = 0, max(0, at_least) + precision
    while not fits(hi):                  # double until it fits (a GPU of 1 PiB more ends the search)
        lo, hi = hi, hi * 2
        if hi > 2**50:
            return
    while hi - lo > precision:           # then halve the gap
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if fits(mid) else (mid, hi)
    remedies.extra_needed = hi


def context_reserve(profile: str) -> int:
    """Bytes the simulated GPU keeps for the CUDA context (they are not the allocator's to use)."""
    from ..device.sim import SimDevice
    return SimDevice(profile).info.context_reserve
