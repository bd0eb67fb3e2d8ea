"""Are the English and Chinese editions in step?  One function per question, each a list of problems.

``python -m allocator_ref.editions check`` prints them and ``tests/test_edition_zh.py`` fails on
them; the test that an English edit is caught runs the same functions on a copy of the course.
"""
from __future__ import annotations

import html
import re
from collections import Counter
from functools import lru_cache
from pathlib import Path
from urllib.parse import unquote

import nbformat

from allocator_ref.editions import build, catalog
from allocator_ref.editions.messages import translator

# What keeps the editions out of step is read by translators: `editions check` says it in their language.
tr = translator("doctor")

ROOT = catalog.ROOT


def _rel(path: Path, root: Path) -> str:
    return path.resolve().relative_to(root.resolve()).as_posix()


def catalogue_problems(source: Path, root: Path = ROOT) -> list:
    """Every English block translated (non-empty, not fuzzy), by the FORMAT's rules, in Chinese."""
    path = catalog.catalogue_path(source, root)
    rel = _rel(source, root)
    if not path.exists():
        return [tr("{source}: no catalogue {catalogue} (python -m allocator_ref.editions update {source}, then "
                   "translate it)", source=rel, catalogue=_rel(path, root))]
    po = catalog.load(path)
    if po.metadata.get("Language") != catalog.LANGUAGE:
        return [tr("{catalogue}: header Language is {found}, not {wanted}", catalogue=_rel(path, root),
                   found=repr(po.metadata.get("Language")), wanted=repr(catalog.LANGUAGE))]
    done = catalog.translations(po)
    claimed = catalog.claimed_values(source)
    problems = []
    for block in catalog.english_blocks(source):
        where = tr("{source}: block {block}", source=rel, block=repr(block[:70]))
        if block not in done:
            entry = po.find(block)
            if entry and entry.fuzzy:
                problems.append(tr("{where} is fuzzy (its English changed: check the old translation); run `make "
                                   "translations` and translate it in {catalogue}", where=where,
                                   catalogue=_rel(path, root)))
            else:
                problems.append(tr("{where} is untranslated; run `make translations` and translate it in "
                                   "{catalogue}", where=where, catalogue=_rel(path, root)))
            continue
        chinese = done[block]
        values = claimed.get(block, [])
        problems += [_at(where, p) for p in catalog.rule_problems(block, chinese, values)]
        problems += [_at(where, p) for p in rendered_problems(block, chinese)]
        stated = tuple(f"**{v}**" for v in values) + tuple(f"**{catalog.claimed_in_chinese(v)}**" for v in values)
        runs = catalog.english_runs(chinese, catalog.NAMES + stated)
        if runs:
            problems.append(tr("{where}: English left in the Chinese prose: {runs}", where=where, runs=runs[:3]))
    return problems


def _at(where: str, problem: str) -> str:
    """One problem after the place it was found ("file: block '...': problem")."""
    return tr("{where}: {problem}", where=where, problem=problem)


# ---------------------------------------------------------------- what a paragraph renders to
SCHEME = re.compile(r"^([a-z][a-z0-9+.\-]*):", re.I)
INVISIBLE = re.compile(r"[\x00-\x20\x7f]")         # a browser drops these in a scheme ("java\tscript:")


@lru_cache(maxsize=1)
def _markdown():
    """markdown-it-py (CommonMark, as Jupyter renders a markdown cell) with GFM's tables and strikethrough,
    its autolinks when linkify-it-py is installed, and every link kept as written: its own check
    (validateLink drops ``javascript:`` links) would hide exactly what this looks for."""
    from markdown_it import MarkdownIt
    md = MarkdownIt("commonmark").enable(["table", "strikethrough"])
    try:
        import linkify_it  # noqa: F401
        md = md.enable("linkify")
        md.options["linkify"] = True
    except ImportError:                           # bare www. addresses: found by WWW below instead
        pass
    md.validateLink = lambda url: True
    md.normalizeLink = lambda url: url
    return md


WWW = re.compile(r"(?<![\w/.@-])www\.[^\s<>()]+", re.I)


def target(url: str) -> str:
    """A link target as a browser follows it: entities and %-escapes decoded, spaces and controls out of the
    scheme, the scheme in lower case (``JavaScript&#58;`` is ``javascript:``)."""
    url = unquote(html.unescape(url)).strip()
    m = re.match(r"^([^/?#]*?):", url)
    if m:
        url = INVISIBLE.sub("", m.group(1)).lower() + url[m.end(1):]
    return url


def leaves_the_page(url: str) -> bool:
    """A scheme (``https:``, ``ftp:``, ``javascript:``, ``data:``) or another host (``//host``, ``\\\\host``)."""
    return bool(SCHEME.match(url)) or url.startswith(("//", "\\\\", "/\\", "\\/"))


