"""The language a matplotlib chart can be drawn in: the reader's, when a font can draw it.

Chinese labels need a CJK font; without one matplotlib draws empty boxes (and warns about
missing glyphs), which is worse than English.  So a chart speaks Chinese only when one of
``CJK_FONTS`` is installed (the workshop image installs Noto Sans CJK: ``fonts-noto-cjk``), and
puts that font first in ``font.sans-serif``; otherwise its labels stay English.  The memory
timeline (viz/timeline.py) and the doctor's charts (memory_doctor/charts.py) both ask here.
"""
from __future__ import annotations

import functools
import sys
from functools import lru_cache
from pathlib import Path
from typing import Optional

from ..editions.language import language, speaking
from ..editions.messages import translator

tr = translator("doctor")          # the font advice, in the reader's language

CJK_FONTS = ("Noto Sans CJK SC", "Noto Sans SC", "Source Han Sans SC", "WenQuanYi Zen Hei",
             "WenQuanYi Micro Hei", "Microsoft YaHei", "PingFang SC", "SimHei")


@lru_cache(maxsize=None)
def cjk_font() -> Optional[str]:
    """The first installed font of ``CJK_FONTS``, or None.

    matplotlib finds the system's fonts (Debian's ``fonts-noto-cjk`` in /usr/share/fonts); conda's
    ``font-ttf-noto-cjk`` installs into ``$CONDA_PREFIX/fonts``, which a pip-installed matplotlib does
    not search, so those files are added here.
    """
    from matplotlib import font_manager
    installed = {f.name for f in font_manager.fontManager.ttflist}
    found = next((name for name in CJK_FONTS if name in installed), None)
    if found is None:
        for path in sorted((Path(sys.prefix) / "fonts").glob("*CJK*")):
            try:
                font_manager.fontManager.addfont(str(path))
            except (OSError, RuntimeError, ValueError):
                continue                     # a file matplotlib cannot read is not a reason to fail a chart
        installed = {f.name for f in font_manager.fontManager.ttflist}
        found = next((name for name in CJK_FONTS if name in installed), None)
    return found


def chart_language() -> str:
    """The language a chart can be drawn in: the reader's, unless it needs a font that is not installed."""
    lang = language()
    if lang == "zh":
        font = cjk_font()
        if font is None:
            return "en"
        import matplotlib
        if font not in matplotlib.rcParams["font.sans-serif"]:
            matplotlib.rcParams["font.sans-serif"] = [font, *matplotlib.rcParams["font.sans-serif"]]
    return lang


def font_advice() -> Optional[str]:
    """One line saying how to install a CJK font, when the reader reads Chinese and none is installed
    (the charts would otherwise fall back to English without a word); None when nothing is missing.
    The chapters say it at their start (``_course.open_device``)."""
    if language() != "zh" or cjk_font() is not None:
        return None
    return tr("No CJK font found, so the charts keep English labels. Install one and restart the kernel: "
              "`sudo apt-get install fonts-noto-cjk` (Debian/Ubuntu), or "
              "`conda install -c conda-forge font-ttf-noto-cjk`")


def drawable(plot):
    """Draw ``plot`` with its labels in :func:`chart_language`."""
    @functools.wraps(plot)
    def wrapped(*args, **kwargs):
        with speaking(chart_language()):
            return plot(*args, **kwargs)
    return wrapped
