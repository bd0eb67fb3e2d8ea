"""Display helpers the chapters share (nothing about allocators lives here).

    import _course as course
    dev = course.open_device("tiny-1gb")   # opens, prints what it is and what that means
    course.show_blockmap(a, "after malloc(5 MiB)")
    course.show_stats(a)                   # the memory_stats() keys a chapter talks about
    course.claim("q4_reserved", course.fmt(a.memory_reserved()))

``claim`` is how prose and code stay in step: a number or a result a chapter
states in its text is written in bold, ``**20.00 MiB**`` (or ``**every rung
failed**``), its markdown cell's metadata names it (``"claims": {"q4_reserved":
"20.00 MiB"}``), and the claim checks of ``tests/claims/<chapter>.py`` call
``claim("q4_reserved", value)`` in the kernel after the cell that computes it;
``tests/test_chapter_claims.py`` checks that the executed value equals the bold
text.  A learner's notebook has no claim cell; a claim shows nothing anyway:
its value travels in the output's data under ``CLAIM_MIME`` (next to an empty
``text/markdown``, which every front end renders as nothing), where only the
test reads it.

What the helpers print goes through ``tr`` (the snapshot tools' catalogue,
``allocator_ref/locale/zh_CN/doctor.po``): the Chinese notebooks run these same
cells from ``chapters/zh``, where the tools speak Chinese.
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

_HERE = Path(__file__).resolve().parent
if str(_HERE.parent) not in sys.path:          # the package, when the chapter runs from a checkout
    sys.path.insert(0, str(_HERE.parent))

import allocator_ref as ar                       # noqa: E402
from allocator_ref.caching import format_size   # noqa: E402
from allocator_ref.editions import messages     # noqa: E402
from allocator_ref.editions.messages import translator   # noqa: E402

tr = translator("doctor")                        # the helpers' words in the edition's language

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30
CLAIM_MIME = "application/vnd.allocator-ref.claim+json"
_DEVICES: list = []


def fmt(nbytes: int) -> str:
    """PyTorch's ``format_size`` (the OOM message's units): '512 bytes', '20.00 MiB', '1.50 GiB'."""
    return format_size(int(nbytes))


# ------------------------------------------------------------------ the chapters' own lines

def say(english: str, **fields) -> None:
    """Print one line of a chapter's output in the edition's language::

        course.say("after the OOM, still allocated: {size}", size=course.fmt(a.memory_allocated()))

    The English sentence is written in the cell, so the code reads the same in both editions and the
    Chinese notebook runs it byte for byte; the Chinese comes from ``allocator_ref/locale/zh_CN/course.po``
    (``python -m allocator_ref.editions update`` collects every ``course.say``/``course.words`` sentence
    of the chapters; ``check`` fails on one with no Chinese).  Numbers, sizes and API names go in as
    named fields, so a translator can move them and never retypes them."""
    print(messages.say("course", english, **fields))


def words(english: str, **fields) -> str:
    """:func:`say`'s sentence as a string, for a label a cell builds up or draws (a chart's title)."""
    return messages.say("course", english, **fields)


def chart_words(english: str, **fields) -> str:
    """:func:`words` for a chart's title, axis or legend: in the language the chart can draw.  Chinese
    needs a CJK font (``allocator_ref.viz.chart_language``); without one matplotlib draws empty boxes,
    so the chart keeps English labels (``open_device`` printed how to install a font)."""
    from allocator_ref.viz.chart_language import chart_language
    if chart_language() == "en":
        return english.format(**fields) if fields else english
    return words(english, **fields)


def term(english: str) -> str:
    """Mark a label a cell keeps as data (a dict key, a row name) for the course catalogue; it stays
    English, so the code that looks it up still finds it.  :func:`shown` says it when printed."""
    return english


def shown(label: str) -> str:
    """A label marked with :func:`term`, in the edition's language (as itself if it is not one)."""
    return messages.say("course", label)


# ------------------------------------------------------------------ the device

def open_device(profile: str | None = None):
    """``allocator_ref.open_device()`` plus a plain-words banner of what the figures mean."""
    dev = ar.open_device(profile=profile)
    _DEVICES.append(dev)
    info = dev.info
    free, total = dev.mem_get_info()
    name = info.name                     # SimDevice's "sim-h100-80gb (simulated)": the mark in the edition's language
    if name.endswith(" (simulated)"):
        name = name.removesuffix(" (simulated)") + tr(" (simulated)")
    print(tr("device     : {name}", name=name))
    print(tr("capacity   : {total}   free now (cudaMemGetInfo / nvidia-smi view): {free}",
             total=fmt(total), free=fmt(free)))
    print(tr("context    : {size} held by the CUDA context, outside every allocator", size=fmt(info.context_reserve)))
    if profile is None and dev.simulated:
        from allocator_ref import settings
        chosen = settings.get("profile")
        print(tr("profile    : {profile} ({source}); a workshop sets it once in "
                 "course-settings.toml or ALLOCATOR_REF_PROFILE", profile=chosen.value, source=chosen.source))
    if dev.simulated:
        print(tr("what it is : SIMULATED. Times come from a cost model with cited sources "
                 "(allocator_ref/device/profiles/costs.json) on a virtual clock; every figure below "
                 "is simulated, not measured on a GPU. Allocator decisions and byte counts are exact."))
    else:
        print(tr("what it is : a REAL GPU. Times are measured wall-clock and vary run to run."))
    from allocator_ref.viz.chart_language import font_advice
    advice = font_advice()                       # a Chinese reader without a CJK font: say how to get one
    if advice:
        print(advice)
    return dev


