"""The doctor's report as one self-contained HTML file: every picture inline, nothing fetched.

Charts are PNGs embedded as ``data:`` URIs; the block map at the peak is the course's own
SVG (``viz.render_blockmap``) written into the page.  The file can be mailed, attached to
an issue, or opened offline.
"""
from __future__ import annotations

import base64
from html import escape
from pathlib import Path

from ..editions.language import language, speaking
from ..editions.messages import translator
from ..provenance import course_made
from ..viz.blockmap import render_blockmap
from ..units import format_bytes
from .charts import chart_language, plot_timeline, plot_what_if, png_bytes
from .device_words import NPU, words_of
from .diagnosis import reproduced_line

tr = translator("doctor")
HTML_LANG = {"en": "en", "zh": "zh-CN"}         # the page's lang attribute, for fonts and screen readers

STYLE = """
body { font-family: system-ui, sans-serif; max-width: 1180px; margin: 1.5em auto; color: #1d2730; }
h1 { font-size: 1.5em; } h2 { font-size: 1.15em; margin-top: 1.6em; border-bottom: 1px solid #d5dce3; }
.verdict { background: #f3f7fb; border-left: 5px solid #4c78a8; padding: .8em 1em; }
.verdict.remedy { border-color: #59a14f; } .verdict.less-memory, .verdict.shortage, .verdict.unverified { border-color: #e15759; }
code.line { display: block; background: #1d2730; color: #fff; padding: .6em; margin-top: .6em; }
table { border-collapse: collapse; font-size: .9em; } td, th { padding: .2em .7em; border-bottom: 1px solid #e5e9ee; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
.picture { max-height: 640px; overflow: auto; border: 1px solid #d5dce3; }
img { max-width: 100%; }
"""


def text_page(title: str, text: str, lang: str, path=None) -> str:
    """A report with no pictures as one page: its text, escaped, in a ``<pre>`` (the ranks' comparison
    and the state-only report); written to ``path`` when given."""
    page = (f"<!doctype html><html lang='{HTML_LANG[lang]}'><meta charset='utf-8'>"
            f"<title>{escape(title)}</title><pre>" + escape(text) + "</pre>")
    if path is not None:
        Path(path).write_text(page, encoding="utf-8")
    return page


def _img(png: bytes, alt: str, name: str) -> str:
    data = base64.b64encode(png).decode("ascii")
    return f'<img class="ar-figure" data-figure="{name}" alt="{escape(alt)}" src="data:image/png;base64,{data}">'


def _section(title: str, body: str) -> str:
    return f"<h2>{escape(title)}</h2>\n{body}\n"


def _pre(lines: list) -> str:
    return "<pre>" + escape("\n".join(lines)) + "</pre>"


def _label(t) -> str:
    name = {"recorded": tr("as recorded"), "recorded-on-target": tr("recorded settings, target")}.get(t.kind, t.change)
    return name + (tr(" (model prediction)") if t.prediction else "")


BARE_TAGS = ("b", "i", "code")   # the only markup the English sentences carry, never with attributes


def _markup(text: str) -> str:
    """A translated sentence at the HTML boundary: all of it escaped (a catalogue is text, never markup),
    then only the bare ``<b>``, ``<i>``, ``<code>`` its English is written with given back."""
    out = escape(text, quote=False)
    for tag in BARE_TAGS:
        out = out.replace(f"&lt;{tag}&gt;", f"<{tag}>").replace(f"&lt;/{tag}&gt;", f"</{tag}>")
    return out


def _replayed_on(d, words) -> str:
    """The report's first sentence: whose run was replayed (PyTorch's, or the course's: provenance.py)."""
    course = course_made(d.snapshot)
    reproduced = reproduced_line(d.verify_summary, d.verified, words, course)
    if course:
        return tr("{n} trace events of the course's simulated run, replayed on the reference allocator at the "
                  "recorded addresses (<b>{reproduced}</b>). Every figure comes from a replay on a <i>simulated</i> "
                  "{device} of the recorded requests.", n=f"{d.events_replayed:,}", device=words.device,
                  reproduced=reproduced)
    return tr("{n} trace events, replayed on the reference allocator at {library}'s own addresses "
              "(<b>{reproduced}</b>). Every figure comes from a replay on a <i>simulated</i> {device} of "
              "{library}'s recorded requests.", n=f"{d.events_replayed:,}", library=words.library,
              device=words.device, reproduced=reproduced)


