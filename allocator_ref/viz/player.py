"""Widgets: play a trace, watch a live allocator, compare two allocators.

* :class:`TracePlayer` -- Play/Pause, step back/forward, a slider over the
  events and a speed control; shows the block map after each event with what
  changed outlined in red, and a one-line caption.
* :class:`LiveView` -- bound to an allocator; redraws after every event it
  reports, for "try it yourself" cells.
* :class:`Compare` -- two block maps that step together over the same
  workload (two policies or two configs) plus both memory curves.

Everything is drawn as inline SVG inside ``ipywidgets.HTML``: nothing is
downloaded at run time, so the widgets work offline, in JupyterLab and in
Colab.  In Colab, run this once per notebook before showing a widget::

    from google.colab import output
    output.enable_custom_widget_manager()

The widgets need a live kernel to step (each step renders in Python).  In
tests they can be built and driven without one: set ``.value`` or call
``step(+1)`` and read ``.caption.value`` / ``.picture.value``.
"""
from __future__ import annotations

from typing import Any, Optional, Sequence

import ipywidgets as widgets

from ..editions.messages import translator
from ..events import FAILED_CALL, USER_CALLS
from .blockmap import render_blockmap, segments_of
from .frames import Frame, as_event, changed_addresses, describe, settle
from .minichart import MiniChart
from .sizes import format_bytes

SPEEDS = [("0.25x", 2000), ("0.5x", 1000), ("1x", 500), ("2x", 250), ("4x", 120), ("8x", 60)]
CURVE_COLORS = {"allocated": "#4c78a8", "reserved": "#f58518"}
tr = translator("doctor")          # the widgets' words in the reader's language (the snapshot tools' catalogue)


def _scroll_box(svg: str, max_height: int) -> str:
    """Long block maps scroll inside the widget instead of pushing the controls off screen."""
    return f'<div class="ar-picture" style="max-height:{max_height}px;overflow:auto">{svg}</div>'


def _caption_html(frame: Frame, total: int) -> str:
    event = frame.event
    return (f'<div class="ar-caption" data-index="{frame.index}" data-action="{event.get("action", "")}" '
            f'style="font-family:sans-serif;font-size:14px;min-height:2.6em">'
            f'<b>{tr("event {i} of {n}", i=frame.index + 1, n=total)}</b> · <code>{event.get("action", "")}</code> · '
            f'{frame.caption}</div>')


class _Controls:
    """Play, step buttons, slider and speed, wired together; ``on_step(i)`` is called on every change."""

    def __init__(self, n: int, on_step, interval_ms: int = 500):
        last = max(0, n - 1)
        self.play = widgets.Play(value=0, min=0, max=last, step=1, interval=interval_ms,
                                 description=tr("Play"), show_repeat=False)
        # no readout: the caption says "event i of n" (1-based), the slider would say i - 1
        self.slider = widgets.IntSlider(value=0, min=0, max=last, description=tr("event"), readout=False,
                                        layout=widgets.Layout(width="420px"))
        self.back = widgets.Button(description=tr("◀ back"), tooltip=tr("previous event"),
                                   layout=widgets.Layout(width="80px"))
        self.forward = widgets.Button(description=tr("next ▶"), tooltip=tr("next event"),
                                      layout=widgets.Layout(width="80px"))
        self.speed = widgets.SelectionSlider(options=SPEEDS, value=interval_ms if interval_ms in dict(SPEEDS).values()
                                             else 500, description=tr("speed"), layout=widgets.Layout(width="260px"))
        # A Python-side link (not jslink): it also works without a browser, in tests.
        self._link = widgets.link((self.play, "value"), (self.slider, "value"))
        self.back.on_click(lambda _b: self.step(-1))
        self.forward.on_click(lambda _b: self.step(+1))
        self.speed.observe(lambda change: setattr(self.play, "interval", change["new"]), names="value")
        self.slider.observe(lambda change: on_step(change["new"]), names="value")
        self.box = widgets.HBox([self.play, self.back, self.forward, self.slider, self.speed])

    def step(self, delta: int) -> None:
        self.slider.value = min(self.slider.max, max(self.slider.min, self.slider.value + delta))