_PINNED_SAID: set = set()


def pinned(profile: str):
    """A simulated device of the named profile, for a cell whose text quotes that GPU's numbers.

    Every other cell follows the course's ``profile`` setting
    (``allocator_ref.settings``); this one pins its profile on purpose, and
    says so the first time, so that a workshop on another profile knows why
    this figure is not about its card.
    """
    from allocator_ref import settings
    course = settings.get("profile")
    if profile != course.value and profile not in _PINNED_SAID:
        _PINNED_SAID.add(profile)
        print(tr("(this example pins the simulated {profile}: the text quotes its numbers; "
                 "your course profile, {course}, is used everywhere else)", profile=profile, course=course.value))
    return ar.SimDevice(profile)


def real_gpu(measures: str, simulated_instead: str):
    """The real GPU for a ``gpu``-tagged cell, or None after saying plainly why not.

    A learner's Run All on a laptop must not stop here: without a GPU the
    cell prints what it would have measured and where the chapter shows the
    simulated equivalent, and the notebook goes on (``make gpu-check`` runs
    these cells on a real GPU).
    """
    from allocator_ref.device.cuda import probe_cuda
    found, why = probe_cuda()
    if not found:
        from allocator_ref.device.select import reason_words
        # the two descriptions are the cell's English, said in the edition's language (course.po)
        print(tr("no GPU here ({why}), so nothing is measured.\n"
                 "On a GPU this cell measures {measures}.\n"
                 "The simulated equivalent: {simulated_instead}.", why=reason_words(why),
                 measures=messages.say("course", measures),
                 simulated_instead=messages.say("course", simulated_instead)))
        return None
    gpu = ar.open_device("cuda")
    _DEVICES.append(gpu)
    return gpu


def where(dev) -> str:
    """The tag every printed measurement carries: which device produced it."""
    name = dev.info.name.replace(" (simulated)", "")
    return tr("[simulated on {name}]", name=name) if dev.simulated else tr("[measured on {name}]", name=name)


# ------------------------------------------------------------------ pictures

def _display(obj) -> None:
    from IPython.display import display
    display(obj)


def blockmap_svg(state, title: str = "", highlight=(), simulated: bool | None = None) -> str:
    from allocator_ref.viz.blockmap import render_blockmap
    if simulated is None:
        dev = getattr(state, "device", None)
        simulated = bool(getattr(dev, "simulated", True))
    return render_blockmap(state, title=title, highlight=highlight, simulated=simulated)


def show_blockmap(state, title: str = "", highlight=()) -> None:
    """Draw the allocator's segments (one bar per cudaMalloc) with blocks coloured by state."""
    from IPython.display import SVG
    _display(SVG(blockmap_svg(state, title, highlight)))


def show_fig(fig) -> None:
    """Show a matplotlib figure whatever the backend (inline in Jupyter, Agg in CI), once."""
    import io

    import matplotlib.pyplot as plt
    from IPython.display import Image
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, bbox_inches="tight")
    plt.close(fig)
    _display(Image(data=buf.getvalue(), format="png"))


def show_frames(frames, first: int = 0, last: int | None = None, simulated: bool = True) -> None:
    """A step-by-step film strip: for each event, its caption and the block map after it.

    Static, so it survives a saved notebook and a static site; ``player(frames)``
    is the interactive version.
    """
    from IPython.display import SVG, Markdown
    from allocator_ref.viz.blockmap import render_blockmap
    last = len(frames) if last is None else last
    for i in range(first, last):
        f = frames[i]
        ev = f.event
        _display(Markdown(tr("**step {i}/{n}** `{action}` size {size}: {caption}", i=i + 1, n=len(frames),
                             action=ev["action"], size=fmt(ev.get("size", 0)), caption=f.caption)))
        _display(SVG(render_blockmap(f.segments, highlight=f.changed, segment_ids=f.segment_ids,
                                     simulated=simulated, width=760)))


def player(frames, simulated: bool = True):
    """An ipywidgets slider over the frames (the package's player when it exists)."""
    try:
        from allocator_ref.viz.player import TracePlayer      # the package's widget, once it lands
        return TracePlayer(frames, simulated=simulated)
    except ImportError:
        pass
    import ipywidgets as W
    from allocator_ref.viz.blockmap import render_blockmap

    out = W.HTML()
    slider = W.IntSlider(min=0, max=max(0, len(frames) - 1), value=0, description="step",
                         continuous_update=True, layout=W.Layout(width="600px"))
    play = W.Play(min=0, max=slider.max, interval=900)
    W.jslink((play, "value"), (slider, "value"))

    def draw(change=None):
        f = frames[slider.value]
        svg = render_blockmap(f.segments, highlight=f.changed, segment_ids=f.segment_ids,
                              simulated=simulated, width=760)
        out.value = (f"<p><b>step {slider.value + 1}/{len(frames)}</b> <code>{f.event['action']}</code> "
                     f"{f.caption}</p>{svg}")

    slider.observe(draw, names="value")
    draw()
    return W.VBox([W.HBox([play, slider]), out])


