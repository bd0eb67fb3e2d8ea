"""The tools' language: who decides it, in which order, and how a sentence finds its Chinese."""
from __future__ import annotations

import textwrap

import polib
import pytest

from allocator_ref import settings
from allocator_ref.editions import language as lang
from allocator_ref.editions import messages, tool_catalogues
from allocator_ref.editions.build import outputs


pytestmark = pytest.mark.usefixtures("plain_language")      # tests/conftest.py


def test_english_is_the_default():
    assert lang.language() == "en"


@pytest.mark.parametrize("value", ["zh", "zh_CN", "zh-CN", "zh-Hans", "ZH", "zh_CN.UTF-8"])
def test_the_variable_asks_for_chinese(monkeypatch, value):
    monkeypatch.setenv("ALLOCATOR_REF_LANG", value)
    assert lang.language() == "zh"


def test_a_bad_variable_is_the_settings_error(monkeypatch):
    monkeypatch.setenv("ALLOCATOR_REF_LANG", "klingon")
    with pytest.raises(settings.SettingsError, match="ALLOCATOR_REF_LANG=.klingon. .*auto, en, zh"):
        lang.language()


def test_a_chinese_edition_folder_speaks_chinese(tmp_path):
    (tmp_path / lang.MARKER).write_text("zh\n")
    assert lang.language() == "zh"


def test_the_variable_beats_the_folder(monkeypatch, tmp_path):
    (tmp_path / lang.MARKER).write_text("zh\n")
    monkeypatch.setenv("ALLOCATOR_REF_LANG", "en")
    assert lang.language() == "en"


def test_a_room_setting_and_a_locale(monkeypatch, tmp_path):
    monkeypatch.setenv("LANG", "zh_CN.UTF-8")
    assert lang.language() == "zh"
    (tmp_path / settings.FILE_NAME).write_text('[course]\nlanguage = "en"\n')
    lang.forget()                                # a file edited in the same folder is seen within FRESH_S
    assert lang.language() == "en"               # the room's setting beats the reader's locale


def test_a_decision_is_kept_briefly_and_a_variable_change_is_seen_at_once(monkeypatch, tmp_path):
    assert lang.language() == "en"
    (tmp_path / lang.MARKER).write_text("zh\n")
    assert lang.language() == "en"               # the same folder and variables: decided a moment ago
    later = lang.time.monotonic() + lang.FRESH_S + 0.01
    monkeypatch.setattr(lang.time, "monotonic", lambda: later)
    assert lang.language() == "zh"               # ... and decided afresh once that moment has passed
    monkeypatch.setenv("ALLOCATOR_REF_LANG", "en")
    assert lang.language() == "en"               # a variable is part of the key: seen at once


def test_a_hostile_marker_is_ignored(tmp_path):
    (tmp_path / lang.MARKER).write_bytes(b"\xff\xfe" + b"x" * 5000)
    assert lang.language() == "en"


def test_speaking_restores(monkeypatch):
    with lang.speaking("zh"):
        assert lang.language() == "zh"
    assert lang.language() == "en"


def test_every_chinese_edition_folder_gets_the_marker():
    markers = [p for p in outputs() if p.name == lang.MARKER]
    assert all(p.parent.name == "zh" for p in markers) and len(markers) == 3
    assert all(p.exists() and p.read_text() == "zh\n" for p in markers)


def test_a_sentence_finds_its_chinese_and_its_fields(monkeypatch, tmp_path):
    po = polib.POFile()
    po.append(polib.POEntry(msgid="{n} segments on stream {stream}", msgstr="流 {stream} 上有 {n} 个段"))
    po.append(polib.POEntry(msgid="fuzzy one", msgstr="模糊", flags=["fuzzy"]))
    po.append(polib.POEntry(msgid="size {n}", msgstr="大小 {n.__class__.__mro__}"))   # a hostile catalogue
    po.save(str(tmp_path / "doctor.po"))
    monkeypatch.setattr(messages, "LOCALE", tmp_path)
    messages._table.cache_clear()
    try:
        tr = messages.translator("doctor")
        assert tr("{n} segments on stream {stream}", n=3, stream=7) == "3 segments on stream 7"
        with lang.speaking("zh"):
            assert tr("{n} segments on stream {stream}", n=3, stream=7) == "流 7 上有 3 个段"
            assert tr("fuzzy one") == "fuzzy one"          # a fuzzy entry is not a translation
            assert tr("not in the catalogue") == "not in the catalogue"
            assert tr("size {n}", n=5) == "size 5"               # attributes never followed
    finally:
        messages._table.cache_clear()


def test_an_unknown_domain_is_refused():
    with pytest.raises(ValueError, match="no message catalogue"):
        messages.translator("nosuch")


def test_the_scan_refuses_what_a_catalogue_cannot_match(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "m.py").write_text(textwrap.dedent('''
        from allocator_ref.editions.messages import translator
        tr = translator("doctor")
        x = 3
        tr("fine {x}", x=x)
        tr(f"never {x}")
    '''))
    found, problems = tool_catalogues.scan(pkg)
    assert list(found["doctor"]) == ["fine {x}"]
    assert len(problems) == 1 and "literal English sentence" in problems[0]


def test_the_package_catalogues_are_complete():
    assert tool_catalogues.problems() == []


@pytest.mark.parametrize("hostile", ["{n:>400000000}", "{n!r}", "{n!s:>9}", "{n:{n}}"])
def test_a_translation_with_a_format_spec_of_its_own_is_said_in_english_and_refused(monkeypatch, tmp_path,
                                                                                    hostile):
    """Issue 57, item 7: `{n:>400000000}` passed both checks and made a 400 MB string."""
    po = polib.POFile()
    po.append(polib.POEntry(msgid="size {n}", msgstr=f"大小 {hostile}"))
    po.append(polib.POEntry(msgid="kept {n:,}", msgstr="保留 {n:,}"))             # the English's own spec: fine
    po.save(str(tmp_path / "doctor.po"))
    monkeypatch.setattr(messages, "LOCALE", tmp_path)
    messages._table.cache_clear()
    try:
        tr = messages.translator("doctor")
        with lang.speaking("zh"):
            assert tr("size {n}", n=5) == "size 5"
            assert tr("kept {n:,}", n=5000) == "保留 5,000"
        pkg = tmp_path / "pkg"
        pkg.mkdir()
        (pkg / "m.py").write_text('from allocator_ref.editions.messages import translator\n'
                                  'tr = translator("doctor")\ntr("size {n}", n=1)\ntr("kept {n:,}", n=1)\n')
        problems = [p for p in tool_catalogues.problems(pkg) if "doctor.po" in p]
        assert len(problems) == 1 and "format specs or conversions" in problems[0] and "size {n}" in problems[0]
    finally:
        messages._table.cache_clear()