class TracePlayer(widgets.VBox):
    """Step through frames (a FrameSource or a list of Frames) with the block map and a caption.

        with record_frames(a) as frames:
            ...
        TracePlayer(frames, simulated=True)
    """

    def __init__(self, frames: Sequence[Frame], *, title: str = "", simulated: bool = False,
                 interval_ms: int = 500, max_height: int = 420, show_curves: bool = True):
        if len(frames) == 0:
            raise ValueError("no frames to play: record some allocator events first")
        self.frames, self.title, self.simulated, self.max_height = frames, title, simulated, max_height
        self.caption = widgets.HTML()
        self.picture = widgets.HTML()
        self.curves = widgets.HTML()
        self._chart = _memory_chart([frames], ["" ], title=tr("memory after each event")) if show_curves else None
        self.controls = _Controls(len(frames), self.show, interval_ms)
        super().__init__([self.controls.box, self.caption, self.picture, self.curves])
        self.add_class("ar-trace-player")
        self.show(0)

    @property
    def value(self) -> int:
        """The event shown now (0 = after the first event)."""
        return self.controls.slider.value

    @value.setter
    def value(self, i: int) -> None:
        self.controls.slider.value = i

    def step(self, delta: int = 1) -> None:
        self.controls.step(delta)

    def show(self, i: int) -> None:
        frame = self.frames[i]
        self.caption.value = _caption_html(frame, len(self.frames))
        self.picture.value = _scroll_box(render_blockmap(frame.segments, highlight=frame.changed,
                                                         segment_ids=frame.segment_ids, title=self.title,
                                                         simulated=self.simulated), self.max_height)
        if self._chart is not None:
            self.curves.value = self._chart.svg(at=i)


class LiveView(widgets.VBox):
    """A block map bound to an allocator, redrawn after every event it reports.

        a = ar.CachingAllocator(dev)
        view = LiveView(a); display(view)
        x = a.malloc(12 * 2**20)      # the picture updates, the caption says what happened
        view.close()                  # stop listening
    """

    def __init__(self, allocator: Any, *, title: str = "", simulated: Optional[bool] = None, max_height: int = 420):
        info = getattr(getattr(allocator, "device", None), "info", None)
        self.allocator, self.title, self.max_height = allocator, title, max_height
        self.simulated = bool(getattr(info, "simulated", False)) if simulated is None else simulated
        self.caption = widgets.HTML()
        self.picture = widgets.HTML()
        self.numbers = widgets.HTML()
        self.events_seen = 0
        self._segments = segments_of(allocator)
        self._busy = False
        self._previous: Optional[dict] = None
        self._stop = allocator.trace.add_listener(self._on_event)
        super().__init__([self.caption, self.picture, self.numbers])
        self.add_class("ar-live-view")
        self._draw(frozenset(), tr("Ready: call malloc / free / empty_cache on the allocator and watch."))

    def _on_event(self, entry: Any) -> None:
        if self._busy or entry.action == "snapshot":
            return
        self._busy = True              # reading the allocator's segments reports a "snapshot" event
        try:
            event = as_event(entry)
            before, after = self._segments, settle(event, segments_of(self.allocator))
            ids = {s["address"]: i for i, s in enumerate(after)}
            self.events_seen += 1
            text = f"<code>{event['action']}</code> · " + describe(event, before, after, ids, self._previous)
            self._segments, self._previous = after, event
            self._draw(changed_addresses(before, after), text)
        finally:
            self._busy = False

    def _draw(self, changed: frozenset, text: str) -> None:
        self.caption.value = (f'<div class="ar-caption" data-events="{self.events_seen}" '
                              f'style="font-family:sans-serif;font-size:14px">{text}</div>')
        self.picture.value = _scroll_box(render_blockmap(self._segments, highlight=changed, title=self.title,
                                                         simulated=self.simulated), self.max_height)
        self.numbers.value = _numbers_html(self.allocator, self._segments)

    def close(self) -> None:
        """Stop following the allocator, and close the widgets."""
        self._stop()
        super().close()


def _numbers_html(allocator: Any, segments: list) -> str:
    """allocated / reserved / what nvidia-smi shows, for the state in the picture.

    The listener runs while the allocator reports an event, before it updates
    its counters, so allocated and reserved are summed from the (settled)
    segments; the device's other use (the CUDA context) is total - free -
    memory_reserved(), which is consistent at that moment.
    """
    try:
        free, total = allocator.device.mem_get_info()
        other = total - free - allocator.memory_reserved()
    except AttributeError:
        return ""
    allocated = sum(s.get("allocated_size", 0) for s in segments)
    reserved = sum(s.get("total_size", 0) for s in segments)
    words = tr("allocated {allocated} · reserved {reserved} · what nvidia-smi shows {visible} of {total}",
               allocated=format_bytes(allocated), reserved=format_bytes(reserved),
               visible=format_bytes(reserved + other), total=format_bytes(total))
    return f'<div class="ar-numbers" style="font-family:sans-serif;font-size:13px">{words}</div>'


# ---------------------------------------------------------------- side by side