# ------------------------------------------------------------------ numbers

def stat_rows() -> list:
    """(memory_stats() key, the name and what it counts) for the keys the chapters talk about,
    the words in the edition's language (the API names stay as PyTorch writes them)."""
    return [
        ("allocated_bytes.all.current", "memory_allocated()  " + tr("live blocks, rounded")),
        ("reserved_bytes.all.current", "memory_reserved()   " + tr("segments held (cudaMalloc'd)")),
        ("active_bytes.all.current", "active_bytes        " + tr("allocated + pending free")),
        ("inactive_split_bytes.all.current", "inactive_split_bytes " + tr("free inside split segments (non-releasable)")),
        ("segment.all.current", "segment.all.current " + tr("number of segments")),
        ("num_device_alloc", "num_device_alloc    " + tr("cudaMalloc calls so far")),
        ("num_device_free", "num_device_free     " + tr("cudaFree calls so far")),
        ("num_alloc_retries", "num_alloc_retries   " + tr("full flush + retry")),
        ("num_ooms", "num_ooms            " + tr("OutOfMemoryError raised")),
    ]


def show_stats(allocator, keys=None, label: str = "") -> None:
    """Print chosen ``memory_stats()`` keys (all of :func:`stat_rows` by default)."""
    stats = allocator.memory_stats()
    rows = [r for r in stat_rows() if keys is None or r[0] in keys]
    if label:
        print(label)
    for key, words in rows:
        value = stats.get(key, 0)
        shown = fmt(value) if key.endswith("bytes.all.current") else str(value)
        print(f"  {shown:>12}  {words}")


def device_view(dev, allocator=None) -> str:
    """One line: nvidia-smi's view (mem_get_info) next to the allocator's."""
    free, total = dev.mem_get_info()
    line = tr("mem_get_info: used {used}, free {free} of {total}", used=fmt(total - free), free=fmt(free),
              total=fmt(total))
    if allocator is not None:
        line += tr(" | allocator: reserved {reserved}, allocated {allocated}",
                   reserved=fmt(allocator.memory_reserved()), allocated=fmt(allocator.memory_allocated()))
    return line + f"  {where(dev)}"


def segment_of(allocator, allocation) -> dict:
    """The segment (as the block map draws it) that holds an allocation."""
    for seg in allocator.segments(record=False):
        if seg["address"] <= allocation.ptr < seg["address"] + seg["total_size"]:
            return seg
    raise ValueError(f"no segment of this allocator holds {allocation.ptr:#x}")


_SCRATCH: list = []


def scratch(name: str) -> str:
    """A path for a file this kernel writes (a snapshot, an HTML report): in a folder of this kernel's
    own, made once with ``tempfile.mkdtemp``, so two kernels (an English and a Chinese run of the same
    chapter) never overwrite each other's files.  The folder stays after the kernel, for the reader."""
    import tempfile
    if not _SCRATCH:
        _SCRATCH.append(tempfile.mkdtemp(prefix="allocator-course-"))
    return os.path.join(_SCRATCH[0], name)


def _record_claim(item: dict) -> None:
    """Put a claim in the cell's outputs where the test finds it and a learner sees nothing."""
    from IPython.display import display
    display({"text/markdown": "", CLAIM_MIME: item}, raw=True)


def claim(name: str, value) -> None:
    """Record a number or result the chapter's text states, as computed here (the test compares the two)."""
    _record_claim({"name": name, "value": str(value)})


def claim_needs_real_trace(name: str) -> None:
    """A claim about PyTorch's real snapshot that this run could not check (no real trace found).

    ``tests/test_chapter_claims.py`` reports it as unchecked instead of
    comparing a course-made trace with PyTorch (the chapter's own output
    already says its trace is course-made).
    """
    _record_claim({"name": name, "value": None, "unchecked": "no real PyTorch snapshot found"})


def claim_needs_torch(name: str) -> None:
    """A claim the "predict before you run" cells compute with PyTorch, unchecked where torch is absent."""
    _record_claim({"name": name, "value": None, "unchecked": "torch is not installed"})


def result_words(condition: bool, yes: str, no: str) -> str:
    """The words a sentence states as a result (``claim(name, result_words(...))``): ``yes`` when the
    cell's condition holds, else ``no``, so the prose can only say what this run shows.

    In the edition's language: the Chinese prose states ``yes``'s Chinese from ``course.po`` in bold
    (``**显存不足**``, its cell's claims metadata saying so), the Chinese run computes the same words, and the claim test
    compares them as it compares the English; ``editions check`` accepts that phrase in place of the
    English one only when it is the catalogue's translation of it."""
    return messages.say("course", yes if condition else no)


def close_all() -> None:
    for dev in _DEVICES:
        dev.close()
    _DEVICES.clear()

