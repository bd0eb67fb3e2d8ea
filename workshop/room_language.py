"""The language of a workshop room: the chapter learners land on, and the language the tools speak.

A room is English or Chinese.  ``WORKSHOP_LANGUAGE`` (``en`` or ``zh``; ``zh_CN``, ``zh-CN`` mean
``zh``) says which; without it, the ``language`` key of the room's ``course-settings.toml``; without
that (or with ``auto``), English.

* Where learners land: chapter 0 of that edition (``chapters/zh/00_setup_and_tour.ipynb`` in a
  Chinese room); ``WORKSHOP_FIRST_PAGE`` still names any other page.
* What the room itself says to a learner (the hub's pages: a server that could not start, the live
  view refused): :func:`learner_line`, in the room's language.  What it says to the instructor (the
  hub's log, a refused start, the ``make`` targets) stays English: workshop/README.md says so.
* What the tools speak (the doctor's report, ``check()``'s feedback): ``allocator_ref`` reads the
  ``language`` key of the settings file the hub hands every learner (ALLOCATOR_REF_SETTINGS;
  ``allocator_ref/editions/language.py``).  When ``WORKSHOP_LANGUAGE`` overrides the file,
  :func:`room_settings` writes the room's copy of it with that key set, so there is still one file
  and the order ``allocator_ref`` decides in is kept: a notebook in a Chinese edition folder speaks
  Chinese in an English room, and an English chapter speaks the room's language.

Nothing here imports ``allocator_ref``: the hub may run on a Python without the course.
"""
from __future__ import annotations

import os
import re
import tomllib
from pathlib import Path
from typing import Optional

FIRST_PAGES = {"en": "chapters/00_setup_and_tour.ipynb", "zh": "chapters/zh/00_setup_and_tour.ipynb"}
# Every line the room shows a learner, in each language the course speaks (the hub may run without
# allocator_ref, so not its catalogues).  The details a learner cannot act on go to the hub's log.
LEARNER_LINES = {
    "not_a_learner": {"en": "{user} is not an account of this workshop: the hub starts no server for it",
                      "zh": "{user} 不是本次工作坊的账号：hub 不会为它启动服务器"},
    "no_copy": {"en": "your copy of the course could not be made: tell your instructor (the hub's log says why)",
                "zh": "未能为你准备课程副本：请告诉讲师（原因写在 hub 的日志里）"},
    "instructor_only": {"en": "the live view is the instructor's: your own results are in your notebook",
                        "zh": "实时视图只对讲师开放：你自己的结果就在你的 notebook 里"},
}


class RoomLanguageError(ValueError):
    """A language the course does not speak; the message says which ones it does."""


def normalise(text: str, where: str) -> Optional[str]:
    """'en' or 'zh' (None for 'auto' or nothing); anything else is a RoomLanguageError naming ``where``."""
    value = (text or "").strip().lower().replace("-", "_")
    if value in ("", "auto"):
        return None
    if value == "en" or value.startswith("en_"):
        return "en"
    if value == "zh" or value.startswith(("zh_", "zh.")):
        return "zh"
    raise RoomLanguageError(f"{where}={text!r} is not a language the course speaks; use en or zh")


def settings_language(settings: Path) -> Optional[str]:
    """The ``language`` of a course-settings.toml's [course] table ('en', 'zh' or None)."""
    try:
        data = tomllib.loads(settings.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError):
        return None                 # allocator_ref reports a bad settings file to the learner itself
    return normalise(str(data.get("course", {}).get("language", "")), f"{settings}: language")


def asked_language(environ=None) -> Optional[str]:
    """What WORKSHOP_LANGUAGE asks for: 'en', 'zh', or None (unset or auto)."""
    env = os.environ if environ is None else environ
    return normalise(env.get("WORKSHOP_LANGUAGE", ""), "WORKSHOP_LANGUAGE")


def room_language(settings: Path, environ=None) -> str:
    """'en' or 'zh': WORKSHOP_LANGUAGE, else the settings file's ``language``, else English."""
    return asked_language(environ) or settings_language(settings) or "en"


def first_page(language: str) -> str:
    """Chapter 0 of the room's edition, relative to the learner's copy of the course."""
    return FIRST_PAGES[language]


def room_settings(settings: Path, asked: Optional[str], folder: Path) -> Path:
    """The settings file the learners get: ``settings`` itself unless WORKSHOP_LANGUAGE asked for
    another language (``asked``), else a copy in ``folder`` (readable by every learner) with
    ``language`` set in [course]."""
    language = asked
    if language is None or settings_language(settings) == language:
        return settings
    text = settings.read_text(encoding="utf-8") if settings.is_file() else "[course]\n"
    line = f'language = "{language}"   # the room\'s language (WORKSHOP_LANGUAGE)'
    if re.search(r"^[ \t]*language[ \t]*=", text, re.M):
        text = re.sub(r"^[ \t]*language[ \t]*=.*$", line, text, count=1, flags=re.M)
    elif re.search(r"^[ \t]*\[course\][ \t]*$", text, re.M):
        text = re.sub(r"^([ \t]*\[course\][ \t]*)$", lambda m: m.group(1) + "\n" + line, text, count=1,
                      flags=re.M)
    else:
        text += f"\n[course]\n{line}\n"
    copy = folder / ".course-settings.toml"          # no user name starts with a dot
    copy.write_text(text, encoding="utf-8")
    copy.chmod(0o644)
    return copy


def learner_line(key: str, language: str, **fields: str) -> str:
    """One line of the room to a learner, in ``language`` ('en' or 'zh'; anything else: English)."""
    lines = LEARNER_LINES[key]
    return lines.get(language, lines["en"]).format(**fields)
