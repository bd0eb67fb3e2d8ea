"""The doctor's two charts (matplotlib): the memory timeline, and what-if bars that show the difference.

Peak reserved is tens of GiB; fragmentation is the difference between reserved and
allocated, often under 1 % of that.  Drawn on one axis from zero, every bar looks the same
and the point is invisible.  So :func:`plot_what_if` draws two panels side by side, with
the settings as horizontal bar labels (long names stay readable):

* peak reserved on an axis that starts just below the smallest bar (the axis says so),
  with the target memory as a red line and each bar coloured by whether it fits;
* fragmentation at that peak (reserved - allocated) as its own bars, from zero.

``python -m allocator_ref compare --plot`` draws the same chart.

The labels are in the reader's language when the chart can draw it: Chinese needs a CJK font
(``CJK_FONTS``); without one, matplotlib would draw empty boxes, so the labels stay English.
"""
from __future__ import annotations

import io
from typing import Optional, Sequence

from ..editions.messages import translator
from ..viz.chart_language import CJK_FONTS, chart_language, cjk_font, drawable  # noqa: F401 (the doctor's names)

GiB = 2**30
FITS, NO_FIT, UNKNOWN = "#59a14f", "#e15759", "#4c78a8"
tr = translator("doctor")
_drawable = drawable          # a chart's labels in the language its fonts can draw (viz/chart_language.py)


def _pyplot():
    import matplotlib
    if matplotlib.get_backend().lower() not in ("agg", "module://matplotlib_inline.backend_inline"):
        matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


@_drawable
def plot_what_if(rows: Sequence[dict], target: Optional[int] = None, title: str = "What if (simulated replays)"):
    """rows: dicts with label, peak_reserved, peak_allocated, fragmentation (bytes) and fits (bool or None)."""
    plt = _pyplot()
    rows = list(rows)
    labels = [r["label"] for r in rows]
    height = max(2.6, 0.42 * len(rows) + 1.4)
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, height), sharey=True,
                                      gridspec_kw={"width_ratios": [3, 2]})
    y = list(range(len(rows)))
    reserved = [r["peak_reserved"] / GiB for r in rows]
    colors = [UNKNOWN if r.get("fits") is None else (FITS if r["fits"] else NO_FIT) for r in rows]
    left.barh(y, reserved, color=colors)
    lo = min(reserved + ([target / GiB] if target else []))
    hi = max(reserved + ([target / GiB] if target else []))
    span = max(hi - lo, hi * 0.01, 1e-3)
    start = max(0.0, lo - 0.35 * span)
    left.set_xlim(start, hi + 0.25 * span)
    for yi, value in zip(y, reserved):
        left.text(value, yi, f" {value:,.2f}", va="center", fontsize=8)
    handles = []
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch
    if target:
        left.axvline(target / GiB, color=NO_FIT, linestyle="--", linewidth=1.5)
        handles.append(Line2D([], [], color=NO_FIT, linestyle="--",
                              label=tr("target {gib} GiB", gib=f"{target / GiB:,.2f}")))
    left.set_xlabel(tr("peak reserved, GiB (axis starts at {gib} GiB)", gib=f"{start:,.2f}"))
    left.set_yticks(y)
    left.set_yticklabels(labels, fontsize=9)
    left.invert_yaxis()
    frag = [r["fragmentation"] / 2**20 for r in rows]
    right.barh(y, frag, color="#f28e2b")
    for yi, value in zip(y, frag):
        right.text(value, yi, f" {value:,.0f}", va="center", fontsize=8)
    right.set_xlim(0, max(frag + [1.0]) * 1.3)
    right.set_xlabel(tr("MiB, from 0"))
    right.set_title(tr("fragmentation at that peak (reserved - allocated)"), fontsize=9)
    left.set_title(tr("peak reserved"), fontsize=9)
    if any(r.get("fits") is not None for r in rows):
        handles += [Patch(color=FITS, label=tr("fits")), Patch(color=NO_FIT, label=tr("out of memory"))]
    fig.suptitle(title, fontsize=11)
    if handles:                 # below the panels, where it hides no bar
        fig.legend(handles=handles, loc="lower center", ncol=len(handles), fontsize=8, frameon=False)
        fig.tight_layout(rect=(0, 0.35 / height, 1, 1))
    else:
        fig.tight_layout()
    return fig


@_drawable
def plot_timeline(allocated: Sequence[int], reserved: Sequence[int], target: Optional[int] = None,
                  peak_at: Optional[int] = None, oom_at: Optional[int] = None, title: str = ""):
    """memory_allocated and memory_reserved after each event, with the device limit and the peak."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(11, 3.6))
    x = range(len(reserved))
    ax.plot(x, [v / GiB for v in reserved], color="#f58518", label=tr("reserved (segments held)"))
    ax.plot(x, [v / GiB for v in allocated], color="#4c78a8", label=tr("allocated (live tensors)"))
    ax.fill_between(x, [v / GiB for v in allocated], [v / GiB for v in reserved], color="#f58518", alpha=0.15,
                    label=tr("reserved but unallocated"))
    if target:
        ax.axhline(target / GiB, color=NO_FIT, linestyle="--",
                   label=tr("device limit {gib} GiB", gib=f"{target / GiB:,.2f}"))
    if peak_at is not None:
        ax.axvline(peak_at, color="#7d8a96", linestyle=":", label=tr("peak reserved (event {at})", at=f"{peak_at:,}"))
    if oom_at is not None:
        ax.axvline(oom_at, color=NO_FIT, linewidth=2, label=tr("out of memory (event {at})", at=f"{oom_at:,}"))
    ax.set_xlabel(tr("trace event"))
    ax.set_ylabel("GiB")
    ax.set_ylim(bottom=0)
    ax.set_title(title or tr("Memory over the run (simulated replay of PyTorch's decisions)"), fontsize=11)
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    return fig


def png_bytes(fig) -> bytes:
    """The figure as PNG bytes (and the figure closed: reports make many)."""
    plt = _pyplot()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    plt.close(fig)
    return buf.getvalue()
