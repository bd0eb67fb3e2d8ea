"""A dated history as a timeline whose every label can be read.

``plot_history(events) -> Figure`` draws one row per event, oldest at the
top: a dot on the year axis and its label beside it (to the right of the dot,
or to the left when the label would run off the right edge).  With one row
each, labels of events a few months apart cannot overlap, which they did when
they alternated above and below a single line (chapter 1's 2020-2026 labels).
``text_overlaps(fig)`` is how a test checks that.
"""
from __future__ import annotations

from typing import Sequence


def plot_history(events: Sequence[tuple[float, str]], title: str = "", fontsize: int = 9):
    """events: (year, text), any order; the year may be fractional (2023.8 = late 2023)."""
    import matplotlib.pyplot as plt

    events = sorted(events)
    years = [y for y, _ in events]
    lo, hi = int(min(years)) - 1, int(max(years)) + 2
    fig, ax = plt.subplots(figsize=(9, 0.42 * len(events) + 1.1))
    mid = (lo + hi) / 2
    for row, (year, text) in enumerate(events):
        y = -row
        ax.plot(year, y, "o", color="#4c78a8", zorder=2)
        right = year < mid                       # late events are labelled to their left
        ax.text(year + (0.25 if right else -0.25), y, f"{int(year)}: {text}", va="center",
                ha="left" if right else "right", fontsize=fontsize)
    ax.set_xlim(lo, hi)
    ax.set_ylim(-len(events) + 0.4, 0.9)
    ax.set_yticks([])
    from matplotlib.ticker import MaxNLocator
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))   # years, not 2012.5
    for side in ("left", "right", "top"):
        ax.spines[side].set_visible(False)
    if title:
        ax.set_title(title)
    fig.tight_layout()
    return fig


def text_overlaps(fig) -> list[tuple[str, str]]:
    """Pairs of texts in the figure whose drawn boxes intersect, and texts that leave the figure."""
    if not hasattr(fig.canvas, "get_renderer"):        # a bare Figure(): give it an Agg canvas
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        FigureCanvasAgg(fig)
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    box = fig.bbox
    texts = [t for ax in fig.axes for t in ax.texts if t.get_text()]
    boxes = [(t.get_text(), t.get_window_extent(renderer)) for t in texts]
    bad = [(a, b) for i, (a, ba) in enumerate(boxes) for b, bb in boxes[i + 1:] if ba.overlaps(bb)]
    bad += [(a, "outside the figure") for a, ba in boxes
            if ba.x0 < box.x0 or ba.x1 > box.x1 or ba.y0 < box.y0 or ba.y1 > box.y1]
    return bad
