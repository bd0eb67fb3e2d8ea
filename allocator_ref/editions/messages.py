"""The tools' sentences in the reader's language: ``tr = translator("doctor")``, then ``tr("...")``.

The English sentence is written where it is used, as before, so the code still reads as English;
``tr`` returns it, or its Chinese from ``allocator_ref/locale/zh_CN/<domain>.po`` when
:func:`~allocator_ref.editions.language.language` is 'zh'.  Fields are named and filled after the
lookup, so a translator may move them::

    tr("{n} segments on stream {stream}", n=3, stream=7)

The catalogue is gettext PO, like the chapters' (``polib`` reads it; Poedit edits it): the msgid is
the English sentence exactly as in the code, the msgstr its Chinese.  ``python -m
allocator_ref.editions update`` adds every ``tr("...")`` sentence of the package to its domain's
catalogue; ``check`` (and the in-step test) fails on a sentence with no Chinese, and on a Chinese
sentence whose ``{fields}`` differ from its English.  A sentence missing from a catalogue is said in
English rather than not at all.

Only literal strings are looked up: ``tr(f"...")`` could never match a catalogue, and the test that
reads the package refuses it.
"""
from __future__ import annotations

import string
from functools import lru_cache
from pathlib import Path

from .language import language

LOCALE = Path(__file__).resolve().parent.parent / "locale" / "zh_CN"
DOMAINS = ("doctor", "labs", "course")   # one catalogue per tool family; course: the chapters' printed lines


def catalogue_path(domain: str) -> Path:
    return LOCALE / f"{domain}.po"


@lru_cache(maxsize=None)
def _table(domain: str) -> dict:
    """msgid -> msgstr for the translated, non-fuzzy entries (read once per process)."""
    import polib                      # only a Chinese reader pays for reading the catalogue
    path = catalogue_path(domain)
    if not path.exists():
        return {}
    po = polib.pofile(str(path), encoding="utf-8")
    return {e.msgid: e.msgstr for e in po if e.msgstr and "fuzzy" not in e.flags and not e.obsolete}


def fields_of(text: str) -> set:
    """The named ``{fields}`` of a sentence (``{n:,}`` counts as ``n``)."""
    try:
        return {name for _, name, _, _ in string.Formatter().parse(text) if name is not None}
    except ValueError:                # a stray brace: the in-step test reports the sentence
        return {"<unbalanced braces>"}


def formats_of(text: str) -> list:
    """Each field's conversion and format spec, in order (``{n:>400000000}`` -> ``[('n', None, '>400000000')]``)."""
    try:
        return sorted((name, conversion or "", spec or "") for _, name, spec, conversion
                      in string.Formatter().parse(text) if name is not None)
    except ValueError:
        return [("<unbalanced braces>", "", "")]


def in_step(english: str, translated: str) -> bool:
    """Whether a translation may be filled in as its English is: the same fields, each with the same
    conversion and format spec (a hostile ``{n:>400000000}`` makes a 400 MB string, ``{n!r}`` shows a
    value the English never shows)."""
    return fields_of(translated) == fields_of(english) and formats_of(translated) == formats_of(english)


def say(domain: str, english: str, **fields) -> str:
    """``english`` in the current language, its fields filled in.

    A translation whose fields are not the English sentence's (a typo, or ``{n.__class__}`` in a
    hostile catalogue: ``str.format`` follows attributes), or that gives a field a format spec or
    conversion of its own, is not used: the English is said instead.
    """
    text = _table(domain).get(english, english) if language() == "zh" else english
    if text is not english and not in_step(english, text):
        text = english
    return text.format(**fields) if fields else text


def translator(domain: str, later: bool = False):
    """A one-argument-plus-fields function for one catalogue: ``tr = translator("labs")``.

    ``later=True`` gives gettext's ``N_``: it marks a sentence for the catalogue and returns it as
    written, for text made once at import (an exercise's title) and shown later, in the language of
    that moment, with ``say(domain, text)``."""
    if domain not in DOMAINS:
        raise ValueError(f"no message catalogue {domain!r}; known: {', '.join(DOMAINS)}")

    def tr(english: str, **fields) -> str:
        if later:
            if fields:
                raise TypeError("a sentence marked for later is shown whole: give it no fields")
            return english
        return say(domain, english, **fields)
    tr.domain = domain
    return tr
