"""Remedies, each proven by replaying the same program under it.

Every remedy is one change to the run's ``PYTORCH_CUDA_ALLOC_CONF`` (or its allocator
backend), replayed by the anchored what-if (``trace/whatif.py``): it starts from PyTorch's
own segments and blocks at the first event, replays the program's actions (allocations,
frees, ``record_stream`` completions, the user's ``empty_cache()``), and lets the
allocator re-derive every decision under the change, on a GPU of the target's usable
memory.  What each replay reports -- peak reserved, fragmentation at that peak, device
calls, flushes on retry (``num_alloc_retries``), and whether any request ran out of
memory -- is the evidence; nothing here is a rule of thumb.  The first replay is the
recorded settings on the recorded GPU: it must reproduce the recorded curve event by
event, or nothing is ranked.

The knobs, as ``c10/cuda/CUDACachingAllocator.cpp`` reads them (``AcceleratorAllocatorConfig``
in 2.11):

* ``expandable_segments:True`` -- one growing segment per stream, mapped page by page
  (``ExpandableSegment``), so freed ends are reused instead of stranded;
* ``max_split_size_mb:N`` -- blocks of N MiB or more are never split
  (``should_split``), and cached ones are released first when memory runs out
  (``release_available_cached_blocks``);
* ``roundup_power2_divisions:N`` -- sizes round up to one of N steps per power of two
  (``round_size``), so similar requests reuse the same blocks;
* ``garbage_collection_threshold:T`` with ``per_process_memory_fraction:F`` (the same cap as
  ``torch.cuda.set_per_process_memory_fraction(F)``, read from the setting in 2.11) -- above T of the allowed memory, free cached blocks not used for a while are released
  (``garbage_collect_cached_blocks``); it does nothing without a fraction;
* ``backend:cudaMallocAsync`` -- the driver's stream-ordered pool instead of PyTorch's cache.
  Its row is a model's prediction: the driver's pool is not PyTorch's code, and how it
  chunks memory is this package's model of it (``policies/stream_ordered.py``).

A setting switched on here applies from the first recorded event on (PyTorch reads
``PYTORCH_CUDA_ALLOC_CONF`` at start-up, so a real run would also have differed before it):
the segments that existed then are kept as they were.  A request the GPU refused (the
trace's ``oom`` entry) is replayed as a request too: a remedy fits only if that request
succeeds and the rest of the recorded run fits.
"""
from __future__ import annotations

import math

import time
from dataclasses import dataclass, field
from typing import Optional

from ..policies.registry import get_policy, make_allocator
from ..device.errors import CudaError
from ..trace.whatif import Anchored, Program, anchored_replay, first_mismatch
from ..editions.messages import translator
from ..units import format_bytes
from .shortage import MATERIAL_SHARE, material_threshold
from .unchanged import answered_by, copy_answer

tr = translator("doctor")

MAX_SPLIT_SWEEP_MB = (512, 256, 128, 64, 32)      # largest first: the smaller change
ROUNDUP_SWEEP = (8, 4)                            # finer first: closer to no rounding
GC_THRESHOLD = 0.8
# A memory-fraction cap is set below the capacity the run was inferred to have: the inference is
# read off flushes and OOMs, not the GPU, and a cap at its very edge would turn the next run's
# slightly larger peak into an OOM.
FRACTION_HEADROOM = 0.02

# How big a change each kind of remedy is, smallest first: the recommendation is the first
# one that fits.  One setting of the same allocator, then settings that change how blocks
# are cut, then one that also needs a line of code, then another allocator altogether (its
# result is a model's prediction, and it costs features: async_costs()).
RANKS = {"expandable": 0, "max_split": 1, "roundup": 2, "gc": 3, "async": 4}

# What PyTorch's backend:cudaMallocAsync gives up (c10/cuda/CUDAMallocAsyncAllocator.cpp: these
# calls raise "cudaMallocAsync does not yet support ..."; chapter 3 teaches the backend).
def async_costs() -> tuple:
    """What the switch to backend:cudaMallocAsync gives up, in the reader's language."""
    return (tr("no memory history or snapshots (_record_memory_history, _snapshot)"),
            tr("no OOM observers"), tr("no IPC of its memory (getIpcDevPtr)"), tr("no expandable segments"),
            tr("one driver pool (the device's default) shared with every library in the process"))


def async_prediction() -> str:
    return tr("a model's prediction: how the driver's pool chunks and reuses memory is this package's assumption "
              "(policies/stream_ordered.py), not PyTorch's code")