def rendered(text: str) -> dict:
    """What a block of markdown renders to that a reader follows or runs: link and image targets, code
    (fenced with ``` or ~~~, or indented), raw HTML, reference definitions, each as a Counter."""
    env: dict = {}
    found = {kind: Counter() for kind in ("link", "code", "html", "reference")}
    stack = list(_markdown().parse(text, env))
    while stack:
        token = stack.pop()
        stack.extend(token.children or [])
        if token.type == "link_open":
            found["link"][target(token.attrGet("href") or "")] += 1
        elif token.type == "image":
            found["link"][target(token.attrGet("src") or "")] += 1
        elif token.type in ("fence", "code_block"):
            found["code"][token.content.strip()] += 1
        elif token.type in ("html_block", "html_inline"):
            found["html"][token.content.strip().lower()] += 1
        elif token.type == "text":
            for bare in WWW.findall(token.content):
                found["link"][target("//" + bare)] += 1
    for definition in env.get("references", {}).values():
        found["reference"][target(definition.get("href", ""))] += 1
    return found


def rendered_problems(msgid: str, msgstr: str) -> list:
    """What a translation renders to that its English does not: an off-site link, image or autolink
    (any scheme, any case, entity-encoded or protocol-relative), a reference definition, a code block of
    any kind, raw HTML.  Relative links may be added (to a chapter, the glossary), as the FORMAT says."""
    english, chinese = rendered(msgid), rendered(msgstr)
    problems = []
    for url in chinese["link"]:
        if leaves_the_page(url) and url not in english["link"] and url not in english["reference"]:
            problems.append(tr("link or image {url} is not in the English: a translation adds no off-site link",
                               url=repr(url[:80])))
    for url in chinese["reference"] - english["reference"]:
        problems.append(tr("reference definition {url} is not in the English", url=repr(url[:80])))
    for code in chinese["code"] - english["code"]:
        problems.append(tr("a code block that is not in the English ({code}): a translation adds no code",
                           code=repr(code[:40])))
    for tag in chinese["html"] - english["html"]:
        problems.append(tr("HTML {tag} is not in the English: a translation adds no markup", tag=repr(tag[:40])))
    return problems


def notebook_problems(source: Path, root: Path = ROOT) -> list:
    """The committed Chinese notebooks are what ``build`` writes now, with the English code cells."""
    problems = []
    wanted = build.rendered(source, root)
    english_for = {build.chinese_twin(source.with_suffix(".ipynb")): source.with_suffix(".ipynb")}
    if len(wanted) == 2:
        student = build.english_notebook_of(source, root)
        english_for[build.chinese_twin(student)] = student
    for path, text in wanted.items():
        rel = _rel(path, root)
        if not path.exists():
            problems.append(tr("{path} is missing: run `make translations`", path=rel))
            continue
        if path.read_text(encoding="utf-8") != text:
            problems.append(tr("{path} differs from what `make translations` writes: regenerate it, never edit it",
                               path=rel))
        english = english_for[path]
        if english.exists():
            problems += [_at(rel, p) for p in code_cell_problems(nbformat.read(english, as_version=4),
                                                                   nbformat.read(path, as_version=4))]
    return problems


def code_cell_problems(english, chinese) -> list:
    """The same cells in the same order; every code cell byte for byte, with its tags."""
    def shape(nb):
        return [(c.cell_type, c.source if c.cell_type == "code" else None,
                 list(c.get("metadata", {}).get("tags", []))) for c in nb.cells]
    a, b = shape(english), shape(chinese)
    if len(a) != len(b):
        return [tr("{n} cells, the English notebook has {in_english}", n=len(b), in_english=len(a))]
    return [tr("cell {i} differs from the English notebook's ({kind} cell)", i=i, kind=x[0])
            for i, (x, y) in enumerate(zip(a, b)) if x != y]


def stray_notebooks(root: Path = ROOT) -> list:
    """Chinese notebooks whose English source is gone (``build`` removes them)."""
    wanted = build.outputs(root)
    return [tr("{path} has no English source any more: run `make translations`", path=_rel(p, root))
            for p in build.stale(root) if p not in wanted]


def problems(root: Path = ROOT, sources: list | None = None) -> list:
    """Everything that keeps the two editions out of step."""
    found = []
    for source in sources if sources is not None else catalog.sources(root):
        found += catalogue_problems(source, root)
        if catalog.catalogue_path(source, root).exists():
            found += notebook_problems(source, root)
    found += stray_notebooks(root)
    if sources is None and root == ROOT:          # the tools' sentences belong to the package, not a root
        from allocator_ref.editions import tool_catalogues
        found += tool_catalogues.problems()
    return found
