"""The Chinese edition's prose catalogues: one gettext PO file per English notebook source.

FORMAT (fixed; every translator and tool relies on it)
------------------------------------------------------
Sources
    The English jupytext MyST markdown files ``chapters/NN_*.md`` and
    ``labs/source/labNN_*.md``.  They stay the one source of every code cell.
Catalogue per source
    ``locale/zh_CN/<source path without .md>.po``, e.g.
    ``locale/zh_CN/chapters/03_streams.po`` and
    ``locale/zh_CN/labs/source/lab03_fix_the_race.po``: gettext PO written with
    ``polib``; header ``Language: zh_CN``, UTF-8; any wrap width (msgids are
    compared as strings).
Units
    For every markdown cell of the source as ``jupytext.read(path)`` reads it,
    the cell's source is split into blocks: a block is a maximal run of
    non-blank lines, except that a fenced code block (from a line whose stripped
    text starts with ``````` to the next such line) stays in one block together
    with any blank lines inside it.  Each block -- its lines joined by ``"\\n"``,
    trailing whitespace of the block stripped -- is one msgid (no msgctxt).  A
    block with no prose (pure code, a table of numbers, a raw HTML tag) still
    gets an entry, whose msgstr may equal its msgid.
Translation rules
    Code identifiers, API names, config keys, error texts, URLs and file names
    stay as written; inline code in backticks is unchanged; markdown links keep
    their targets (a link to another chapter or lab points at the Chinese
    edition's notebook where one exists: simplest is to keep the English target,
    which ``build`` re-points at the Chinese twin; a target with ``zh/`` before
    the file name is accepted too); every ``<!-- ... -->`` marker appears in the
    msgstr exactly as in the msgid; every bold value ``**...**`` that a claim
    checks (named in the markdown cell's ``claims`` metadata, which never enters
    a msgid) appears in bold as in the msgid, or as its Chinese in the course
    catalogue (``allocator_ref/locale/zh_CN/course.po``).  A msgstr is
    *translated* only when it is non-empty and not fuzzy.

Why gettext catalogues, one entry per paragraph
-----------------------------------------------
A translated copy of a notebook rots the day its English changes, and nothing
says where.  Here the Chinese notebook is *built*: its code cells are copied
byte for byte from the English source (a code cell exists once), and each
markdown block is looked up in the catalogue by its exact English text.  When
an English paragraph changes, its msgid no longer matches: ``update`` adds the
new paragraph as an untranslated entry, marks the old translation fuzzy and
keeps it as the previous text (``#| msgid``) beside it, so a translator sees
what changed and what the old Chinese said; the in-step test fails until a
translator fills it in.  PO is what translators' tools (Poedit, Weblate,
Lokalize) already edit and diff, ``polib`` is a small, well-kept pure-Python
reader/writer, and a paragraph is the unit a translator reorders sentences
within -- a sentence unit would force English word order on the Chinese.

``python -m allocator_ref.editions extract|update|build|check`` (see
``allocator_ref/editions/__main__.py``); ``make translations`` runs update and
build.
"""
from __future__ import annotations

import re
from pathlib import Path

import jupytext
import polib

from .messages import translator

# A translation's broken rules are read by its translator: `editions check` says them in their language.
tr = translator("doctor")

ROOT = Path(__file__).resolve().parents[2]
LANGUAGE = "zh_CN"
LOCALE_DIR = ROOT / "locale" / LANGUAGE
FENCE = "```"
# A code fence opens and closes on a line whose stripped text starts with ```.
CLAIM_MARKER = re.compile(r"<!--.*?-->", re.S)


def sources(root: Path = ROOT) -> list:
    """The English sources that have (or will have) a catalogue, chapters first."""
    return sorted((root / "chapters").glob("[0-9][0-9]_*.md")) + sorted(
        (root / "labs" / "source").glob("lab[0-9][0-9]_*.md"))


def catalogue_path(source: Path, root: Path = ROOT) -> Path:
    """``chapters/03_streams.md`` -> ``locale/zh_CN/chapters/03_streams.po``."""
    rel = source.resolve().relative_to(root.resolve())
    return root / "locale" / LANGUAGE / rel.with_suffix(".po")