@dataclass
class Trial:
    """One anchored replay: the recorded settings, or the recorded settings plus one change."""
    kind: str                          # "recorded", "recorded-on-target", "expandable", "max_split", ...
    change: str                        # the change, as it is written in PYTORCH_CUDA_ALLOC_CONF
    config: str                        # the whole PYTORCH_CUDA_ALLOC_CONF value replayed
    policy: str = "caching"
    fraction: Optional[float] = None   # torch.cuda.set_per_process_memory_fraction in the replay, if any
    allowed: Optional[int] = None      # the bytes that fraction allows (the same on any GPU)
    cap_note: str = ""                 # where the cap comes from (headroom below an inferred or given GPU)
    usable: Optional[int] = None       # the GPU's usable bytes in this replay (None: uncapped)
    peak_reserved: int = 0
    peak_allocated: int = 0
    fragmentation: int = 0             # reserved - allocated at the reserved peak
    frag_at_live_peak: int = 0         # reserved - allocated where the live tensors peak (the start state's
                                       # reserved peak would otherwise hide the run's own)
    device_calls: int = 0
    device_call_ms: float = 0.0        # simulated time spent in cudaMalloc/cudaFree/VMM calls
    alloc_retries: int = 0             # num_alloc_retries: each a full flush with a device sync
    ooms: int = 0
    fits: Optional[bool] = None        # None: no target memory to fit in
    start_does_not_fit: bool = False   # the segments held at the first event exceed the GPU
    peak_at: int = -1                  # the trace event after which reserved peaked (-1: at the start)
    start_held: int = 0                # bytes of segments at the first event (rebuilt)
    start_live: int = 0                # bytes of live blocks among them
    mismatch: Optional[tuple] = None   # "recorded" only: (event, recorded, replayed) where the curves part
    largest_segment: int = 0           # the largest cudaMalloc the replay made (unchanged.py reads it)
    seconds: float = 0.0
    skipped: str = ""                  # why it was not replayed, in words
    skip_reason: str = ""              # the same as a key a program reads: "already-set", "needs-target",
                                       # "not-reproduced", "start-does-not-fit", "replay-failed"
    order: int = 0                     # within its kind: 0 is the smallest change of a sweep

    @property
    def rank(self) -> tuple:
        """How big a change it is (smaller first): its kind's rank, then its place in the sweep."""
        return (RANKS.get(self.kind, -1), self.order)

    @property
    def prediction(self) -> str:
        return async_prediction() if self.kind == "async" else ""

    @property
    def costs(self) -> tuple:
        return async_costs() if self.kind == "async" else ()

    @property
    def line(self) -> str:
        """What to put in the environment (and code) to run with this remedy."""
        text = f"PYTORCH_CUDA_ALLOC_CONF={self.config}" if self.config else "PYTORCH_CUDA_ALLOC_CONF="
        if self.allowed is not None:
            # The fraction is of the GPU this run behaved like: say which, so a reader on another GPU
            # scales it (the bytes it allows are what the replay proved).
            text += tr("  # per_process_memory_fraction: {allowed} of a {total} GPU",
                       allowed=format_bytes(self.allowed), total=format_bytes(round(self.allowed / self.fraction)))
        return text

    def to_json(self) -> dict:
        return {"kind": self.kind, "change": self.change, "config": self.config, "policy": self.policy,
                "fraction": self.fraction, "allowed": self.allowed, "cap_note": self.cap_note or None,
                "line": self.line, "usable": self.usable,
                "peak_reserved": self.peak_reserved, "peak_at": self.peak_at, "peak_allocated": self.peak_allocated,
                "fragmentation_at_peak": self.fragmentation, "fragmentation_at_live_peak": self.frag_at_live_peak, "device_calls": self.device_calls,
                "device_call_ms": self.device_call_ms, "num_alloc_retries": self.alloc_retries,
                "ooms": self.ooms, "fits": self.fits, "start_does_not_fit": self.start_does_not_fit,
                "mismatch": list(self.mismatch) if self.mismatch else None,
                "prediction": self.prediction or None, "costs": list(self.costs),
                "seconds": self.seconds, "skipped": self.skipped or None, "skip_reason": self.skip_reason or None}