USER_ACTIONS = USER_CALLS + (FAILED_CALL,)        # a failed malloc is the user's call too


def user_steps(frames: Sequence[Frame]) -> list[int]:
    """For each user call (malloc, free) the frame that shows its outcome.

    Two allocators given the same workload make different numbers of events
    (one needs a cudaMalloc where the other reuses a block), but the same
    ``alloc``/``free_requested`` sequence.  A free's outcome includes the
    ``free_completed`` right after it, so that frame is the one shown.
    """
    events = frames.events if hasattr(frames, "events") else [f.event for f in frames]
    steps = []
    for i, event in enumerate(events):
        if event.get("action") in USER_ACTIONS:
            steps.append(i)
        elif steps and event.get("action") == "free_completed" and steps[-1] == i - 1 \
                and events[i - 1].get("action") == "free_requested" and events[i - 1].get("addr") == event.get("addr"):
            steps[-1] = i
    return steps


def _memory_chart(sources: Sequence[Any], labels: Sequence[str], title: str,
                  steps: Optional[Sequence[Sequence[int]]] = None) -> MiniChart:
    series = []
    for k, (frames, label) in enumerate(zip(sources, labels)):
        totals = frames.memory_totals() if hasattr(frames, "memory_totals") else [
            (sum(s.get("allocated_size", 0) for s in f.segments), sum(s.get("total_size", 0) for s in f.segments))
            for f in frames]
        if steps is not None:
            totals = [totals[i] for i in steps[k]]
        allocated, reserved = ((tr("{label} allocated", label=label), tr("{label} reserved", label=label)) if label
                               else (tr("allocated"), tr("reserved")))
        series.append((allocated, [a for a, _ in totals], CURVE_COLORS["allocated"], k == 1))
        series.append((reserved, [r for _, r in totals], CURVE_COLORS["reserved"], k == 1))
    return MiniChart(series, title=title)


class Compare(widgets.VBox):
    """Two allocators on the same workload: block maps stepping together, and both memory curves.

        with record_frames(a) as fa: workload(a)
        with record_frames(b) as fb: workload(b)
        Compare(fa, fb, labels=("default", "expandable_segments:True"), simulated=True)

    One step is one user call (malloc or free); each side shows the frame
    where that call's outcome is visible (see :func:`user_steps`).
    """

    def __init__(self, frames_a: Sequence[Frame], frames_b: Sequence[Frame], *, labels=("A", "B"),
                 simulated: bool = False, interval_ms: int = 500, max_height: int = 360):
        self.sides = (frames_a, frames_b)
        self.labels, self.simulated, self.max_height = labels, simulated, max_height
        self.steps = (user_steps(frames_a), user_steps(frames_b))
        n = min(len(self.steps[0]), len(self.steps[1]))
        if n == 0:
            raise ValueError("nothing to compare: neither side recorded a malloc or free")
        if len(self.steps[0]) != len(self.steps[1]):
            # Not fatal (one side may have stopped at an OOM), but worth saying.
            labels = tuple(tr("{label} ({n} calls)", label=label, n=len(steps)) for label, steps in zip(labels, self.steps))
        self.captions = (widgets.HTML(), widgets.HTML())
        self.pictures = (widgets.HTML(), widgets.HTML())
        self.curves = widgets.HTML()
        self._chart = _memory_chart(self.sides, self.labels, tr("memory after each call: solid {a}, dashed {b}",
                                                                a=self.labels[0], b=self.labels[1]), self.steps)
        self.controls = _Controls(n, self.show, interval_ms)
        self.controls.slider.description = tr("call")
        columns = [widgets.VBox([widgets.HTML(f"<b>{label}</b>"), caption, picture],
                                layout=widgets.Layout(width="50%"))
                   for label, caption, picture in zip(labels, self.captions, self.pictures)]
        super().__init__([self.controls.box, widgets.HBox(columns), self.curves])
        self.add_class("ar-compare")
        self.show(0)

    @property
    def value(self) -> int:
        return self.controls.slider.value

    @value.setter
    def value(self, i: int) -> None:
        self.controls.slider.value = i

    def step(self, delta: int = 1) -> None:
        self.controls.step(delta)

    def show(self, k: int) -> None:
        for frames, steps, caption, picture in zip(self.sides, self.steps, self.captions, self.pictures):
            frame = frames[steps[k]]
            caption.value = _caption_html(frame, len(frames))
            svg = render_blockmap(frame.segments, highlight=frame.changed, segment_ids=frame.segment_ids,
                                  simulated=self.simulated, width=620)
            picture.value = _scroll_box(svg, self.max_height)
        self.curves.value = self._chart.svg(at=k)