def split_blocks(text: str) -> list:
    """A markdown cell's blocks: runs of non-blank lines; a ``` fence keeps its blank lines."""
    blocks, current, in_fence = [], [], False
    for line in text.split("\n"):
        if line.strip().startswith(FENCE):
            in_fence = not in_fence
            current.append(line)
        elif in_fence or line.strip():
            current.append(line)
        elif current:
            blocks.append("\n".join(current).rstrip())
            current = []
    if current:
        blocks.append("\n".join(current).rstrip())
    return [b for b in blocks if b]


def read_notebook(source: Path):
    return jupytext.read(source)


def english_blocks(source: Path) -> list:
    """Every msgid of one source, in order of appearance, each once."""
    seen, order = set(), []
    for cell in read_notebook(source).cells:
        if cell.cell_type != "markdown":
            continue
        for block in split_blocks(cell.source):
            if block not in seen:
                seen.add(block)
                order.append(block)
    return order


def claimed_values(source: Path) -> dict:
    """{English block: the values its cell claims that stand in bold in it}, for the translation rules
    (the names live in the markdown cell's ``claims`` metadata, not in the text a msgid holds)."""
    found: dict = {}
    for cell in read_notebook(source).cells:
        values = cell.metadata.get("claims", {}).values() if cell.cell_type == "markdown" else ()
        for block in split_blocks(cell.source) if values else ():
            found.setdefault(block, []).extend(v for v in values if f"**{v}**" in block)
    return found


def new_catalogue(source: Path, root: Path = ROOT) -> polib.POFile:
    po = polib.POFile(wrapwidth=0)
    po.metadata = {
        "Project-Id-Version": f"allocator-course {source.resolve().relative_to(root.resolve()).as_posix()}",
        "Language": LANGUAGE,
        "MIME-Version": "1.0",
        "Content-Type": "text/plain; charset=UTF-8",
        "Content-Transfer-Encoding": "8bit",
        "Plural-Forms": "nplurals=1; plural=0;",
    }
    return po


def load(path: Path) -> polib.POFile:
    po = polib.pofile(str(path), wrapwidth=0)
    po.wrapwidth = 0
    return po


def is_translated(entry: polib.POEntry) -> bool:
    return bool(entry.msgstr) and "fuzzy" not in entry.flags and not entry.obsolete


def translations(po: polib.POFile) -> dict:
    """{English block: Chinese block} of every translated, live entry."""
    return {e.msgid: e.msgstr for e in po if is_translated(e)}


def _closest(block: str, candidates: list) -> polib.POEntry | None:
    """The retired entry whose English is most like a changed block (difflib ratio >= 0.5)."""
    import difflib
    best, best_ratio = None, 0.5
    for entry in candidates:
        ratio = difflib.SequenceMatcher(None, entry.msgid, block).ratio()
        if ratio >= best_ratio:
            best, best_ratio = entry, ratio
    return best


def update(source: Path, root: Path = ROOT) -> tuple[polib.POFile, dict]:
    """The catalogue for ``source`` made to match its English now (not written).

    A block still present keeps its entry.  A new block gets an empty msgstr;
    when it replaces a retired block that had a translation, it gets that old
    translation marked ``fuzzy`` with the old English as ``previous_msgid``
    (what ``msgmerge`` does), so it counts as untranslated until a translator
    checks it.  Retired entries stay at the end as obsolete (``#~``).
    Returns (catalogue, counts).
    """
    path = catalogue_path(source, root)
    old = load(path) if path.exists() else new_catalogue(source, root)
    blocks = english_blocks(source)
    wanted = set(blocks)
    by_id: dict = {}
    for e in old:                       # a live entry wins over an obsolete one with the same English
        if e.msgid and (e.msgid not in by_id or by_id[e.msgid].obsolete):
            by_id[e.msgid] = e
    retired = [e for e in by_id.values() if e.msgid not in wanted and e.msgstr]
    po = new_catalogue(source, root)
    po.metadata.update({k: v for k, v in old.metadata.items() if k not in po.metadata})
    counts = {"kept": 0, "new": 0, "fuzzy": 0, "obsolete": 0}
    for block in blocks:
        if block in by_id:              # unchanged (or an English block that came back)
            entry = by_id[block]
            entry.obsolete = False
            po.append(entry)
            counts["kept"] += 1
            continue
        entry = polib.POEntry(msgid=block, msgstr="")
        guess = _closest(block, retired)
        if guess is not None:
            retired.remove(guess)
            entry.msgstr = guess.msgstr
            entry.flags.append("fuzzy")
            entry.previous_msgid = guess.msgid
            counts["fuzzy"] += 1
        else:
            counts["new"] += 1
        po.append(entry)
    for entry in by_id.values():
        if entry.msgid not in wanted and entry.msgstr:
            entry.obsolete = True
            entry.flags = [f for f in entry.flags if f != "fuzzy"]
            po.append(entry)
            counts["obsolete"] += 1
    return po, counts


