"""A catalogue is text, never markup: the doctor's HTML escapes every translated sentence (issue 57, item 7).

Each Chinese sentence of the tools' catalogue is given a ``<script>`` element (its fields kept, so
that say() uses it); the doctor's page, its SVG block map's tooltips, notes and legend included,
must carry none of them as markup.
"""
from __future__ import annotations

import re
import shutil

import polib
import pytest

import allocator_ref as ar
from allocator_ref.editions import language as lang
from allocator_ref.editions import messages
from allocator_ref.memory_doctor import examples


@pytest.fixture
def hostile_catalogue(tmp_path, monkeypatch):
    for domain in messages.DOMAINS:
        po = polib.pofile(str(messages.catalogue_path(domain)), encoding="utf-8")
        for entry in po:
            if entry.msgstr:
                entry.msgstr = "<script>alert(1)</script><img src=x onerror=alert(2)>" + entry.msgstr
        po.save(str(tmp_path / f"{domain}.po"))
    monkeypatch.setattr(messages, "LOCALE", tmp_path)
    messages._table.cache_clear()
    yield
    messages._table.cache_clear()


@pytest.mark.parametrize("run", [lambda: examples.fragmentation_run(200), lambda: examples.shortage_run(900)])
def test_no_translated_sentence_enters_the_doctors_page_as_markup(hostile_catalogue, run):
    with lang.speaking("zh"):
        page = ar.doctor(run()).html()
    assert "alert(1)" in page, "the hostile catalogue was not used: the test proves nothing"
    assert not re.search(r"<script|<img src=x", page, re.I), re.findall(r".{60}<script.{20}", page)[:3]