@dataclass
class Remedies:
    target: Optional[int]              # bytes the run may reserve on the target GPU (None: no target)
    capacity: Optional[int]            # the target GPU's total memory (usable + the CUDA context)
    target_from: str                   # where the target came from, in words
    trials: list = field(default_factory=list)
    extra_needed: Optional[int] = None    # when nothing fits: bytes more the recorded settings need (replayed)
    search: list = field(default_factory=list)   # the replays that found it: (extra bytes, fits)
    recorded_usable: Optional[int] = None         # the GPU the "as recorded" row replays on (None: uncapped)
    start_held: int = 0                # bytes of segments held at the first event
    start_live: int = 0                # bytes of live tensors among them

    @property
    def reproduction(self) -> Trial:
        """The recorded settings on the recorded GPU: must reproduce the recorded curve."""
        return self.trials[0]

    @property
    def reproduced(self) -> bool:
        return self.reproduction.mismatch is None

    @property
    def recorded(self) -> Trial:
        """The recorded settings on the target GPU (the reproduction itself when they are the same)."""
        return next((t for t in self.trials if t.kind == "recorded-on-target"), self.trials[0])

    @property
    def knobs(self) -> list:
        return [t for t in self.trials if t.kind not in ("recorded", "recorded-on-target") and not t.skipped]

    @property
    def replays(self) -> int:
        return sum(1 for t in self.trials if not t.skipped) + len(self.search)

    @property
    def start_does_not_fit(self) -> bool:
        return self.target is not None and self.start_held > self.target

    @property
    def recommended(self) -> Optional[Trial]:
        """The smallest change that fits, or None (no target, it already fits, or nothing does)."""
        if self.target is None or self.recorded.fits or not self.reproduced:
            return None
        fitting = [t for t in self.knobs if t.fits]
        return min(fitting, key=lambda t: t.rank) if fitting else None

    @property
    def fewer_retries(self) -> Optional[Trial]:
        """When the recorded settings fit only by flushing on retry: the smallest change that
        fits with the fewest flushes (fewer than recorded), or None."""
        base = self.recorded
        if self.target is None or not base.fits or not base.alloc_retries or not self.reproduced:
            return None
        # Material: at least 5% fewer flushes (and at least one); within that of the fewest is a tie,
        # won by PyTorch's own allocator, then the smaller change (shortage.py's materiality).
        slack = max(1, int(MATERIAL_SHARE * base.alloc_retries))
        better = [t for t in self.knobs if t.fits and base.alloc_retries - t.alloc_retries >= slack]
        if not better:
            return None
        return _tie_to_pytorch(better, lambda t: t.alloc_retries, slack)

    @property
    def best_material(self) -> Optional[Trial]:
        """The setting to show when there is no target: among the settings whose saving on peak
        reserved is material (shortage.py), those within the threshold of the lowest peak are a tie,
        won by PyTorch's own allocator (not a backend switch), then the smaller change."""
        if not self.reproduced:
            return None
        base = self.recorded.peak_reserved
        threshold = material_threshold(base)
        material = [t for t in self.knobs if base - t.peak_reserved >= threshold]
        if not material:
            return None
        return _tie_to_pytorch(material, lambda t: t.peak_reserved, threshold)

    @property
    def lowest(self) -> Trial:
        """The trial with the lowest peak reserved; a tie goes to the smaller change (a backend
        switch after any knob with the same peak)."""
        return min((t for t in self.trials if not t.skipped and t.kind != "recorded-on-target"),
                   key=lambda t: (t.peak_reserved, t.rank))


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


def already_set(recorded: str, change: str) -> bool:
    """Is ``change`` (one 'key:value') what the recorded settings already say?"""
    conf = parse_conf(recorded)
    return all(conf.get(k, "").lower() == v.lower() for k, v in parse_conf(change).items())


# ---------------------------------------------------------------- the trials

