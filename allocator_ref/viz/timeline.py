"""Memory over time, as matplotlib figures.

Two pictures, for any trace or snapshot (the real PyTorch ones included):

* :func:`plot_memory` -- three curves: what tensors hold (``memory_allocated``),
  what PyTorch's cache holds (``memory_reserved``), and what the whole device
  shows as used (``nvidia-smi``, i.e. ``total - free`` from ``cudaMemGetInfo``).
  The gaps between them are the lesson: cached-but-unused memory, and the CUDA
  context that no allocator ever sees.
* :func:`plot_active_timeline` -- every allocation as a band stacked on the
  older ones, like PyTorch's memory_viz "Active Memory Timeline".

Where the numbers come from (``memory_curves``):

* a snapshot dict or a list of trace events: ``alloc`` adds its size,
  ``free_requested`` takes it away (sizes are the tensors' requested bytes;
  ``memory_allocated`` also counts the rounding to 512 B, so it is slightly
  higher); ``segment_alloc``/``segment_map`` add to reserved, ``segment_free``/
  ``segment_unmap`` take away.  Recording usually starts mid-run: the level
  before the first event is worked out from the snapshot's final segments.
  A trace alone cannot see the CUDA context, so "nvidia-smi" is reserved plus
  ``context_reserve``;
* frames (a FrameSource or a list of Frames): summed from each state;
* samples recorded from a live allocator with :func:`record_memory`: the real
  ``memory_allocated()``, ``memory_reserved()`` and ``mem_get_info()``.

Every figure of a simulated device must say so: pass ``simulated=True``
(it is detected by itself for samples of a simulated device).
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Iterator, Optional, Sequence

import numpy as np

from ..editions.messages import translator
from ..events import RESERVED_CHANGE
from .blockmap import segments_of
from .chart_language import drawable
from .frames import as_event, settle
from .sizes import format_bytes

# A trace does not record the CUDA context; 500 MiB is the middle of what people
# measure on big GPUs (200-700 MB: pytorch/pytorch#28113, #20532, #107667), the
# same figure as the simulated H100 profile.
DEFAULT_CONTEXT_RESERVE = 500 * 2**20

tr = translator("doctor")          # the charts' words in the reader's language, when a font can draw it
COLORS = {"allocated": "#4c78a8", "reserved": "#f58518", "visible": "#54a24b", "total": "#9d755d"}


@dataclass
class MemoryCurves:
    """Three byte counts per step; ``x`` is the event number (or time)."""

    x: np.ndarray
    allocated: np.ndarray
    reserved: np.ndarray
    visible: np.ndarray
    x_label: str = "event"
    visible_label: str = "what nvidia-smi shows"
    total: Optional[int] = None            # device capacity, when known
    simulated: Optional[bool] = None       # known for live samples; None = not known


@dataclass
class MemorySamples:
    """What :func:`record_memory` collects: one row per allocator event."""

    allocated: list = field(default_factory=list)
    reserved: list = field(default_factory=list)
    visible: list = field(default_factory=list)
    actions: list = field(default_factory=list)
    total: Optional[int] = None
    simulated: Optional[bool] = None


# ---------------------------------------------------------------- reading sources

def _snapshot_of(source: Any) -> Any:
    """A Recording (trace/recording.py) is read through the snapshot it checked."""
    from ..trace.recording import Recording
    return source.snapshot if isinstance(source, Recording) else source


def trace_events(source: Any, device: int = 0) -> list[dict]:
    """The trace-entry dicts of ``source`` (a snapshot dict or Recording, an allocator, or a list of events)."""
    source = _snapshot_of(source)
    if hasattr(source, "trace") and hasattr(source.trace, "dicts"):
        return source.trace.dicts()
    if isinstance(source, dict):
        traces = source.get("device_traces") or source.get("traces") or []
        if traces and isinstance(traces[0], list):
            return [as_event(e) for e in traces[device]] if device < len(traces) else []
        return [as_event(e) for e in traces]
    return [as_event(e) for e in source]


def final_segments(source: Any, device: int = 0) -> Optional[list]:
    """The segments at the end of the trace, when the source has them."""
    source = _snapshot_of(source)
    if isinstance(source, dict) and "segments" in source:
        return [s for s in source["segments"] if s.get("device", 0) == device]
    return None


def memory_curves(source: Any, *, device: int = 0, context_reserve: int = DEFAULT_CONTEXT_RESERVE,
                  x: str = "event") -> MemoryCurves:
    """Allocated, reserved and device-visible bytes over time, from any source (module docstring)."""
    if isinstance(source, MemorySamples):
        return _curves_from_samples(source)
    if _is_frames(source):
        return _curves_from_frames(source, context_reserve)
    return _curves_from_trace(trace_events(source, device), final_segments(source, device),
                              context_reserve, x)


def _is_frames(source: Any) -> bool:
    if hasattr(source, "memory_totals"):
        return True
    return isinstance(source, Sequence) and len(source) > 0 and hasattr(source[0], "segments")


def _curves_from_trace(events: list, segments: Optional[list], context_reserve: int, x: str) -> MemoryCurves:
    d_alloc = np.zeros(len(events), dtype=np.int64)
    d_reserved = np.zeros(len(events), dtype=np.int64)
    sign = {"alloc": (1, 0), "free_requested": (-1, 0), **{a: (0, s) for a, s in RESERVED_CHANGE.items()}}
    for i, event in enumerate(events):
        a, r = sign.get(event.get("action"), (0, 0))
        size = int(event.get("size", 0))
        d_alloc[i], d_reserved[i] = a * size, r * size
    allocated, reserved = np.cumsum(d_alloc), np.cumsum(d_reserved)
    if segments is not None:   # shift so the curves end where the snapshot says they end
        allocated += sum(b.get("requested_size", 0) for s in segments for b in s.get("blocks", ())
                         if b.get("state") == "active_allocated") - (allocated[-1] if len(events) else 0)
        reserved += sum(s.get("total_size", 0) for s in segments) - (reserved[-1] if len(events) else 0)
    else:                      # no snapshot: start at zero, or just high enough to never go negative
        allocated -= min(0, int(allocated.min(initial=0)))
        reserved -= min(0, int(reserved.min(initial=0)))
    xs, label = np.arange(len(events)), tr("event number")
    times = [e.get("time_us") for e in events]
    if x == "time" and events and all(times):
        xs, label = (np.array(times, dtype=np.float64) - times[0]) / 1000.0, tr("time since the first event (ms)")
    return MemoryCurves(xs, allocated, reserved, reserved + context_reserve, label,
                        visible_label=tr("what nvidia-smi shows (reserved + {context} context, estimated)",
                                         context=format_bytes(context_reserve)))


def _curves_from_frames(frames: Any, context_reserve: int) -> MemoryCurves:
    if hasattr(frames, "memory_totals"):
        totals = np.array(frames.memory_totals(), dtype=np.int64).reshape(-1, 2)
    else:
        totals = np.array([(sum(s.get("allocated_size", 0) for s in f.segments),
                            sum(s.get("total_size", 0) for s in f.segments)) for f in frames],
                          dtype=np.int64).reshape(-1, 2)
    allocated, reserved = totals[:, 0], totals[:, 1]
    return MemoryCurves(np.arange(len(totals)), allocated, reserved, reserved + context_reserve, tr("event number"),
                        visible_label=tr("what nvidia-smi shows (reserved + {context} context)",
                                         context=format_bytes(context_reserve)))


def _curves_from_samples(samples: MemorySamples) -> MemoryCurves:
    return MemoryCurves(np.arange(len(samples.allocated)), np.array(samples.allocated, dtype=np.int64),
                        np.array(samples.reserved, dtype=np.int64), np.array(samples.visible, dtype=np.int64),
                        tr("event number"), tr("what nvidia-smi shows"), total=samples.total,
                        simulated=samples.simulated)


@contextmanager
def record_memory(allocator: Any) -> Iterator[MemorySamples]:
    """Sample allocated, reserved and what nvidia-smi shows after every allocator event.

        with record_memory(a) as samples:
            run_my_workload(a)
        plot_memory(samples)

    A listener runs while the allocator reports an event, before its counters
    move, so allocated and reserved are summed from the settled segments (see
    ``frames.settle``); the device's other use (the CUDA context) is
    total - free - memory_reserved(), which is consistent at that moment.
    """
    info = getattr(allocator.device, "info", None)
    samples = MemorySamples(total=getattr(info, "total_memory", None), simulated=getattr(info, "simulated", None))
    busy = False

    def on_event(entry: Any) -> None:
        nonlocal busy
        if busy or entry.action == "snapshot":
            return
        busy = True
        try:
            free, total = allocator.device.mem_get_info()
            other = total - free - allocator.memory_reserved()
            segments = settle(as_event(entry), segments_of(allocator))
            reserved = sum(s["total_size"] for s in segments)
            samples.allocated.append(sum(s["allocated_size"] for s in segments))
            samples.reserved.append(reserved)
            samples.visible.append(reserved + other)
            samples.actions.append(entry.action)
        finally:
            busy = False

    stop = allocator.trace.add_listener(on_event)
    try:
        yield samples
    finally:
        stop()


# ---------------------------------------------------------------- pictures

def _title(text: str, simulated: Optional[bool]) -> str:
    return tr("{title} (simulated)", title=text) if simulated else text


def _new_axes(ax: Any, size=(10, 4.5)):
    import matplotlib.pyplot as plt
    if ax is not None:
        return ax.figure, ax
    fig, ax = plt.subplots(figsize=size, layout="constrained")
    return fig, ax


def _unit(peak: float) -> tuple[str, int]:
    """Plot in GiB or MiB so the axis gets round ticks (bytes would give 9.31323 GiB)."""
    return ("GiB", 2**30) if peak >= 2**30 else ("MiB", 2**20)


@drawable
def plot_memory(source: Any, *, simulated: Optional[bool] = None, ax: Any = None, title: Optional[str] = None,
                device: int = 0, context_reserve: int = DEFAULT_CONTEXT_RESERVE, x: str = "event"):
    """The "nvidia-smi vs PyTorch" picture; returns the matplotlib Figure.

    Lines carry the labels "allocated", "reserved" and "nvidia-smi" (as gids,
    so tests can find them).
    """
    curves = memory_curves(source, device=device, context_reserve=context_reserve, x=x)
    simulated = curves.simulated if simulated is None else simulated
    fig, ax = _new_axes(ax)
    unit, scale = _unit(float(max(curves.visible.max(initial=0), curves.total or 0)))
    drawing = [("allocated", curves.allocated, tr("allocated: bytes held by tensors (memory_allocated)")),
               ("reserved", curves.reserved, tr("reserved: PyTorch's cache (memory_reserved)")),
               ("nvidia-smi", curves.visible, curves.visible_label)]
    for gid, values, label in drawing:
        color = COLORS["visible" if gid == "nvidia-smi" else gid]
        (line,) = ax.step(curves.x, values / scale, where="post", color=color, label=label, linewidth=1.6)
        line.set_gid(gid)
    if len(curves.x):
        ax.fill_between(curves.x, curves.allocated / scale, curves.reserved / scale, step="post",
                        color=COLORS["reserved"], alpha=0.12, label=tr("cached but unused (reserved - allocated)"))
        for values in (curves.allocated, curves.reserved, curves.visible):   # final values, at the right edge
            ax.annotate(format_bytes(int(values[-1])), (curves.x[-1], values[-1] / scale), fontsize=8,
                        xytext=(3, 0), textcoords="offset points", va="center")
    if curves.total:
        ax.axhline(curves.total / scale, color=COLORS["total"], linestyle="--", linewidth=1,
                   label=tr("device capacity {size}", size=format_bytes(curves.total)))
    ax.set_ylabel(tr("memory ({unit})", unit=unit))
    ax.set_xlabel(curves.x_label)
    ax.set_ylim(bottom=0)
    ax.margins(x=0)
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left", fontsize=8, framealpha=0.9)
    ax.set_title(_title(title or tr("Memory over time: what PyTorch counts vs what nvidia-smi shows"), simulated))
    return fig


# ---------------------------------------------------------------- the stacked active-memory timeline

@dataclass
class Lifetime:
    start: int        # event index where the block became active (0 if it already was)
    end: int          # event index where it stopped being active (len(events) if never)
    size: int
    addr: int
    before_recording: bool = False


def active_lifetimes(source: Any, device: int = 0) -> tuple[list[Lifetime], int]:
    """Each allocation's active interval: ``alloc`` to ``free_completed`` (like memory_viz).

    Blocks freed without an ``alloc`` in the trace, and blocks still active in
    the final snapshot that the trace never allocated, existed before the
    recording began: they are alive from event 0.
    """
    events = trace_events(source, device)
    live: dict[int, Lifetime] = {}
    done: list[Lifetime] = []
    for i, event in enumerate(events):
        action, addr = event.get("action"), event.get("addr")
        if action == "alloc":
            live[addr] = Lifetime(i, len(events), int(event.get("size", 0)), addr)
        elif action == "free_completed":
            life = live.pop(addr, None) or Lifetime(0, i, int(event.get("size", 0)), addr, before_recording=True)
            life.end = i
            done.append(life)
    for segment in final_segments(source, device) or ():
        for block in segment.get("blocks", ()):
            if block.get("state") != "inactive" and block["address"] not in live:
                done.append(Lifetime(0, len(events), block.get("requested_size") or block["size"],
                                     block["address"], before_recording=True))
    return done + list(live.values()), len(events)


@drawable
def plot_active_timeline(source: Any, *, simulated: Optional[bool] = None, ax: Any = None,
                         title: Optional[str] = None, device: int = 0, top: int = 150):
    """Stacked bands, one per allocation (the ``top`` largest; the rest summed in one grey band)."""
    lives, n = active_lifetimes(source, device)
    fig, ax = _new_axes(ax)
    x = np.arange(n)          # x = i: the state after event i
    old = [life for life in lives if life.before_recording]
    new = sorted((life for life in lives if not life.before_recording), key=lambda life: life.start)
    big = {id(life) for life in sorted(new, key=lambda life: life.size, reverse=True)[:top]}
    bands, labels, colors = [], [], []
    if old:
        bands.append(_band(old, n))
        labels.append(tr("active before the recording began"))
        colors.append("#bab0ac")
    # Stack in allocation order, older lower, like memory_viz.  The largest get their own colour;
    # runs of smaller ones between them share a grey band (thousands of bands would not draw fast).
    palette = [tuple(c) for c in __import__("matplotlib").colormaps["tab20"].colors]
    run: list = []
    chunk = max(50, (len(new) - top) // 100)
    small_label = tr("{n} smaller allocations (grey, in runs)", n=max(0, len(new) - top))
    for life in new + [None]:
        if run and (life is None or id(life) in big or len(run) >= chunk):
            bands.append(_band(run, n))
            labels.append(small_label)
            small_label = None
            colors.append(("#cfcfcf", "#e3e3e3")[len(bands) % 2])
            run = []
        if life is None:
            break
        if id(life) in big:
            bands.append(_band([life], n))
            labels.append(None)
            colors.append(palette[len(bands) % len(palette)])
        else:
            run.append(life)
    shown = [life for life in new if id(life) in big]
    peak = float(np.sum(bands, axis=0).max(initial=0)) if bands else 0.0
    unit, scale = _unit(peak)
    if bands:
        stack = ax.stackplot(x, np.vstack(bands) / scale, colors=colors, step="post", linewidth=0)
        for poly, label in zip(stack, labels):
            if label:
                poly.set_label(label)
        stack[-1].set_gid("active-top")
    total = np.sum(bands, axis=0) if bands else np.zeros(n)
    (line,) = ax.step(x, total / scale, where="post", color="#33414e", linewidth=0.8,
                      label=tr("total active (peak {size})", size=format_bytes(int(total.max(initial=0)))))
    line.set_gid("active-total")
    ax.set_ylabel(tr("memory ({unit})", unit=unit))
    ax.set_xlabel(tr("event number"))
    ax.set_ylim(bottom=0)
    ax.margins(x=0)
    ax.legend(loc="upper left", fontsize=8, framealpha=0.9)
    ax.set_title(_title(title or tr("Active memory timeline (the {n} largest allocations in colour)", n=len(shown)),
                        simulated))
    return fig


def _band(lives: list, n: int) -> np.ndarray:
    """Bytes after each of the n events for a group of allocations (difference array, then running sum)."""
    delta = np.zeros(n + 1, dtype=np.float64)
    for life in lives:
        delta[life.start] += life.size
        delta[life.end] -= life.size          # end == n: still active when the trace stops
    return np.cumsum(delta)[:n]