def write(po: polib.POFile, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    po.wrapwidth = 0
    po.save(str(path))


def untranslated(source: Path, root: Path = ROOT) -> list:
    """English blocks of ``source`` with no translated entry in its catalogue."""
    path = catalogue_path(source, root)
    done = translations(load(path)) if path.exists() else {}
    return [b for b in english_blocks(source) if b not in done]


# ------------------------------------------------------------------ the translation rules, checked

MARKER = re.compile(r"<!--.*?-->", re.S)
INLINE_CODE = re.compile(r"(`+)(.+?)\1", re.S)
LINK_TARGET = re.compile(r"\]\(([^)\s]+)\)")
URL = re.compile(r"https?://[^\s)>\"'`]+")
HTML_TAG = re.compile(r"</?([A-Za-z][A-Za-z0-9-]*)\b[^>]*>")
SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*:")


def _fenced(text: str) -> list:
    """The fenced code blocks of a markdown block (each from ``` to ```)."""
    return re.findall(r"^[ \t]*```.*?^[ \t]*```", text, re.S | re.M)


def rule_problems(msgid: str, msgstr: str, claimed=()) -> list:
    """What a translation breaks of the FORMAT's rules (empty when it keeps them all).

    Markers verbatim; each ``claimed`` value (the block's bold values its cell's ``claims`` metadata
    names: ``claimed_values``) in bold as in the English or as its Chinese; every inline code span, URL
    and fenced code block of the English still in the Chinese; every link target kept (``build``
    re-points relative ones).
    """
    problems = []
    for marker in MARKER.findall(msgid):
        if msgstr.count(marker) != msgid.count(marker):
            problems.append(tr("marker {marker} must appear as in the English", marker=repr(marker)))
    for value in claimed:
        if f"**{value}**" not in msgstr and f"**{claimed_in_chinese(value)}**" not in msgstr:
            problems.append(tr("claimed value {value} must appear in bold exactly as in the English (or as its "
                               "Chinese in allocator_ref/locale/zh_CN/course.po)", value=f"**{value}**"))
    for m in INLINE_CODE.finditer(_strip_fences(msgid)):
        if m.group(0) not in msgstr:
            problems.append(tr("inline code {code} must stay as written, in its backticks", code=m.group(0)))
    for fence in _fenced(msgid):
        if fence not in msgstr:
            problems.append(tr("the fenced block {fence}... must stay as written", fence=repr(fence[:40])))
    for target in LINK_TARGET.findall(msgid):
        twin = re.sub(r"([^/]+)$", r"zh/\1", target)       # the Chinese edition's copy of the same file
        if target not in msgstr and twin not in msgstr and _english_only(target):
            problems.append(tr("link target {target} must be kept", target=repr(target)))
    for url in URL.findall(msgid):
        if url.rstrip(".,;") not in msgstr:
            problems.append(tr("URL {url} must be kept", url=repr(url)))
    return problems + added_problems(msgid, msgstr)


def claimed_in_chinese(value: str) -> str:
    """``ran out of memory`` -> ``显存不足`` when the course catalogue translates the phrase (the chapter
    computes it with ``course.result_words``/``course.words``, which say that same Chinese in the Chinese
    run, so the claim test checks it), else the value unchanged (a number, a name)."""
    from .messages import _table
    return _table("course").get(value) or value


def added_problems(msgid: str, msgstr: str) -> list:
    """What a translation adds that its English does not have, and a reader would trust because the
    course shows it: a web address or scheme link (a phishing link, ``javascript:``), a raw HTML tag
    (``<script>``, an ``<iframe>``), a fenced block (code the reader would copy), a ``<!-- -->`` marker
    (a claim that checks nothing).  Relative links (to a chapter, the glossary) may be added."""
    problems = []
    english_urls = {u.rstrip(".,;") for u in URL.findall(msgid)}
    for url in URL.findall(msgstr):
        if url.rstrip(".,;") not in english_urls:
            problems.append(tr("URL {url} is not in the English: a translation adds no web address", url=repr(url)))
    for target in LINK_TARGET.findall(msgstr):
        if SCHEME.match(target) and target not in msgid and not URL.match(target):
            problems.append(tr("link target {target} is not in the English", target=repr(target)))
    english_tags = {t.lower() for t in HTML_TAG.findall(_code_free(msgid))}
    for tag in HTML_TAG.findall(_code_free(msgstr)):
        if tag.lower() not in english_tags:
            problems.append(tr("HTML tag {tag} is not in the English: a translation adds no markup", tag=f"<{tag}>"))
    if len(_fenced(msgstr)) > len(_fenced(msgid)):
        problems.append(tr("a fenced block that is not in the English: a translation adds no code"))
    for marker in set(MARKER.findall(msgstr)) - set(MARKER.findall(msgid)):
        problems.append(tr("marker {marker} is not in the English", marker=repr(marker)))
    return problems


def _code_free(text: str) -> str:
    """The text without fenced blocks and inline code (``<T>`` inside backticks is not markup)."""
    return INLINE_CODE.sub("", _strip_fences(text))


def _strip_fences(text: str) -> str:
    for fence in _fenced(text):
        text = text.replace(fence, "")
    return text


def _english_only(target: str) -> bool:
    """A link target the Chinese must keep: all but a link to the Chinese edition itself
    (chapter 0 links the other language, so each side's target differs)."""
    return not re.search(r"(^|/)zh/|zh-CN", target)


# English left in Chinese prose: a run of this many English words outside code, links, markers and
# claimed values is a sentence nobody translated.
ENGLISH_RUN = 4
_WORD_RUN = re.compile(r"[A-Za-z][A-Za-z'’-]*(?:[ \t]+(?:[A-Za-z][A-Za-z'’-]*|[0-9][0-9.,]*)[,;:]?)+")


def english_runs(msgstr: str, allowed: tuple = ()) -> list:
    """Runs of >= ENGLISH_RUN English words left in a Chinese block's prose.

    Code (fenced and inline), links (text and target), markers, URLs and quoted error texts
    (in double quotes) do not count: they stay in English on purpose.  ``allowed`` lists names
    (e.g. ``"Ascend Extension for PyTorch"``) that are English by nature, and the block's claimed
    values (a claim states what the run printed).
    """
    text = _strip_fences(msgstr)
    text = MARKER.sub(" § ", text)
    text = INLINE_CODE.sub(" § ", text)
    text = re.sub(r"\[[^\]]*\]\([^)]*\)", " § ", text)      # a link: its text is often a page's title
    text = URL.sub(" § ", text)
    text = re.sub(r"\"[^\"\n]*\"|“[^”\n]*”", " § ", text)
    for name in allowed:
        text = text.replace(name, " § ")
    runs = []
    for m in _WORD_RUN.finditer(text):
        words = [w for w in re.split(r"[ \t]+", m.group(0)) if re.match(r"[A-Za-z]", w)]
        if len(words) >= ENGLISH_RUN:
            runs.append(m.group(0))
    return runs


# Names that are English by nature and may stand in Chinese prose (products, projects, titles).
NAMES = ("Ascend Extension for PyTorch", "Zero to JupyterHub", "Open in Colab", "Google Colab",
         "Jupyter Book", "Nsight Systems", "NVIDIA Management Library")
