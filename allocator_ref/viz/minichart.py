"""A small line chart as SVG, with a marker at the current step.

The players redraw on every step; matplotlib takes ~50 ms per figure, so the
curves under a block map are plain SVG polylines drawn once, and only the
marker line moves (``MiniChart.svg(at=i)``).
"""
from __future__ import annotations

from html import escape
from typing import Sequence

from .sizes import format_bytes

MAX_POINTS = 800      # more points than pixels only slows the browser down


def _width(label: str) -> int:
    """A label's width in Latin letters: a CJK character (the Chinese edition's legend) is two wide."""
    return sum(2 if ord(ch) >= 0x2E80 else 1 for ch in label)


class MiniChart:
    """Curves over steps 0..n-1.  ``series``: (label, values, colour, dashed)."""

    def __init__(self, series: Sequence[tuple], width: int = 960, height: int = 150, title: str = ""):
        self.width, self.height, self.title = width, height, title
        self.n = max((len(values) for _, values, *_ in series), default=0)
        self.peak = max((max(values, default=0) for _, values, *_ in series), default=0) or 1
        self._static = self._draw(series)

    def _x(self, i: float) -> float:
        return 60 + (self.width - 70) * (i / max(1, self.n - 1))

    def _y(self, v: float) -> float:
        return self.height - 12 - (self.height - 50) * (v / self.peak)

    def _draw(self, series: Sequence[tuple]) -> str:
        h, w = self.height, self.width
        parts = [f'<rect width="{w}" height="{h}" fill="#ffffff"/>',
                 f'<text x="4" y="14" font-weight="bold">{escape(self.title)}</text>',
                 f'<text x="4" y="{self._y(self.peak) + 4:.1f}" font-size="10">{format_bytes(int(self.peak))}</text>',
                 f'<text x="4" y="{self._y(0) + 4:.1f}" font-size="10">0</text>',
                 f'<line x1="60" y1="{self._y(0):.1f}" x2="{w - 10}" y2="{self._y(0):.1f}" stroke="#7d8a96"/>']
        legend_x = 60
        for label, values, color, *dashed in series:
            step = max(1, len(values) // MAX_POINTS)
            points = " ".join(f"{self._x(i):.1f},{self._y(values[i]):.1f}" for i in range(0, len(values), step))
            if values and (len(values) - 1) % step:
                points += f" {self._x(len(values) - 1):.1f},{self._y(values[-1]):.1f}"
            dash = ' stroke-dasharray="5,3"' if dashed and dashed[0] else ""
            parts.append(f'<polyline class="ar-curve" data-label="{escape(label)}" points="{points}" fill="none" '
                         f'stroke="{color}" stroke-width="1.5"{dash}/>')
            parts.append(f'<line x1="{legend_x}" y1="26" x2="{legend_x + 18}" y2="26" stroke="{color}" '
                         f'stroke-width="2"{dash}/><text x="{legend_x + 22}" y="30" font-size="11">{escape(label)}</text>')
            legend_x += 30 + 7 * _width(label)
        return "".join(parts)

    def svg(self, at: int = -1) -> str:
        """The chart with a vertical marker at step ``at`` (none if negative)."""
        marker = ""
        if 0 <= at < self.n:
            x = self._x(at)
            marker = (f'<line class="ar-marker" data-step="{at}" x1="{x:.1f}" y1="36" x2="{x:.1f}" '
                      f'y2="{self._y(0):.1f}" stroke="#d62728" stroke-width="1.5"/>')
        return (f'<svg xmlns="http://www.w3.org/2000/svg" class="ar-minichart" width="{self.width}" '
                f'height="{self.height}" font-family="DejaVu Sans, Arial, sans-serif" font-size="12">'
                f'{self._static}{marker}</svg>')
