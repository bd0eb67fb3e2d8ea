"""One segment, two processes: the picture of a legacy (``'c'``) IPC share.

``render_ipc_share(segment, handle, receiver_ptr, ...) -> str`` draws, as SVG:

* the sender's segment (one ``cudaMalloc``) with its blocks to scale, the
  shared block outlined;
* the handle that travels: ``cudaIpcGetMemHandle`` names the *segment base*,
  so PyTorch sends (handle, offset of the block in the segment)
  (``THCPStorage_shareCuda`` in torch/csrc/StorageSharing.cpp);
* the receiver's mapping: ``cudaIpcOpenMemHandle`` maps the whole segment at
  an address of its own; the block is that base plus the offset;
* the lifetimes: the sender must keep the block allocated from the share
  until the receiver closes it, or the receiver sees whatever the sender's
  cache puts there next.

Every address and size comes from the objects passed in (the allocator's
segment dict, the handle, the pointer the receiver reported).
"""
from __future__ import annotations

from html import escape
from typing import Any

from .sizes import format_bytes

WIDTH, LABEL_W, BAR_H = 960, 190, 22
SHARED, OTHER, FREE, MAPPED, INK = "#d62728", "#4c78a8", "#e9eef3", "#c7d3df", "#33414e"
MIN_W = 5


def _bar(out: list, y: float, blocks: list, base: int, total: int, shared_addr: int) -> None:
    bar_w = WIDTH - LABEL_W - 20
    for b in blocks:
        x = LABEL_W + (b["address"] - base) * bar_w / total
        w = max(MIN_W, b["size"] * bar_w / total)
        is_shared = b["address"] == shared_addr
        fill = SHARED if is_shared else (OTHER if b.get("state") == "active_allocated" else FREE)
        cls = "ar-ipc-shared" if is_shared else "ar-ipc-block"
        out.append(f'<rect class="{cls}" x="{x:.1f}" y="{y}" width="{w:.1f}" height="{BAR_H}" fill="{fill}" '
                   f'stroke="#ffffff" data-addr="{b["address"]:#x}" data-size="{b["size"]}"/>')
        if w > 60:
            ink = "#ffffff" if fill != FREE else INK
            out.append(f'<text x="{x + w / 2:.1f}" y="{y + 15}" text-anchor="middle" fill="{ink}">'
                       f'{escape(format_bytes(b["size"]))}{" (shared)" if is_shared else ""}</text>')
    out.append(f'<rect x="{LABEL_W}" y="{y}" width="{bar_w}" height="{BAR_H}" fill="none" stroke="#7d8a96"/>')


