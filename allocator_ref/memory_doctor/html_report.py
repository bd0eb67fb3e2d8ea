"""The doctor's report as one self-contained HTML file: every picture inline, nothing fetched.

Charts are PNGs embedded as ``data:`` URIs; the block map at the peak is the course's own
SVG (``viz.render_blockmap``) written into the page.  The file can be mailed, attached to
an issue, or opened offline.
"""
from __future__ import annotations

import base64
from html import escape

from ..viz.blockmap import render_blockmap
from ..viz.sizes import format_bytes
from .charts import plot_timeline, plot_what_if, png_bytes
from .diagnosis import reproduced_line

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


def _img(png: bytes, alt: str, name: str) -> str:
    data = base64.b64encode(png).decode("ascii")
    return f'<img class="ar-figure" data-figure="{name}" alt="{escape(alt)}" src="data:image/png;base64,{data}">'


def _section(title: str, body: str) -> str:
    return f"<h2>{escape(title)}</h2>\n{body}\n"


def _pre(lines: list) -> str:
    return "<pre>" + escape("\n".join(lines)) + "</pre>"


def _label(t) -> str:
    name = {"recorded": "as recorded", "recorded-on-target": "recorded settings, target"}.get(t.kind, t.change)
    return name + (" (model prediction)" if t.prediction else "")


def render_html(report) -> str:
    d, r, v = report.diagnosis, report.remedies, report.verdict
    parts = [f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
             f"<title>Memory doctor: {escape(d.source)}</title><style>{STYLE}</style></head><body>",
             f"<h1>Memory doctor: {escape(d.source)}, device {d.device}</h1>",
             f"<p>{len(d.frames):,} trace events, replayed on the reference allocator at PyTorch's own addresses "
             f"(<b>{escape(reproduced_line(d.verify_summary, d.verified))}</b>). Every figure comes from a replay on a "
             "<i>simulated</i> GPU of PyTorch's recorded requests.</p>",
             (f"<p data-simulated-gpu='{escape(d.profile)}'>{escape(d.profile_note)}.</p>" if d.profile_note else ""),
             f"<div class='verdict {v.kind}' data-verdict='{v.kind}'>{escape(v.text)}"
             + (f"<code class='line'>{escape(v.line)}</code>" if v.line else "") + "</div>"]
    target = r.target if r is not None else None
    oom_at = None
    if d.oom is not None:
        oom_at = d.oom.event_index - d.frames.first_event
    timeline = plot_timeline(d.allocated, d.reserved, target=target, peak_at=d.peak_reserved_at, oom_at=oom_at)
    parts.append(_section("Memory over the run", _img(png_bytes(timeline), "allocated and reserved memory after "
                                                      "each event, with the device limit", "timeline")))
    lines = [line for line in report.lines() if line]
    start = lines.index("PEAKS") if "PEAKS" in lines else 0
    parts.append(_section("What the replay found", _pre(lines[start:])))
    peak = d.frames.state(d.peak_reserved_at)
    holders = [h.address for h in d.holdings[:5]]
    svg = render_blockmap(peak, segment_ids=d.frames.segment_ids, highlight=holders,
                          title=f"block map at the reserved peak (event {d.peak_reserved_at:,}): "
                                f"{format_bytes(d.peak_reserved)} reserved, {format_bytes(d.allocated_at_peak)} allocated",
                          simulated=True)
    note = (f"<p>Outlined in red: the {len(holders)} segment{'s' if len(holders) != 1 else ''} holding the most "
            "reserved-but-unallocated memory (listed above).</p>") if holders else ""
    parts.append(_section("The block map at the peak", note + f"<div class='picture' data-figure='blockmap'>{svg}</div>"))
    if r is not None:
        rows = [{"label": _label(t), "peak_reserved": t.peak_reserved,
                 "peak_allocated": t.peak_allocated, "fragmentation": t.fragmentation, "fits": t.fits}
                for t in r.trials if not t.skipped]
        chart = plot_what_if(rows, target=r.target, title="Each remedy replayed on the same requests (simulated)")
        table = ["<table><tr><th>change</th><th>peak reserved</th><th>fragmentation at peak</th>"
                 "<th>device calls</th><th>flushes on retry</th><th>fits</th><th>PYTORCH_CUDA_ALLOC_CONF</th></tr>"]
        for t in r.trials:
            if t.skipped:
                table.append(f"<tr><td>{escape(_label(t))}</td><td colspan='6'>skipped: {escape(t.skipped)}</td></tr>")
                continue
            fits = "-" if t.fits is None else ("yes" if t.fits else f"no ({t.ooms} OOM)")
            table.append(f"<tr><td>{escape(_label(t))}</td><td class='num'>{format_bytes(t.peak_reserved)}"
                         f"</td><td class='num'>{format_bytes(t.fragmentation)}</td><td class='num'>{t.device_calls:,}"
                         f"</td><td class='num'>{t.alloc_retries:,}</td><td>{fits}</td><td><code>{escape(t.line)}</code>"
                         + (f"<br><small>{escape(t.prediction)}; the switch costs: {escape('; '.join(t.costs))}</small>"
                            if t.prediction else "") + "</td></tr>")
        table.append("</table>")
        parts.append(_section(f"Remedies ({r.replays} replays)", _img(png_bytes(chart), "peak reserved and "
                                                                      "fragmentation under each remedy", "remedies")
                              + "".join(table)))
    parts.append("<p><small>Made by <code>python -m allocator_ref doctor</code> (the course's reference allocator, "
                 "a re-implementation of PyTorch 2.11's CUDACachingAllocator).</small></p></body></html>")
    return "\n".join(parts)