def plan(recorded: str, target: Optional[int], capacity: Optional[int], inferred: bool = True) -> list[Trial]:
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
        gc.skipped = tr("needs a memory fraction, so a target: the GPU's capacity is unknown (pass --device-memory)")
        gc.skip_reason = "needs-target"
    else:
        allowed = int(target * (1 - FRACTION_HEADROOM)) // 2**20 * 2**20
        # The fraction goes where PyTorch 2.11 reads it, PYTORCH_CUDA_ALLOC_CONF's per_process_memory_fraction
        # (c10/cuda/CUDAAllocatorConfig.cpp, CUDAAllocatorConfig::parseArgs -> parsePerProcessMemoryFraction,
        # [0, 1]), not a line in the script; written to 4 decimals, rounded down so the cap never grows.
        fraction = math.floor(allowed / capacity * 10_000) / 10_000
        gc.fraction, gc.allowed = fraction, int(fraction * capacity)
        gc.config = with_change(gc.config, f"per_process_memory_fraction:{fraction:.4f}")
        words = dict(allowed=f"{allowed / 2**30:.2f}", share=f"{1 - FRACTION_HEADROOM:.0%}",
                     target=f"{target / 2**30:.2f}", headroom=f"{FRACTION_HEADROOM:.0%}")
        gc.cap_note = (tr("the cap allows {allowed} GiB, {share} of the {target} GiB usable this run was inferred "
                          "to have (from its flushes and OOMs, not read from the GPU), leaving {headroom} headroom",
                          **words) if inferred else
                       tr("the cap allows {allowed} GiB, {share} of the {target} GiB usable given with "
                          "--device-memory, leaving {headroom} headroom", **words))
    trials.append(gc)
    trials.append(Trial("async", "backend:cudaMallocAsync", "backend:cudaMallocAsync", policy="stream_ordered"))
    for t in trials[1:]:
        if t.kind == "async":
            if conf.get("backend") == "cudaMallocAsync":
                t.skipped, t.skip_reason = tr("already the recorded backend"), "already-set"
        elif already_set(recorded, t.change):
            t.skipped, t.skip_reason = tr("already set in the recorded run"), "already-set"
    return trials


@dataclass
class Run:
    """What every trial replays: the trace, its program, and the recorded curve to match."""
    events: list
    finals: list
    program: Program
    recorded_curve: list               # memory_reserved() after each trace event, as recorded
    device: int
    profile: str = "h100-80gb"
    replays: dict = field(default_factory=dict)     # each distinct replay's answer (replay_once)


def replay_once(run: Run, config: str, policy: Optional[str], usable: Optional[int], factory=None,
                until_oom: bool = False) -> Anchored:
    """``anchored_replay`` of ``run``'s program, each distinct replay made once.

    A replay is a function of its program, design, settings and capacity: a fresh simulated
    device and allocator each time (Runner), nothing random.  So the capacity search's "as
    recorded" replay on the GPU it settles on is the "as recorded" row's own, not run again.
    A replay with an allocator factory (the memory-fraction row) is never shared."""
    held = run.program.recording
    key = (config, policy or getattr(held, "policy", None), usable, until_oom)
    if factory is None and key in run.replays:
        return run.replays[key]
    out = anchored_replay(run.events, run.finals, run.program, config=config, policy=policy, usable=usable,
                          profile=run.profile, index=run.device, allocator_factory=factory, until_oom=until_oom)
    if factory is None:
        run.replays[key] = out
    return out


def run_trial(trial: Trial, run: Run, usable: Optional[int], capacity: Optional[int] = None,
              fits_only: bool = False) -> Trial:
    """Replay the program under ``trial`` on a GPU of ``usable`` bytes and fill in what it measured.
    ``fits_only``: the caller reads ``fits`` alone, so the replay stops at the first out-of-memory
    error (the rest of the run cannot make it fit); its other figures are then partial."""
    if trial.skipped:
        return trial
    factory = None
    if trial.fraction is not None:
        def factory(dev, config, fraction=trial.fraction):
            allocator = make_allocator(dev, trial.policy, config)
            # The fraction is of the simulated GPU's total, which includes its context reserve.
            allocator.set_per_process_memory_fraction(min(1.0, trial.allowed / dev.info.total_memory))
            return allocator
    start = time.perf_counter()
    config = trial.config if get_policy(trial.policy).reads_alloc_conf else ""
    try:
        out: Anchored = replay_once(run, config, trial.policy, usable, factory, until_oom=fits_only)
    except (ValueError, RuntimeError, CudaError) as exc:
        # A replay that cannot go on (the setting refuses the recorded state, a device call the
        # model forbids) is reported on its row, never raised: the other rows still answer.
        trial.seconds, trial.usable = time.perf_counter() - start, usable
        trial.skipped = tr("the replay failed: {error}", error=str(exc).splitlines()[0][:200])
        trial.skip_reason = "replay-failed"
        if trial.kind == "recorded":
            trial.mismatch = (0, run.recorded_curve[0] if run.recorded_curve else 0, 0)
        return trial
    trial.seconds = time.perf_counter() - start
    trial.usable = usable
    trial.peak_reserved, trial.peak_allocated, trial.fragmentation = out.peak_reserved, out.peak_allocated, \
        out.fragmentation
    trial.frag_at_live_peak = live_peak_fragmentation(out)
    trial.device_calls, trial.device_call_ms, trial.ooms = out.device_calls, out.device_call_us / 1000, out.ooms
    trial.alloc_retries, trial.start_does_not_fit = out.alloc_retries, out.start_does_not_fit
    trial.largest_segment = out.largest_segment
    trial.start_held, trial.start_live, trial.peak_at = out.start_reserved, out.start_live, out.peak_reserved_at
    trial.fits = None if usable is None else (out.ooms == 0 and not out.start_does_not_fit)
    if trial.kind == "recorded":
        trial.mismatch = first_mismatch(run.recorded_curve, out)
        if trial.mismatch is None and out.oom_at != run.program.ooms:
            at = next((p for p in sorted(set(out.oom_at) ^ set(run.program.ooms))), -1)
            trial.mismatch = (at, run.recorded_curve[at], out.peak_reserved)
    return trial