def render_ipc_share(segment: dict, handle: Any, receiver_ptr: int, sender_pid: int, receiver_pid: int,
                     simulated: bool = True) -> str:
    """SVG of one block shared through a legacy handle (see the module docstring)."""
    base, total = segment["address"], segment["total_size"]
    shared = base + handle.offset
    recv_base = receiver_ptr - handle.offset
    bar_w = WIDTH - LABEL_W - 20
    x_block = LABEL_W + handle.offset * bar_w / total
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" class="ar-ipc" width="{WIDTH}" height="330" '
           f'viewBox="0 0 {WIDTH} 330" font-family="DejaVu Sans, Arial, sans-serif" font-size="12">',
           f'<rect width="{WIDTH}" height="330" fill="#ffffff"/>',
           f'<text x="4" y="18" font-size="14" font-weight="bold">One segment, two processes: '
           f'a legacy (\'c\') IPC handle{" (simulated)" if simulated else ""}</text>']
    # the sender's segment
    out.append(f'<text x="4" y="60" fill="{INK}">sender, pid {sender_pid}</text>')
    out.append(f'<text x="4" y="75" fill="#5b6770" font-size="11">segment at {base:#x}</text>')
    _bar(out, 48, segment.get("blocks", []), base, total, shared)
    out.append(f'<text x="{x_block:.1f}" y="86" fill="{SHARED}" font-size="11">block {shared:#x} '
               f'= base + {escape(format_bytes(handle.offset))}</text>')
    # what travels
    out.append(f'<line x1="{x_block + 4:.1f}" y1="92" x2="{x_block + 4:.1f}" y2="142" stroke="{INK}" '
               f'stroke-dasharray="4 3" marker-end="url(#ar-arrow)"/>')
    out.append('<defs><marker id="ar-arrow" markerWidth="8" markerHeight="8" refX="4" refY="4" orient="auto">'
               f'<path d="M0,0 L8,4 L0,8 z" fill="{INK}"/></marker></defs>')
    out.append(f'<text class="ar-ipc-handle" x="{LABEL_W}" y="112" fill="{INK}">sent: cudaIpcGetMemHandle(segment base) '
               f'= {len(handle.ipc_handle)}-byte handle, plus offset {escape(format_bytes(handle.offset))} '
               f'and size {escape(format_bytes(handle.size))}</text>')
    out.append(f'<text x="{LABEL_W}" y="128" fill="{INK}">the receiver: cudaIpcOpenMemHandle maps the whole '
               f'{escape(format_bytes(total))} segment, then adds the offset</text>')
    # the receiver's mapping
    out.append(f'<text x="4" y="162" fill="{INK}">receiver, pid {receiver_pid}</text>')
    out.append(f'<text x="4" y="177" fill="#5b6770" font-size="11">maps it at {recv_base:#x}</text>')
    mapped = [{"address": recv_base, "size": total, "state": "mapped"},
              {"address": receiver_ptr, "size": handle.size, "state": "active_allocated"}]
    _bar(out, 150, mapped[:1], recv_base, total, -1)
    _bar(out, 150, mapped[1:], recv_base, total, receiver_ptr)
    out.append(f'<text x="{x_block:.1f}" y="188" fill="{SHARED}" font-size="11">{receiver_ptr:#x} '
               f'= its base + {escape(format_bytes(handle.offset))}</text>')
    # lifetimes
    y0, x0, x1 = 228, LABEL_W, WIDTH - 20
    steps = [(0.05, "malloc"), (0.2, "share"), (0.85, "free: only after the receiver closes")]
    out.append(f'<text x="4" y="{y0 + 4}" fill="{INK}">sender\'s block</text>')
    out.append(f'<line x1="{x0}" y1="{y0}" x2="{x1}" y2="{y0}" stroke="{OTHER}" stroke-width="3"/>')
    for frac, words in steps:
        x = x0 + frac * (x1 - x0)
        out.append(f'<circle cx="{x:.1f}" cy="{y0}" r="4" fill="{OTHER}"/>'
                   f'<text x="{x:.1f}" y="{y0 - 8}" text-anchor="middle" fill="{INK}" font-size="11">{escape(words)}</text>')
    ry = y0 + 36
    rx0, rx1 = x0 + 0.3 * (x1 - x0), x0 + 0.7 * (x1 - x0)
    out.append(f'<text x="4" y="{ry + 4}" fill="{INK}">receiver\'s mapping</text>')
    out.append(f'<line x1="{rx0:.1f}" y1="{ry}" x2="{rx1:.1f}" y2="{ry}" stroke="{SHARED}" stroke-width="3"/>')
    for x, words in ((rx0, "open"), (rx1, "close")):
        out.append(f'<circle cx="{x:.1f}" cy="{ry}" r="4" fill="{SHARED}"/>'
                   f'<text x="{x:.1f}" y="{ry + 18}" text-anchor="middle" fill="{INK}" font-size="11">{words}</text>')
    out.append(f'<text x="{x0}" y="{ry + 40}" fill="#5b6770" font-size="11">Free the block before the receiver '
               f'closes, and the sender\'s cache can give those bytes to another tensor:</text>')
    out.append(f'<text x="{x0}" y="{ry + 54}" fill="#5b6770" font-size="11">the receiver then reads and writes '
               f'that tensor instead.</text>')
    out.append("</svg>")
    return "".join(out)
