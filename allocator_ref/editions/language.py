"""Which language the tools speak: English unless the reader asked for Chinese.

The chapters and labs exist in two editions (``chapters/`` and ``chapters/zh/``, ...); the
tools -- ``check()``'s feedback, the doctor's report -- must speak the edition's language too,
yet a Chinese notebook runs the English notebook's code cells byte for byte, so the code cannot
say "Chinese".  The language is decided, first match wins, from:

1. :func:`set_language` (what ``python -m allocator_ref doctor --lang zh`` calls);
2. ``ALLOCATOR_REF_LANG`` (``en``, ``zh`` or ``auto``; ``zh_CN``, ``zh-CN``, ``zh-Hans`` mean zh);
3. the notebook's own metadata: every Chinese notebook says ``"allocator_ref": {"language": "zh_CN"}``
   (written by ``build``), so a notebook moved out of ``chapters/zh`` -- downloaded, or opened on
   Colab, whose bootstrap runs it from the English folder -- still speaks Chinese.  Jupyter's server
   names the notebook of a kernel in ``JPY_SESSION_NAME``; Colab hands its notebook over on request;
4. the edition of the working folder: a notebook's kernel starts in the notebook's folder, and
   every Chinese edition folder holds a ``.course-language`` file saying ``zh``
   (written by ``python -m allocator_ref.editions build``);
5. the ``language`` key of ``course-settings.toml`` (a workshop room's language);
6. the reader's locale, as POSIX orders it for messages: ``LC_ALL``, else ``LC_MESSAGES``, else ``LANG``
   (the first that is set and not empty; ``zh*`` means zh), then ``LANGUAGE``'s first entry;
7. English.
"""
from __future__ import annotations

import os
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Optional

from .. import settings

LANGUAGES = ("en", "zh")             # what --lang offers; settings.LANGUAGE_NAMES maps what readers type onto these
MARKER = ".course-language"          # the file a Chinese edition folder holds
_chosen: Optional[str] = None
normalise = settings.normalise_language        # 'zh-CN' -> 'zh'; the names live with the setting


def set_language(lang: Optional[str]) -> None:
    """Speak ``lang`` ('en' or 'zh') from now on; None goes back to deciding as above."""
    global _chosen
    _chosen = None if lang is None else (normalise(lang) or None)


@contextmanager
def speaking(lang: Optional[str]):
    """``with speaking('zh'): report.text()``: one block in one language, then as before."""
    global _chosen
    before = _chosen
    set_language(lang)
    try:
        yield
    finally:
        _chosen = before


def edition_of(folder: Path) -> Optional[str]:
    """'zh' when ``folder`` is a Chinese edition folder (it holds the marker file), else None."""
    try:
        text = (folder / MARKER).read_text(encoding="utf-8")[:32]
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    try:
        return normalise(text)
    except ValueError:
        return None          # a marker we did not write is not a reason to fail a notebook


def from_locale(environ=None) -> Optional[str]:
    """'zh' for a Chinese locale (``LANG=zh_CN.UTF-8``), 'en' for any other that is set, else None."""
    env = os.environ if environ is None else environ
    for name in ("LC_ALL", "LC_MESSAGES", "LANG"):
        if env.get(name):
            return "zh" if env[name].lower().startswith("zh") else "en"
    first = (env.get("LANGUAGE") or "").split(":")[0]
    return ("zh" if first.lower().startswith("zh") else "en") if first else None


# What language() decided, per (working folder, variables), for FRESH_S seconds: the player asks once per
# caption and the doctor once per sentence, and deciding walks the folders up to the settings file
# (~50 us; half of the time a 19k-event film strip spent on its frames).  A variable or folder that
# changes is a new key at once; an edited settings file or a new marker is seen within FRESH_S.
FRESH_S = 1.0
_VARIABLES = ("ALLOCATOR_REF_LANG", settings.FILE_ENV, "LC_ALL", "LC_MESSAGES", "LANG", "LANGUAGE",
              "JPY_SESSION_NAME")
_decided: dict = {}


def forget() -> None:
    """Decide afresh at the next call (after writing a settings file or a marker in the same folder)."""
    _decided.clear()


def language(start: Optional[Path] = None) -> str:
    """'en' or 'zh', decided in the order the module's docstring gives."""
    if _chosen:
        return _chosen
    try:
        here = start or Path.cwd()
    except OSError:
        here = None
    key = (str(here), tuple(os.environ.get(name) for name in _VARIABLES))
    now = time.monotonic()
    hit = _decided.get(key)
    if hit is not None and hit[0] > now:
        return hit[1]
    decided = _decide(here, start)
    if len(_decided) > 64:               # a long session in many folders keeps few keys
        _decided.clear()
    _decided[key] = (now + FRESH_S, decided)
    return decided


def _decide(here: Optional[Path], start: Optional[Path]) -> str:
    setting = settings.get("language", start)           # a bad value is a SettingsError there
    asked = normalise(setting.value)
    if asked and setting.source == settings.SETTINGS["language"][0]:
        return asked                                     # ALLOCATOR_REF_LANG beats the folder
    return (notebook_language() or (edition_of(here) if here else None) or asked or from_locale() or "en")


def language_in_metadata(notebook: dict) -> Optional[str]:
    """'zh' for a notebook whose metadata says ``"allocator_ref": {"language": "zh_CN"}``, else None."""
    meta = notebook.get("metadata") if isinstance(notebook, dict) else None
    course = meta.get("allocator_ref") if isinstance(meta, dict) else None
    said = course.get("language") if isinstance(course, dict) else None
    try:
        return normalise(said) if isinstance(said, str) else None
    except ValueError:
        return None              # metadata we did not write is no reason to fail a notebook


def notebook_language() -> Optional[str]:
    """The language the running notebook's metadata names (None outside a notebook, or if it names none)."""
    path = os.environ.get("JPY_SESSION_NAME")
    if path and path.endswith(".ipynb"):
        try:
            with open(path, encoding="utf-8") as f:
                import json
                return language_in_metadata(json.loads(f.read(8 << 20)))
        except (OSError, ValueError):
            return None
    if "google.colab" in sys.modules:
        return _colab_notebook_language()
    return None


_COLAB: list = []


def _colab_notebook_language() -> Optional[str]:
    """Colab keeps the notebook in the browser; ``get_ipynb`` hands it to the kernel (asked once)."""
    if not _COLAB:
        try:
            from google.colab import _message            # only on Colab
            reply = _message.blocking_request("get_ipynb", timeout_sec=5) or {}
            _COLAB.append(language_in_metadata(reply.get("ipynb") or {}))
        except Exception:                                 # an older Colab, or no answer: the folder decides
            _COLAB.append(None)
    return _COLAB[0]