def live_peak_fragmentation(out: Anchored) -> int:
    """Reserved but unallocated bytes at the replay's live peak (its first sample with the most allocated)."""
    if not out.allocated:
        return out.fragmentation
    at = max(range(len(out.allocated)), key=out.allocated.__getitem__)
    return out.reserved[at] - out.allocated[at]


def prescribe(run: Run, recorded: str, target: Optional[int], capacity: Optional[int], target_from: str,
              recorded_usable: Optional[int], live_need: int = 0, adapt=None) -> Remedies:
    """Replay the recorded settings on the recorded GPU, then every remedy on the target.

    ``adapt(trials)`` rewrites the planned trials for another design (npu_advice.npu_trials)."""
    trials = plan(recorded, target, capacity, target == recorded_usable)
    trials = adapt(trials) if adapt is not None else trials
    remedies = Remedies(target, capacity, target_from, trials, recorded_usable=recorded_usable)
    first = run_trial(remedies.trials[0], run, recorded_usable)
    remedies.start_held, remedies.start_live = first.start_held, first.start_live
    if not remedies.reproduced:
        for t in remedies.trials[1:]:
            if not t.skipped:
                t.skipped = tr("not replayed: the \"as recorded\" replay does not reproduce the run")
                t.skip_reason = "not-reproduced"
        return remedies
    if target is not None and target != recorded_usable:
        first = remedies.trials[0]               # (a torch_npu run's trials are NPUTrials)
        remedies.trials.insert(1, type(first)("recorded-on-target", "", recorded, policy=first.policy))
    if remedies.start_does_not_fit:
        for t in remedies.trials[1:]:
            if not t.skipped:
                t.skipped = tr("not replayed: the run does not fit before its first event")
                t.skip_reason = "start-does-not-fit"
        return remedies
    for k, trial in enumerate(remedies.trials[1:], start=1):
        same = None if trial.skipped else answered_by(trial, remedies.trials[:k], run.program, target)
        if same is not None:
            copy_answer(trial, same)     # the same decisions at every step: not replayed again
        else:
            run_trial(trial, run, target, capacity)
    if target is not None and not remedies.recorded.fits and not any(t.fits for t in remedies.knobs):
        find_extra_needed(remedies, run, at_least=live_need - target)
    return remedies


def find_extra_needed(remedies: Remedies, run: Run, at_least: int = 0, precision: int = 16 * 2**20) -> None:
    """How much more memory the recorded settings need to fit: a bisection of replays.

    Nothing fits, so only less live memory (or a bigger GPU) helps.  How much less?  The
    replays answer it for the recorded settings: the smallest extra capacity at which the
    same program runs without an out-of-memory error, to ``precision`` bytes.  The search
    starts from ``at_least`` (the live bytes that exceed the device: less cannot fit),
    doubles the extra until the run fits, then halves the gap.
    """
    recorded = remedies.recorded

    def fits(extra: int) -> bool:
        probe = run_trial(Trial("probe", "", recorded.config), run, remedies.target + extra, fits_only=True)
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


def _tie_to_pytorch(candidates: list, measure, within) -> Trial:
    """The winner among ``candidates``: those within ``within`` of the lowest ``measure`` are a tie,
    won by PyTorch's own allocator settings (not a backend switch), then by the smaller change."""
    lowest = min(measure(t) for t in candidates)
    tied = [t for t in candidates if measure(t) - lowest < within]
    return min(tied, key=lambda t: (t.kind == "async", t.rank))