def render_html(report) -> str:
    d, r, v = report.diagnosis, report.remedies, report.verdict
    words = words_of(d)                 # a GPU's names or an NPU's (device_words.py)
    parts = [f"<!DOCTYPE html><html lang='{HTML_LANG[language()]}'><head><meta charset='utf-8'>"
             f"<title>{escape(tr('Memory doctor: {source}', source=d.source))}</title><style>{STYLE}</style></head><body>",
             f"<h1>{escape(tr('Memory doctor: {source}, device {device}', source=d.source, device=d.device))}</h1>",
             "<p>" + _markup(_replayed_on(d, words)) + "</p>",
             (f"<p data-simulated-gpu='{escape(d.profile)}'>{escape(d.profile_note)}.</p>" if d.profile_note else ""),
             f"<div class='verdict {v.kind}' data-verdict='{v.kind}'>{escape(v.text)}"
             + (f"<code class='line'>{escape(v.line)}</code>" if v.line else "") + "</div>"]
    target = r.target if r is not None else None
    oom_at = None
    if d.oom is not None:
        oom_at = d.oom.event_index - d.first_event
    timeline = plot_timeline(d.allocated, d.reserved, target=target, peak_at=d.peak_reserved_at, oom_at=oom_at)
    parts.append(_section(tr("Memory over the run"), _img(png_bytes(timeline), tr(
        "allocated and reserved memory after each event, with the device limit"), "timeline")))
    lines = [line for line in report.lines() if line]
    start = lines.index(tr("PEAKS")) if tr("PEAKS") in lines else 0
    parts.append(_section(tr("What the replay found"), _pre(lines[start:])))
    frames = report.frames              # drawn: recorded now (viz), the facts above are the engine's
    peak = frames.state(d.peak_reserved_at)
    holders = [h.address for h in d.holdings[:5]]
    at = d.peak_reserved_at
    # A peak held when recording began (diagnosis.peak_at_start) has no frame: the map shows the highest
    # moment inside the trace, with that moment's own figures, and says where the peak was.
    title = (tr("block map at the highest reserved moment inside the trace (event {at}): {reserved} reserved, "
                "{allocated} allocated; the peak, {peak}, was held when recording began", at=f"{at:,}",
                reserved=format_bytes(d.reserved[at]), allocated=format_bytes(d.allocated[at]),
                peak=format_bytes(d.peak_reserved)) if d.peak_at_start else
             tr("block map at the reserved peak (event {at}): {reserved} reserved, {allocated} allocated",
                at=f"{at:,}", reserved=format_bytes(d.peak_reserved), allocated=format_bytes(d.allocated_at_peak)))
    svg = render_blockmap(peak, segment_ids=frames.segment_ids, highlight=holders, title=title, simulated=True)
    note = ("<p>" + escape(tr("Outlined in red: the {n} segment holding the most reserved-but-unallocated memory (listed "
                        "above).", n=len(holders)) if len(holders) == 1 else
                     tr("Outlined in red: the {n} segments holding the most reserved-but-unallocated memory (listed "
                        "above).", n=len(holders))) + "</p>") if holders else ""
    parts.append(_section(tr("The block map at the peak"),
                          note + f"<div class='picture' data-figure='blockmap'>{svg}</div>"))
    if r is not None:
        with speaking(chart_language()):              # the chart's words in a language its fonts can draw
            rows = [{"label": _label(t), "peak_reserved": t.peak_reserved,
                     "peak_allocated": t.peak_allocated, "fragmentation": t.fragmentation, "fits": t.fits}
                    for t in r.trials if not t.skipped]
            chart = plot_what_if(rows, target=r.target,
                                 title=tr("Each remedy replayed on the same requests (simulated)"))
        heads = (tr("change"), tr("peak reserved"), tr("fragmentation at peak"), tr("device calls"),
                 tr("flushes on retry"), tr("fits"), "PYTORCH_CUDA_ALLOC_CONF")
        table = ["<table><tr>" + "".join(f"<th>{escape(h)}</th>" for h in heads) + "</tr>"]
        for t in r.trials:
            if t.skipped:
                table.append(f"<tr><td>{escape(_label(t))}</td><td colspan='6'>"
                             f"{escape(tr('skipped: {why}', why=t.skipped))}</td></tr>")
                continue
            fits = "-" if t.fits is None else (tr("yes") if t.fits else tr("no ({n} OOM)", n=t.ooms))
            costs = tr("{prediction}; the switch costs: {costs}", prediction=t.prediction,
                       costs=tr("; ").join(t.costs)) if t.prediction else ""
            table.append(f"<tr><td>{escape(_label(t))}</td><td class='num'>{format_bytes(t.peak_reserved)}"
                         f"</td><td class='num'>{format_bytes(t.fragmentation)}</td><td class='num'>{t.device_calls:,}"
                         f"</td><td class='num'>{t.alloc_retries:,}</td><td>{escape(fits)}</td><td><code>{escape(t.line)}</code>"
                         + (f"<br><small>{escape(costs)}</small>" if costs else "") + "</td></tr>")
        table.append("</table>")
        parts.append(_section(tr("Remedies ({n} replays)", n=r.replays), _img(png_bytes(chart), tr(
            "peak reserved and fragmentation under each remedy"), "remedies") + "".join(table)))
    made = (tr("Made by {command} (the course's reference allocator, a re-implementation of torch_npu's "
               "NPUCachingAllocator for PyTorch 2.11, v2.11.0-26.1.0).", command="<code>python -m allocator_ref doctor</code>")
            if words is NPU else
            tr("Made by {command} (the course's reference allocator, a re-implementation of PyTorch 2.11's "
               "CUDACachingAllocator).", command="<code>python -m allocator_ref doctor</code>"))
    parts.append("<p><small>" + _markup(made) + "</small></p></body></html>")
    return "\n".join(parts)
